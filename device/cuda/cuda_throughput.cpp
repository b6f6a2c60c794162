// Why a timed copy for the link and not the PCIe generation: the rate a run gets depends on
// the slot, the NUMA node the pinned memory is on and the platform (NVLink-C2C on a Grace
// Hopper), none of which the runtime reports; a 64 MiB copy takes a few milliseconds on any
// of them, once per device.
#include "device/cuda/cuda_throughput.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "device/cuda/cuda_check.hpp"
#include "memweave/core/log.hpp"

namespace memweave::cuda_backend {
namespace {

constexpr std::size_t k_probe_bytes = std::size_t{64} << 20;
constexpr int k_probe_repeats = 3;

int attribute(cudaDeviceAttr which, int ordinal) {
  int value = 0;
  MEMWEAVE_CUDA_CHECK(cudaDeviceGetAttribute(&value, which, ordinal));
  return value;
}

struct device_buffer_free {
  void operator()(void* p) const noexcept { (void)cudaFree(p); }
};
struct host_buffer_free {
  void operator()(void* p) const noexcept { (void)cudaFreeHost(p); }
};
struct stream_destroy {
  void operator()(CUstream_st* s) const noexcept { (void)cudaStreamDestroy(s); }
};
struct event_destroy {
  void operator()(CUevent_st* e) const noexcept { (void)cudaEventDestroy(e); }
};

// Seconds of the fastest of k_probe_repeats copies of `bytes` (after one not counted, which
// pays for the first touch of the mappings).
double fastest_copy_s(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                      cudaStream_t s, cudaEvent_t start, cudaEvent_t stop) {
  float best_ms = std::numeric_limits<float>::max();
  for (int i = 0; i <= k_probe_repeats; ++i) {
    MEMWEAVE_CUDA_CHECK(cudaEventRecord(start, s));
    MEMWEAVE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
    MEMWEAVE_CUDA_CHECK(cudaEventRecord(stop, s));
    MEMWEAVE_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    MEMWEAVE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (i > 0) best_ms = std::min(best_ms, ms);
  }
  return best_ms / 1e3;
}

double link_bytes_per_s(int ordinal) {
  // 0, said why: the cost model keeps the default link.
  const auto untimed = [ordinal](const char* memory) {
    (void)cudaGetLastError();
    log(log_level::info, "cuda:" + std::to_string(ordinal) + ": no " + memory +
                             " memory to time the host link; the cost model keeps the default "
                             "link");
    return 0.0;
  };
  void* d = nullptr;
  void* h = nullptr;
  if (cudaMalloc(&d, k_probe_bytes) != cudaSuccess) return untimed("device");
  const std::unique_ptr<void, device_buffer_free> dev(d);
  if (cudaHostAlloc(&h, k_probe_bytes, cudaHostAllocDefault) != cudaSuccess) {
    return untimed("page-locked");
  }
  const std::unique_ptr<void, host_buffer_free> host(h);
  cudaStream_t s = nullptr;
  MEMWEAVE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const std::unique_ptr<CUstream_st, stream_destroy> stream(s);
  cudaEvent_t start = nullptr, stop = nullptr;
  MEMWEAVE_CUDA_CHECK(cudaEventCreateWithFlags(&start, cudaEventDefault));
  const std::unique_ptr<CUevent_st, event_destroy> start_event(start);
  MEMWEAVE_CUDA_CHECK(cudaEventCreateWithFlags(&stop, cudaEventDefault));
  const std::unique_ptr<CUevent_st, event_destroy> stop_event(stop);
  const double in = fastest_copy_s(d, h, k_probe_bytes, cudaMemcpyHostToDevice, s, start, stop);
  const double out = fastest_copy_s(h, d, k_probe_bytes, cudaMemcpyDeviceToHost, s, start, stop);
  const double slower = std::max(in, out);
  if (slower <= 0) return 0;
  // Two significant digits: a copy's time varies by a few percent from run to run, and a
  // model that moved with it would plan the same command differently each time.
  const double rate = static_cast<double>(k_probe_bytes) / slower;
  const double unit = std::pow(10.0, std::floor(std::log10(rate)) - 1);
  return std::round(rate / unit) * unit;
}

}  // namespace

std::optional<device_throughput> measure_throughput(int ordinal) {
  gpu_attributes a;
  a.major = attribute(cudaDevAttrComputeCapabilityMajor, ordinal);
  a.minor = attribute(cudaDevAttrComputeCapabilityMinor, ordinal);
  a.multiprocessors = attribute(cudaDevAttrMultiProcessorCount, ordinal);
  a.clock_khz = attribute(cudaDevAttrClockRate, ordinal);
  a.memory_clock_khz = attribute(cudaDevAttrMemoryClockRate, ordinal);
  a.memory_bus_bits = attribute(cudaDevAttrGlobalMemoryBusWidth, ordinal);
  std::optional<device_throughput> t = throughput_of(a, 0);
  if (t) t->link_bytes_per_s = link_bytes_per_s(ordinal);  // nothing timed for no model
  return t;
}

}  // namespace memweave::cuda_backend
