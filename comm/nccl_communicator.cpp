// The nccl communicator: buffers in the cuda device's memory, reductions on a stream of its
// own ordered after the compute stream by events, so they run under the backward kernels
// that follow. Bootstrapped by the host communicator (mpi), which broadcasts rank 0's
// ncclUniqueId and serves the host-memory collectives. Each rank drives one GPU: the device
// it is given (MEMWEAVE_CUDA_DEVICE, e.g. the local rank).
#include <cuda_runtime.h>
#include <nccl.h>

#include "memweave/comm/communicator.hpp"

namespace memweave {
namespace {

void check_cuda(cudaError_t rc, const char* call) {
  if (rc != cudaSuccess) {
    throw device_error(std::string("CUDA: ") + call + " failed: " + cudaGetErrorString(rc));
  }
}

void check_nccl(ncclResult_t rc, const char* call) {
  if (rc != ncclSuccess) {
    throw device_error(std::string("NCCL: ") + call + " failed: " + ncclGetErrorString(rc));
  }
}

// An event owned (RAII); timing enabled, for the reduction's measured time.
struct cuda_event {
  cudaEvent_t e = nullptr;
  cuda_event() { check_cuda(cudaEventCreate(&e), "cudaEventCreate"); }
  ~cuda_event() { (void)cudaEventDestroy(e); }
  cuda_event(const cuda_event&) = delete;
  cuda_event& operator=(const cuda_event&) = delete;
};

// The communicator's GPU current for the calling thread while it lives (the device's calls
// restore the previous one, so NCCL's would otherwise run on whichever is current).
class device_scope {
 public:
  explicit device_scope(int ordinal) {
    check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
    check_cuda(cudaSetDevice(ordinal), "cudaSetDevice");
  }
  ~device_scope() { (void)cudaSetDevice(previous_); }
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;

 private:
  int previous_ = 0;
};

class nccl_request final : public comm_request {
 public:
  nccl_request() = default;
  void wait_on(stream& s) override {
    check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(s.native_handle()), done.e, 0),
               "cudaStreamWaitEvent");
  }
  double reduce_seconds() const noexcept override {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, start.e, done.e) != cudaSuccess) return 0;
    return ms / 1e3;
  }
  // The compute stream waits on the device: the host does not see how long.
  double waited_seconds() const noexcept override { return 0; }

  cuda_event start, done;
};

class nccl_communicator final : public communicator {
 public:
  nccl_communicator(communicator& host, device& dev) : host_(&host), dev_(dev) {
    MEMWEAVE_EXPECTS(dev.kind() == device_kind::cuda,
                     "the nccl communicator needs the cuda device, got " + dev.name());
    check_cuda(cudaStreamGetDevice(compute(), &ordinal_), "cudaStreamGetDevice");
    const device_scope on(ordinal_);
    ncclUniqueId id{};
    if (host_->rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    host_->broadcast_host(std::as_writable_bytes(std::span(&id, 1)), 0);
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check_nccl(ncclCommInitRank(&comm_, host_->size(), id, host_->rank()), "ncclCommInitRank");
  }
  ~nccl_communicator() override {
    if (comm_ != nullptr) (void)ncclCommDestroy(comm_);
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }

  int rank() const noexcept override { return host_->rank(); }
  int size() const noexcept override { return host_->size(); }
  std::string name() const override { return "nccl"; }

  std::unique_ptr<comm_request> start_allreduce(std::vector<std::span<float>> buffers, float scale,
                                                stream& after) override {
    const device_scope on(ordinal_);
    auto r = std::make_unique<nccl_request>();
    check_cuda(cudaEventRecord(r->start.e, static_cast<cudaStream_t>(after.native_handle())),
               "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(stream_, r->start.e, 0), "cudaStreamWaitEvent");
    // Each rank's share of the global batch multiplies its contribution inside the reduction.
    ncclRedOp_t op;
    check_nccl(ncclRedOpCreatePreMulSum(&op, &scale, ncclFloat32, ncclScalarHostImmediate, comm_),
               "ncclRedOpCreatePreMulSum");
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (std::span<float> b : buffers) {
      check_nccl(ncclAllReduce(b.data(), b.data(), b.size(), ncclFloat32, op, comm_, stream_),
                 "ncclAllReduce");
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    check_nccl(ncclRedOpDestroy(op, comm_), "ncclRedOpDestroy");
    check_cuda(cudaEventRecord(r->done.e, stream_), "cudaEventRecord");
    return r;
  }

  void broadcast(std::span<float> buffer, int root) override {
    const device_scope on(ordinal_);
    check_nccl(ncclBroadcast(buffer.data(), buffer.data(), buffer.size(), ncclFloat32, root, comm_,
                             stream_),
               "ncclBroadcast");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  void broadcast_host(std::span<std::byte> buffer, int root) override {
    host_->broadcast_host(buffer, root);
  }
  std::vector<double> allgather(std::span<const double> values) override {
    return host_->allgather(values);
  }
  void barrier() override { host_->barrier(); }
  int peer_failure_code() const noexcept override { return host_->peer_failure_code(); }
  std::string peer_failure() const override { return host_->peer_failure(); }
  void fail(const std::string& what, int exit_code) noexcept override {
    // Pending NCCL operations would wait forever for the failed rank: abort them first.
    if (comm_ != nullptr) (void)ncclCommAbort(comm_), comm_ = nullptr;
    host_->fail(what, exit_code);
  }

 private:
  cudaStream_t compute() const {
    return static_cast<cudaStream_t>(dev_.get_stream(stream_role::compute).native_handle());
  }

  communicator* host_;
  device& dev_;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  int ordinal_ = 0;  // the GPU of dev_
};

}  // namespace

std::unique_ptr<communicator> make_nccl_communicator(communicator& host, device& dev) {
  return std::make_unique<nccl_communicator>(host, dev);
}

}  // namespace memweave
