// The cuda backend: a thin layer over the CUDA runtime. Every runtime call is checked
// (MEMWEAVE_CUDA_CHECK); allocation failures become out_of_memory with the numbers.
//
// Invariants and thread safety:
// - Each call makes the device's ordinal current for the calling thread (cudaSetDevice)
//   and restores the thread's previous device afterwards where the thread had a context
//   current, so an embedding framework's notion of "current device" is left alone and a
//   thread that never used CUDA gets no context on GPU 0.
// - cudaMalloc/cudaFree/cudaMemGetInfo are called by their plain names: an LD_PRELOAD
//   interposer may override them and forward back here; it handles its own re-entry.
// - launch() runs the work as a CUDA host function. An exception there cannot cross the
//   driver, so it is caught and kept (the first one, by launch order) in the stream's
//   failure state; synchronize() and events recorded after the failing launch report it.
//   A per-stream mutex keeps launch numbering in the same order as the stream's queue.
// - The three streams are non-blocking (they do not synchronize with the legacy default
//   stream); events are created without timing, which makes record/wait cheapest, and
//   with blocking sync when asked (event_options::blocking_sync), so that a thread waiting
//   in synchronize() sleeps instead of spinning on a core.
#include "device/cuda/cuda_device.hpp"
#include "device/run_work.hpp"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <mutex>
#include <new>
#include <optional>

#include "device/cuda/cuda_check.hpp"
#include "device/cuda/cuda_throughput.hpp"
#include "device/cuda/relaxed_capture_mode.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/log.hpp"
#include "memweave/core/units.hpp"

namespace memweave::cuda_backend {

[[noreturn]] void throw_cuda_error(cudaError_t error, const char* call, const char* file,
                                   int line) {
  (void)cudaGetLastError();  // clear a non-sticky error so later calls do not see it
  throw device_error(std::string(call) + " failed: " + cudaGetErrorName(error) + ": " +
                     cudaGetErrorString(error) + " (at " + file + ":" + std::to_string(line) +
                     "); check the GPU with nvidia-smi, or run with MEMWEAVE_DEVICE=host");
}

namespace {

std::string error_text(cudaError_t error) {
  return std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error);
}

/// Makes `ordinal` the calling thread's current device for the scope, then restores the
/// previous one where the thread had a context current (a thread that never used CUDA is
/// left on `ordinal`: restoring "device 0" there would create a context on GPU 0). The
/// nothrow form (for destructors and deallocate) logs instead.
class device_scope {
 public:
  explicit device_scope(int ordinal) {
    enter(ordinal);
    if (failed_ != cudaSuccess) throw_cuda_error(failed_, "cudaSetDevice", __FILE__, __LINE__);
  }
  device_scope(int ordinal, std::nothrow_t) noexcept {
    enter(ordinal);
    if (failed_ != cudaSuccess) {
      log(log_level::error,
          "cudaSetDevice(" + std::to_string(ordinal) + ") failed: " + error_text(failed_));
    }
  }
  ~device_scope() {
    if (restore_ && cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
  }
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;
  bool ok() const noexcept { return failed_ == cudaSuccess; }

 private:
  void enter(int ordinal) noexcept {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      (void)cudaGetLastError();
      previous_ = -1;
    }
    if (previous_ == ordinal) return;
    // cudaGetDevice says 0 on a thread that never chose a device; setting 0 back there
    // would create a context on GPU 0 (cudaSetDevice initializes the primary context).
    // Restore only where the thread had a context current.
    const bool had_context = previous_ >= 0 && context_current();
    failed_ = cudaSetDevice(ordinal);
    if (failed_ != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    restore_ = had_context;
  }

  int previous_ = -1;
  bool restore_ = false;
  cudaError_t failed_ = cudaSuccess;
};

/// What a stream's host functions report: the first launch (by number) that threw.
struct failure_state {
  std::mutex mu;  // guards both fields
  std::uint64_t first_failed = std::numeric_limits<std::uint64_t>::max();
  std::string message;
};

/// One launch() in flight: owned by the host function, which deletes it.
struct host_work {
  std::function<void()> work;
  std::shared_ptr<failure_state> failure;
  std::uint64_t number;  // the launch's position in its stream
};

void run_host_work(void* data) noexcept {
  std::unique_ptr<host_work> w(static_cast<host_work*>(data));
  std::string message;
  if (!detail::run_work(w->work, message)) return;
  std::lock_guard lock(w->failure->mu);
  if (w->number < w->failure->first_failed) {
    w->failure->first_failed = w->number;
    w->failure->message.swap(message);
  }
}

class cuda_event final : public event {
 public:
  cuda_event(int ordinal, const event_options& options) : ordinal_(ordinal) {
    device_scope scope(ordinal_);
    const unsigned flags =
        cudaEventDisableTiming | (options.blocking_sync ? cudaEventBlockingSync : 0u);
    MEMWEAVE_CUDA_CHECK(cudaEventCreateWithFlags(&event_, flags));
  }
  ~cuda_event() override {
    device_scope scope(ordinal_, std::nothrow);
    const cudaError_t e = cudaEventDestroy(event_);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      log(log_level::error, "cudaEventDestroy failed: " + error_text(e));
    }
  }

