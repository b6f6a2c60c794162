// A plain CUDA program for cuda_dropin_test (label gpu): linked with the real shared cudart
// only and run with LD_PRELOAD=libmemweave_preload.so on a GPU, it checks the interposer's
// paths that the stand-in runtime (fake_cudart) can only imitate: stream capture into a CUDA
// graph that is then instantiated and launched, and cudaDeviceReset under a live pool and a
// page-locked host pool. It finds memweave through dlsym (RTLD_DEFAULT). Run as
// `memweave_cuda_dropin_probe SCENARIO`; exits 0 when every expectation held, else 1 with
// "FAIL: ..." lines.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fake_cudart/probe_check.hpp"
#include "memweave/memweave.h"

namespace {

template <class F>
F memweave_symbol(const char* name) {
  return reinterpret_cast<F>(::dlsym(RTLD_DEFAULT, name));
}

constexpr std::size_t k_block = 1 << 20;

// The pools' live allocations (memweaveGetStats): what tells a kept block from a freed one
// (memweaveOwns says only whether a pointer lies in a pool's memory).
std::size_t live_allocations() {
  auto stats = memweave_symbol<memweave_status (*)(memweave_stats*)>("memweaveGetStats");
  memweave_stats st{};
  if (stats == nullptr || stats(&st) != MEMWEAVE_SUCCESS) return static_cast<std::size_t>(-1);
  return st.live_allocations;
}

// A CUDA call expected to return `want`; otherwise a failure naming what it returned.
#define CHECK_CUDA(call, want, what)                                        \
  do {                                                                      \
    const cudaError_t got_ = (call);                                        \
    CHECK(got_ == (want), "%s: returned %s", what, cudaGetErrorName(got_)); \
  } while (0)

// The device bytes of `p` read back and compared with `byte`; returns the mismatches.
std::size_t mismatches(const void* p, std::size_t bytes, unsigned char byte) {
  std::vector<unsigned char> host(bytes, static_cast<unsigned char>(~byte));
  if (cudaMemcpy(host.data(), p, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) return bytes;
  std::size_t bad = 0;
  for (unsigned char b : host) bad += b != byte;
  return bad;
}

// An allocation on a capturing stream must be the graph's (the runtime's allocation node):
// a pool block would be written by every launch of the graph after the pool gave it away. A
// pool block's free in a capture is refused (it would run whenever the graph does) and the
// block stays live. The graph then instantiates and runs, twice, and the pool serves again.
// `preloaded` false: the same graph with the runtime alone (the control: what the runtime
// itself supports on this machine).
void stream_capture(bool preloaded) {
  auto owns = memweave_symbol<int (*)(const void*)>("memweaveOwns");
  CHECK((owns != nullptr) == preloaded, "libmemweave.so is%s preloaded", preloaded ? " not" : "");
  if ((owns != nullptr) != preloaded) return;
  const auto pool_owns = [&](const void* p) { return preloaded ? owns(p) : -1; };
  cudaStream_t s = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess, "stream");
  void* before = nullptr;
  CHECK_CUDA(cudaMallocAsync(&before, k_block, s), cudaSuccess, "cudaMallocAsync");
  if (preloaded) CHECK(owns(before) == 1, "a block before the capture is not the pool's");
  CHECK_CUDA(cudaMemsetAsync(before, 0x21, k_block, s), cudaSuccess, "memset");
  CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess, "capture");
  void* in_graph = nullptr;
  CHECK_CUDA(cudaMallocAsync(&in_graph, k_block, s), cudaSuccess, "cudaMallocAsync in a capture");
  CHECK(in_graph != nullptr && pool_owns(in_graph) <= 0,
        "an allocation in a capture came from the pool, not the runtime (the graph's)");
  // The graph's work: its own block filled from the block allocated before it, and back.
  CHECK_CUDA(cudaMemcpyAsync(in_graph, before, k_block, cudaMemcpyDeviceToDevice, s), cudaSuccess,
             "a copy in the capture");
  CHECK_CUDA(cudaMemcpyAsync(before, in_graph, k_block, cudaMemcpyDeviceToDevice, s), cudaSuccess,
             "a copy back in the capture");
  CHECK_CUDA(cudaFreeAsync(in_graph, s), cudaSuccess, "the graph's block freed in the capture");
  if (preloaded) {
    CHECK_CUDA(cudaFreeAsync(before, s), cudaErrorStreamCaptureUnsupported,
               "a block of the pool freed in a capture was not refused");
    CHECK_CUDA(cudaGetLastError(), cudaErrorStreamCaptureUnsupported,
               "cudaGetLastError does not report the refusal");
  }
  cudaGraph_t graph = nullptr;
  CHECK_CUDA(cudaStreamEndCapture(s, &graph), cudaSuccess, "end of the capture");
  cudaGraphExec_t exec = nullptr;
  if (graph != nullptr) {
    CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess,
               "the captured graph does not instantiate");
  }
  for (int i = 0; i < 2 && exec != nullptr; ++i) {
    CHECK_CUDA(cudaGraphLaunch(exec, s), cudaSuccess, "a launch of the graph");
  }
  CHECK_CUDA(cudaStreamSynchronize(s), cudaSuccess, "the graph's launches failed");
  CHECK(mismatches(before, k_block, 0x21) == 0, "the graph's copies changed the block");
  void* after = nullptr;
  CHECK_CUDA(cudaMallocAsync(&after, k_block, s), cudaSuccess, "cudaMallocAsync after");
  if (preloaded) {
    CHECK(owns(after) == 1 && after != before, "after the capture the pool serves again");
  }
  // Still live after the refused free: this free succeeds (it would be a double free).
  CHECK_CUDA(cudaFreeAsync(before, s), cudaSuccess, "the block freed after the capture");
  CHECK_CUDA(cudaFreeAsync(after, s), cudaSuccess, "cudaFreeAsync");
  CHECK_CUDA(cudaStreamSynchronize(s), cudaSuccess, "sync");
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  if (graph != nullptr) cudaGraphDestroy(graph);
  CHECK_CUDA(cudaStreamDestroy(s), cudaSuccess, "cudaStreamDestroy");
}