  bool query() override {
    device_scope scope(ordinal_);
    const cudaError_t e = cudaEventQuery(event_);
    if (e == cudaSuccess) return true;
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    throw_cuda_error(e, "cudaEventQuery(event)", __FILE__, __LINE__);
  }

  void synchronize() override {
    {
      device_scope scope(ordinal_);
      MEMWEAVE_CUDA_CHECK(cudaEventSynchronize(event_));
    }
    if (!failure_) return;
    std::string message;
    {
      std::lock_guard lock(failure_->mu);
      if (failure_->first_failed >= launches_before_) return;
      message = failure_->message;
    }
    throw device_error("cuda device " + std::to_string(ordinal_) +
                       ": work launched before this event failed: " + message +
                       " (the stream stays failed; fix the failing work and recreate the device)");
  }

  cudaEvent_t handle() const noexcept { return event_; }
  /// Called by record(): which stream's failures count, and how many launches precede.
  void set_origin(std::shared_ptr<failure_state> failure, std::uint64_t launches_before) {
    failure_ = std::move(failure);
    launches_before_ = launches_before;
  }

 private:
  const int ordinal_;
  cudaEvent_t event_ = nullptr;
  std::shared_ptr<failure_state> failure_;  // of the stream of the latest record()
  std::uint64_t launches_before_ = 0;       // launches enqueued on it before that record
};

cuda_event& as_cuda(event& e, const char* what) {
  auto* ce = dynamic_cast<cuda_event*>(&e);
  if (ce == nullptr) {
    throw invalid_argument(std::string("cuda stream ") + what +
                           ": the event was not created by a cuda device; create it with "
                           "create_event() of the device that owns the stream");
  }
  return *ce;
}

class cuda_stream final : public stream {
 public:
  cuda_stream(int ordinal, stream_role role)
      : ordinal_(ordinal), role_(role), failure_(std::make_shared<failure_state>()) {
    device_scope scope(ordinal_);
    MEMWEAVE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~cuda_stream() override {
    device_scope scope(ordinal_, std::nothrow);
    // Let queued host functions run (they own their payloads) before the stream goes.
    cudaError_t e = cudaStreamSynchronize(stream_);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      log(log_level::error, "cudaStreamSynchronize at destruction failed: " + error_text(e));
    }
    e = cudaStreamDestroy(stream_);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      log(log_level::error, "cudaStreamDestroy failed: " + error_text(e));
    }
  }

  stream_role role() const noexcept override { return role_; }

  void launch(std::function<void()> work, double /*cost_s*/) override {
    MEMWEAVE_EXPECTS(static_cast<bool>(work),
                     std::string("cuda ") + to_string(role_) +
                         " stream: launch of an empty std::function; pass the work to run");
    auto payload = std::make_unique<host_work>(host_work{std::move(work), failure_, 0});
    device_scope scope(ordinal_);
    std::lock_guard lock(order_mu_);
    payload->number = launches_;
    MEMWEAVE_CUDA_CHECK(cudaLaunchHostFunc(stream_, &run_host_work, payload.get()));
    payload.release();  // the host function owns it now
    ++launches_;
  }

  void copy_async(void* dst, const void* src, std::size_t bytes, copy_kind kind) override {
    if (bytes == 0) return;
    device_scope scope(ordinal_);
    // The direction is the pointers' (unified addressing): `kind` is what the copy is
    // for (the host and null devices charge their link by it), and a staged tensor's
    // memory, which a step may name as device memory, is page-locked host memory.
    (void)kind;
    MEMWEAVE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
  }

  void record(event& e) override {
    cuda_event& ce = as_cuda(e, "record");
    device_scope scope(ordinal_);
    std::lock_guard lock(order_mu_);
    MEMWEAVE_CUDA_CHECK(cudaEventRecord(ce.handle(), stream_));
    ce.set_origin(failure_, launches_);
  }

  void wait(event& e) override {
    cuda_event& ce = as_cuda(e, "wait");
    device_scope scope(ordinal_);
    MEMWEAVE_CUDA_CHECK(cudaStreamWaitEvent(stream_, ce.handle(), 0));
  }

  void synchronize() override {
    {
      device_scope scope(ordinal_);
      MEMWEAVE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    std::string message;
    {
      std::lock_guard lock(failure_->mu);
      if (failure_->first_failed == std::numeric_limits<std::uint64_t>::max()) return;
      message = failure_->message;
    }
    throw device_error("cuda device " + std::to_string(ordinal_) + " " + to_string(role_) +
                       " stream: launched work failed: " + message +
                       " (the stream stays failed; fix the failing work and recreate the device)");
  }

  void* native_handle() const noexcept override { return stream_; }

 private:
  const int ordinal_;
  const stream_role role_;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<failure_state> failure_;  // shared with host functions and events
  std::mutex order_mu_;                     // keeps launch numbers in queue order
  std::uint64_t launches_ = 0;              // launches enqueued (guarded by order_mu_)
};

class cuda_device final : public device {
 public:
  explicit cuda_device(int ordinal) : ordinal_(ordinal) {
    device_scope scope(ordinal_);
    cudaDeviceProp prop{};
    MEMWEAVE_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal_));
    name_ = std::string(prop.name) + " (cuda:" + std::to_string(ordinal_) + ")";
    for (std::size_t i = 0; i < streams_.size(); ++i) {
      streams_[i] = std::make_unique<cuda_stream>(ordinal_, static_cast<stream_role>(i));
    }
  }

  device_kind kind() const noexcept override { return device_kind::cuda; }
  std::string name() const override { return name_; }

  void* allocate(std::size_t bytes) override {
    if (bytes == 0) return nullptr;
    device_scope scope(ordinal_);
    const relaxed_capture_mode relaxed;  // an arena taken while a graph is captured
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaSuccess) return p;
    (void)cudaGetLastError();
    std::size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) (void)cudaGetLastError();
    throw out_of_memory(name_ + ": cudaMalloc of " + format_bytes(bytes) +
                            " failed: " + error_text(e) + "; " + format_bytes(free) + " of " +
                            format_bytes(total) +
                            " free; free device memory (other processes?), lower "
                            "MEMWEAVE_POOL_BYTES / MEMWEAVE_POOL_FRACTION or the batch",
                        bytes, free, free);
  }

  void deallocate(void* p, std::size_t /*bytes*/) noexcept override {
    if (p == nullptr) return;
    device_scope scope(ordinal_, std::nothrow);
    const cudaError_t e = cudaFree(p);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      log(log_level::error, name_ + ": cudaFree failed: " + error_text(e));
    }
  }

  void* allocate_pinned(std::size_t bytes) override {
    if (bytes == 0) return nullptr;
    device_scope scope(ordinal_);
    void* p = nullptr;
    const relaxed_capture_mode relaxed;
    const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (e == cudaSuccess) return p;
    (void)cudaGetLastError();
    const std::size_t free = static_cast<std::size_t>(::sysconf(_SC_AVPHYS_PAGES)) *
                             static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    throw out_of_memory(name_ + ": cudaHostAlloc of " + format_bytes(bytes) +
                            " pinned bytes failed: " + error_text(e) + "; about " +
                            format_bytes(free) +
                            " of host memory free; lower MEMWEAVE_HOST_POOL_BYTES",
                        bytes, free, free);
  }

  void deallocate_pinned(void* p, std::size_t /*bytes*/) noexcept override {
    if (p == nullptr) return;
    device_scope scope(ordinal_, std::nothrow);
    const cudaError_t e = cudaFreeHost(p);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      log(log_level::error, name_ + ": cudaFreeHost failed: " + error_text(e));
    }
  }

  memory_info memory() const override {
    device_scope scope(ordinal_);
    std::size_t free = 0, total = 0;
    MEMWEAVE_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return {free, total};
  }

  stream& get_stream(stream_role role) override {
    const auto i = static_cast<std::size_t>(role);
    MEMWEAVE_EXPECTS(i < streams_.size(), "cuda device: get_stream of stream_role " +
                                              std::to_string(i) +
                                              ", expected compute, host_to_device or "
                                              "device_to_host");
    return *streams_[i];
  }

  std::unique_ptr<event> make_event(const event_options& options) override {
    return std::make_unique<cuda_event>(ordinal_, options);
  }

  std::optional<device_throughput> throughput() override {
    std::call_once(throughput_once_, [this] {
      device_scope scope(ordinal_);
      throughput_ = measure_throughput(ordinal_);
    });
    return throughput_;
  }

  void synchronize() override {
    std::exception_ptr first;
    for (auto& s : streams_) {
      try {
        s->synchronize();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
  }

 private:
  const int ordinal_;
  std::string name_;
  std::array<std::unique_ptr<cuda_stream>, 3> streams_;  // by stream_role
  std::once_flag throughput_once_;
  std::optional<device_throughput> throughput_;  // set once, under throughput_once_
};

}  // namespace