// A host function that sleeps: keeps the work before a free running, its event pending.
void CUDART_CB sleep_150_ms(void*) {
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
}

// PyTorch's graph capture (torch.cuda.graph: the global mode) over its entry points, as
// PyTorch calls them: an allocation in the capture reclaims earlier frees by querying their
// events, which a global-mode capture forbids unless memweave's thread is relaxed; a free in
// the capture keeps its block; the capture ends, instantiates and launches.
void torch_capture_global() {
  auto tm = memweave_symbol<void* (*)(ssize_t, int, cudaStream_t)>("memweave_torch_malloc");
  auto tf = memweave_symbol<void (*)(void*, ssize_t, int, cudaStream_t)>("memweave_torch_free");
  auto owns = memweave_symbol<int (*)(const void*)>("memweaveOwns");
  CHECK(tm != nullptr && tf != nullptr && owns != nullptr, "libmemweave.so is not preloaded");
  if (tm == nullptr || tf == nullptr || owns == nullptr) return;
  cudaStream_t s1 = nullptr, s2 = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), cudaSuccess, "stream");
  CHECK_CUDA(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking), cudaSuccess, "stream");
  void* a = tm(k_block, 0, s1);
  CHECK_CUDA(cudaMemsetAsync(a, 0x11, k_block, s1), cudaSuccess, "memset");
  CHECK_CUDA(cudaLaunchHostFunc(s1, sleep_150_ms, nullptr), cudaSuccess, "a host function");
  tf(a, k_block, 0, s1);  // pending on s1 behind the host function
  CHECK_CUDA(cudaStreamBeginCapture(s2, cudaStreamCaptureModeGlobal), cudaSuccess, "capture");
  void* b = tm(k_block, 0, s2);
  CHECK(b != nullptr && b != a, "the block s1 still uses was handed to the capture");
  if (b != nullptr) {
    CHECK_CUDA(cudaMemsetAsync(b, 0x22, k_block, s2), cudaSuccess, "a memset in the capture");
  }
  const std::size_t live = live_allocations();
  tf(b, k_block, 0, s2);
  CHECK(live_allocations() == live, "a block freed in the capture went back to the pool");
  cudaGraph_t graph = nullptr;
  CHECK_CUDA(cudaStreamEndCapture(s2, &graph), cudaSuccess, "end of the capture");
  cudaGraphExec_t exec = nullptr;
  if (graph != nullptr) {
    CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess, "instantiation");
  }
  if (exec != nullptr) CHECK_CUDA(cudaGraphLaunch(exec, s2), cudaSuccess, "launch");
  CHECK_CUDA(cudaDeviceSynchronize(), cudaSuccess, "the streams' work");
  if (b != nullptr) CHECK(mismatches(b, k_block, 0x22) == 0, "the graph did not fill its block");
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  if (graph != nullptr) cudaGraphDestroy(graph);
  void* c = tm(k_block, 0, s2);
  CHECK(c != nullptr && c != b, "after the capture the pool handed out the graph's block");
  tf(c, k_block, 0, s2);
  CHECK_CUDA(cudaStreamSynchronize(s2), cudaSuccess, "sync");
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
}