namespace {

// A driver function through the runtime, as of CUDA `version`, so that memweave needs no link
// to libcuda (absent on machines without a driver); nullptr where it cannot be had.
template <class F>
F driver_entry(const char* name, unsigned int version) noexcept {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &f, version, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<F>(f);
}

}  // namespace

bool context_current() noexcept {
  // cuCtxGetCurrent(CUcontext*); 0 = CUDA_SUCCESS.
  using get_current_fn = int (*)(void**);
  static const auto get_current = driver_entry<get_current_fn>("cuCtxGetCurrent", 4000);
  if (get_current == nullptr) return true;  // cannot tell: keep the runtime's own answer
  void* ctx = nullptr;
  return get_current(&ctx) == 0 && ctx != nullptr;
}

namespace {

// The driver calls of push/pop_primary_context (CUresult is an int, CUdevice an int, CUcontext
// a pointer; 0 = CUDA_SUCCESS).
struct primary_context_calls {
  int (*device_get)(int*, int) = driver_entry<int (*)(int*, int)>("cuDeviceGet", 12000);
  int (*retain)(void**, int) = driver_entry<int (*)(void**, int)>("cuDevicePrimaryCtxRetain",
                                                                  12000);
  int (*release)(int) = driver_entry<int (*)(int)>("cuDevicePrimaryCtxRelease", 12000);
  int (*push)(void*) = driver_entry<int (*)(void*)>("cuCtxPushCurrent", 12000);
  int (*pop)(void**) = driver_entry<int (*)(void**)>("cuCtxPopCurrent", 12000);
  bool usable() const noexcept {
    return device_get != nullptr && retain != nullptr && release != nullptr && push != nullptr &&
           pop != nullptr;
  }
};

const primary_context_calls& primary_context() noexcept {
  static const primary_context_calls calls;
  return calls;
}

}  // namespace

bool push_primary_context(int ordinal) noexcept {
  const primary_context_calls& c = primary_context();
  if (!c.usable()) return false;
  int dev = 0;
  void* ctx = nullptr;
  if (c.device_get(&dev, ordinal) != 0 || c.retain(&ctx, dev) != 0) return false;
  if (c.push(ctx) != 0) {
    (void)c.release(dev);
    return false;
  }
  return true;
}

void pop_primary_context(int ordinal) noexcept {
  const primary_context_calls& c = primary_context();
  void* popped = nullptr;
  int dev = 0;
  (void)c.pop(&popped);
  if (c.device_get(&dev, ordinal) == 0) (void)c.release(dev);
}

int device_count(std::string* why) noexcept {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  try {
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      if (why != nullptr) *why = "cudaGetDeviceCount failed: " + error_text(e);
      return 0;
    }
    if (n <= 0 && why != nullptr) *why = "cudaGetDeviceCount found no device";
  } catch (...) {  // no memory for the reason: the count is still right
  }
  return e == cudaSuccess && n > 0 ? n : 0;
}

std::unique_ptr<device> make_cuda_device(int ordinal) {
  std::string why;
  const int n = device_count(&why);
  if (n == 0) {
    throw no_device_error("the cuda device was asked for but no CUDA GPU can be used (" + why +
                          "); run on the simulated device (--device host, "
                          "MEMWEAVE_DEVICE=host), or plan without one (`memweave plan`, "
                          "MEMWEAVE_DEVICE=null)");
  }
  if (ordinal < 0 || ordinal >= n) {
    throw no_device_error("MEMWEAVE_CUDA_DEVICE=" + std::to_string(ordinal) + " but " +
                          std::to_string(n) + " CUDA device(s) are present (ordinals 0.." +
                          std::to_string(n - 1) +
                          "); set MEMWEAVE_CUDA_DEVICE (device_options::cuda_ordinal) to one "
                          "of them");
  }
  return std::make_unique<cuda_device>(ordinal);
}

}  // namespace memweave::cuda_backend