// A synchronous cudaFree of a pool block while a stream of the device is being captured
// (global mode, then relaxed): its wait for the device is refused there (as the runtime's
// own cudaFree is), so the free is refused and the block stays live: its free after the
// capture succeeds.
void free_during_global_capture() {
  auto owns = memweave_symbol<int (*)(const void*)>("memweaveOwns");
  CHECK(owns != nullptr, "libmemweave.so is not preloaded");
  if (owns == nullptr) return;
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, k_block), cudaSuccess, "cudaMalloc");
  CHECK(owns(p) == 1, "the block is not the pool's");
  cudaStream_t s = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess, "stream");
  CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess, "capture");
  CHECK_CUDA(cudaFree(p), cudaErrorStreamCaptureUnsupported, "cudaFree in a capture");
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(s, &graph);
  std::printf("the capture's end after the refused free: %s\n", cudaGetErrorName(ended));
  (void)cudaGetLastError();
  if (graph != nullptr) cudaGraphDestroy(graph);
  CHECK_CUDA(cudaFree(p), cudaSuccess, "cudaFree after the capture (the block was still live)");
  // In the relaxed mode too (waiting for the device takes in the captured work).
  CHECK_CUDA(cudaMalloc(&p, k_block), cudaSuccess, "cudaMalloc");
  CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess, "capture");
  CHECK_CUDA(cudaFree(p), cudaErrorStreamCaptureUnsupported, "cudaFree in a relaxed capture");
  graph = nullptr;
  std::printf("the relaxed capture's end after the refused free: %s\n",
              cudaGetErrorName(cudaStreamEndCapture(s, &graph)));
  (void)cudaGetLastError();
  if (graph != nullptr) cudaGraphDestroy(graph);
  CHECK_CUDA(cudaFree(p), cudaSuccess, "cudaFree after the relaxed capture");
  CHECK_CUDA(cudaStreamDestroy(s), cudaSuccess, "cudaStreamDestroy");
}

// cudaDeviceReset frees every allocation of the device, memweave's arena and its page-locked
// host region among them, and destroys the events it kept: after it a cudaMalloc must be a
// new pool's device memory, memweaveHostMalloc a new page-locked region's, and both usable.
void device_reset() {
  auto owns = memweave_symbol<int (*)(const void*)>("memweaveOwns");
  auto host_malloc =
      memweave_symbol<memweave_status (*)(void**, std::size_t)>("memweaveHostMalloc");
  CHECK(owns != nullptr && host_malloc != nullptr, "libmemweave.so is not preloaded");
  if (owns == nullptr || host_malloc == nullptr) return;
  void* before = nullptr;
  CHECK_CUDA(cudaMalloc(&before, k_block), cudaSuccess, "cudaMalloc");
  CHECK(owns(before) == 1, "the block is not the pool's");
  void* pinned = nullptr;
  CHECK(host_malloc(&pinned, 4096) == MEMWEAVE_SUCCESS, "memweaveHostMalloc");
  cudaStream_t before_reset = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&before_reset, cudaStreamNonBlocking), cudaSuccess,
             "stream");
  void* ordered = nullptr;
  CHECK_CUDA(cudaMallocAsync(&ordered, k_block, before_reset), cudaSuccess, "cudaMallocAsync");
  CHECK_CUDA(cudaFreeAsync(ordered, before_reset), cudaSuccess, "cudaFreeAsync");
  CHECK_CUDA(cudaStreamSynchronize(before_reset), cudaSuccess, "sync");
  CHECK_CUDA(cudaStreamDestroy(before_reset), cudaSuccess, "cudaStreamDestroy");
  CHECK_CUDA(cudaDeviceReset(), cudaSuccess, "cudaDeviceReset");
  CHECK(owns(before) == 0, "memweave still owns a block the reset freed");

  void* pinned_after = nullptr;
  CHECK(host_malloc(&pinned_after, 4096) == MEMWEAVE_SUCCESS, "memweaveHostMalloc after the reset");
  cudaPointerAttributes attributes{};
  CHECK(pinned_after != nullptr &&
            cudaPointerGetAttributes(&attributes, pinned_after) == cudaSuccess &&
            attributes.type == cudaMemoryTypeHost,
        "the host block after the reset is not page-locked memory the runtime knows (type %d)",
        static_cast<int>(attributes.type));
  void* after = nullptr;
  CHECK_CUDA(cudaMalloc(&after, k_block), cudaSuccess, "cudaMalloc after the reset");
  CHECK(after != nullptr && owns(after) == 1, "the block after the reset is not a pool's");
  attributes = {};
  CHECK(after != nullptr && cudaPointerGetAttributes(&attributes, after) == cudaSuccess &&
            attributes.type == cudaMemoryTypeDevice,
        "the block after the reset is not device memory the runtime holds (the old arena?)");
  if (after == nullptr || pinned_after == nullptr) return;
  cudaStream_t s = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess, "stream");
  std::memset(pinned_after, 0x5a, 4096);
  CHECK_CUDA(cudaMemcpyAsync(after, pinned_after, 4096, cudaMemcpyHostToDevice, s), cudaSuccess,
             "a copy from the new page-locked block");
  CHECK_CUDA(cudaStreamSynchronize(s), cudaSuccess, "synchronize");
  CHECK(mismatches(after, 4096, 0x5a) == 0, "the new pool's block did not keep what was written");
  CHECK_CUDA(cudaFree(after), cudaSuccess, "cudaFree after the reset");
  std::size_t free_bytes = 0, total = 0;
  CHECK(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess && free_bytes == total,
        "the new pool is not whole after its block came back (%zu of %zu free)", free_bytes, total);
  auto host_free = memweave_symbol<memweave_status (*)(void*)>("memweaveHostFree");
  CHECK(host_free != nullptr && host_free(pinned_after) == MEMWEAVE_SUCCESS, "memweaveHostFree");
  CHECK_CUDA(cudaStreamDestroy(s), cudaSuccess, "cudaStreamDestroy");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  if (scenario == "stream_capture") {
    stream_capture(true);
  } else if (scenario == "stream_capture_runtime") {
    stream_capture(false);
  } else if (scenario == "torch_capture_global") {
    torch_capture_global();
  } else if (scenario == "free_during_global_capture") {
    free_during_global_capture();
  } else if (scenario == "device_reset") {
    device_reset();
  } else {
    std::printf(
        "FAIL: unknown scenario '%s' (stream_capture, stream_capture_runtime, "
        "torch_capture_global, free_during_global_capture, device_reset)\n",
        scenario.c_str());
    return 2;
  }
  std::printf("%s: %d failed expectations\n", scenario.c_str(), probe_failures());
  return probe_failures() == 0 ? 0 : 1;
}
