// A CUDA program for fake_cuda_test: it knows memweave only through the CUDA runtime API
// (served by the test stand-in libcudart, fake_cudart.cpp) and, in some scenarios, through
// the symbols of libmemweave.so found at run time (preloaded with the interposer, or
// dlopen'ed as PyTorch does). Run as `fake_cuda_probe SCENARIO`; it prints what it sees
// and exits 0 when the scenario's expectations hold, 1 (with "FAIL: ...") otherwise.
//
// "Kernels" are host functions launched on streams (the stand-in's device memory is host
// memory): a writer fills a block with a byte, a reader checks the byte slowly (sleeping
// between chunks) and counts every mismatch: a block handed to other work before the
// reader finished shows up as a mismatch.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "memweave/memweave.h"
#include "memweave/memweave_torch.h"
#include "probe_check.hpp"

extern "C" int fake_cudart_contexts(int device);
extern "C" int fake_cudart_device_of(const void* p);
extern "C" std::size_t fake_cudart_host_bytes();
extern "C" long fake_cudart_events(int device);
extern "C" void fake_cudart_fail_next_sync(int code);

namespace {

std::atomic<long> g_mismatches{0};

struct fill_task {
  unsigned char* p;
  std::size_t n;
  unsigned char value;
  int sleep_ms;  // reader: total time spread over its chunks
  bool read;     // true: check; false: write
};

void run_fill(void* arg) {
  auto* t = static_cast<fill_task*>(arg);
  if (!t->read) {
    std::memset(t->p, t->value, t->n);
  } else {
    constexpr int chunks = 8;
    const std::size_t step = (t->n + chunks - 1) / chunks;
    for (int c = 0; c < chunks; ++c) {
      if (t->sleep_ms > 0)
        std::this_thread::sleep_for(std::chrono::microseconds(t->sleep_ms * 1000 / chunks));
      for (std::size_t i = c * step; i < t->n && i < (c + 1) * step; ++i) {
        if (t->p[i] != t->value) {
          g_mismatches.fetch_add(1);
          break;
        }
      }
    }
  }
  delete t;
}

void launch_write(cudaStream_t s, void* p, std::size_t n, unsigned char v) {
  cudaLaunchHostFunc(s, run_fill, new fill_task{static_cast<unsigned char*>(p), n, v, 0, false});
}

void launch_read(cudaStream_t s, void* p, std::size_t n, unsigned char v, int sleep_ms) {
  cudaLaunchHostFunc(s, run_fill,
                     new fill_task{static_cast<unsigned char*>(p), n, v, sleep_ms, true});
}

template <class F>
F memweave_symbol(const char* name) {
  return reinterpret_cast<F>(::dlsym(RTLD_DEFAULT, name));
}

void* open_memweave() {
  void* h = ::dlopen(MEMWEAVE_CAPI_PATH, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) std::printf("FAIL: dlopen %s: %s\n", MEMWEAVE_CAPI_PATH, ::dlerror());
  return h;
}

constexpr std::size_t k_block = 1 << 20;

// The interposed synchronous cudaFree: the runtime's cudaFree waits for the device, so a
// kernel still reading the block must finish before the next cudaMalloc may get it.
void sync_free() {
  auto owns = memweave_symbol<int (*)(const void*)>("memweaveOwns");
  CHECK(owns != nullptr, "libmemweave.so is not in the process (LD_PRELOAD?)");
  cudaStream_t s = nullptr;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
  for (int i = 0; i < 4; ++i) {
    void* a = nullptr;
    CHECK(cudaMalloc(&a, k_block) == cudaSuccess, "cudaMalloc");
    if (owns != nullptr) CHECK(owns(a) == 1, "the block is not the pool's");
    std::memset(a, 0x11, k_block);         // cudaMemset (synchronous)
    launch_read(s, a, k_block, 0x11, 80);  // a kernel reading it for 80 ms
    CHECK(cudaFree(a) == cudaSuccess, "cudaFree");
    void* b = nullptr;
    CHECK(cudaMalloc(&b, k_block) == cudaSuccess, "cudaMalloc");
    std::memset(b, 0x22, k_block);  // the next user writes its block at once
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "sync");
    CHECK(cudaFree(b) == cudaSuccess, "cudaFree");
  }
  CHECK(g_mismatches.load() == 0, "%ld reads saw another user's bytes", g_mismatches.load());
}

// cudaMallocAsync/cudaFreeAsync on several streams: reuse on the freeing stream at once,
// on others only after the stream reached the free.
void async_streams() {
  auto owns = memweave_symbol<int (*)(const void*)>("memweaveOwns");
  CHECK(owns != nullptr, "libmemweave.so is not in the process (LD_PRELOAD?)");
  cudaStream_t s[4] = {};
  for (auto& x : s) CHECK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking) == 0, "stream");
  // Cross-stream: freed on s0 while a reader runs; the allocation on s1 must not get it.
  void* a = nullptr;
  CHECK(cudaMallocAsync(&a, k_block, s[0]) == cudaSuccess, "cudaMallocAsync");
  if (owns != nullptr) CHECK(owns(a) == 1, "cudaMallocAsync did not use the pool");
  launch_write(s[0], a, k_block, 0x11);
  launch_read(s[0], a, k_block, 0x11, 100);
  CHECK(cudaFreeAsync(a, s[0]) == cudaSuccess, "cudaFreeAsync");
  void* b = nullptr;
  CHECK(cudaMallocAsync(&b, k_block, s[1]) == cudaSuccess, "cudaMallocAsync");
  launch_write(s[1], b, k_block, 0x22);
  launch_read(s[1], b, k_block, 0x22, 0);
  CHECK(b != a, "a block freed on another stream was reused before that stream reached the free");
  // Same stream: reused at once, and safe by the stream's order.
  void* c = nullptr;
  CHECK(cudaMallocAsync(&c, k_block, s[0]) == cudaSuccess, "cudaMallocAsync");
  CHECK(c == a, "a block freed on this stream was not reused at once (%p, freed %p)", c, a);
  launch_write(s[0], c, k_block, 0x33);
  launch_read(s[0], c, k_block, 0x33, 0);
  CHECK(cudaFreeAsync(b, s[1]) == cudaSuccess, "free");
  CHECK(cudaFreeAsync(c, s[0]) == cudaSuccess, "free");
  // Random traffic on four streams over a small pool: any early reuse is a mismatch.
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    const int k = static_cast<int>(rng() % 4);
    const std::size_t n = 1024u << (rng() % 9);  // 1 KiB .. 256 KiB
    void* p = nullptr;
    const cudaError_t e = cudaMallocAsync(&p, n, s[k]);
    CHECK(e == cudaSuccess, "cudaMallocAsync of %zu failed: %d", n, static_cast<int>(e));
    if (e != cudaSuccess) break;
    const auto v = static_cast<unsigned char>(1 + i % 250);
    launch_write(s[k], p, n, v);
    launch_read(s[k], p, n, v, static_cast<int>(rng() % 3));
    if (rng() % 8 == 0) {
      CHECK(cudaFree(p) == cudaSuccess, "cudaFree");
    } else {
      CHECK(cudaFreeAsync(p, s[k]) == cudaSuccess, "cudaFreeAsync");
    }
  }
  CHECK(cudaDeviceSynchronize() == cudaSuccess, "sync");
  CHECK(g_mismatches.load() == 0, "%ld reads saw another user's bytes", g_mismatches.load());
}

using torch_malloc_fn = decltype(&memweave_torch_malloc);
using torch_free_fn = decltype(&memweave_torch_free);

// PyTorch's entry points with two streams, as PyTorch calls them.
void torch_streams() {
  void* h = open_memweave();
  if (h == nullptr) return ++probe_failures(), void();
  auto tm = reinterpret_cast<torch_malloc_fn>(::dlsym(h, "memweave_torch_malloc"));
  auto tf = reinterpret_cast<torch_free_fn>(::dlsym(h, "memweave_torch_free"));
  cudaStream_t s1 = nullptr, s2 = nullptr;
  cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
  void* a = tm(k_block, 0, s1);
  CHECK(a != nullptr, "malloc");
  CHECK(fake_cudart_device_of(a) == 0, "not device memory of device 0");
  launch_write(s1, a, k_block, 0x11);
  launch_read(s1, a, k_block, 0x11, 100);
  tf(a, k_block, 0, s1);
  void* b = tm(k_block, 0, s2);
  CHECK(b != a, "a block freed on stream 1 went to stream 2 before stream 1 reached the free");
  launch_write(s2, b, k_block, 0x22);
  launch_read(s2, b, k_block, 0x22, 0);
  void* c = tm(k_block, 0, s1);
  CHECK(c == a, "a block freed on stream 1 was not reused at once on stream 1");
  launch_write(s1, c, k_block, 0x33);
  launch_read(s1, c, k_block, 0x33, 0);
  tf(b, k_block, 0, s2);
  tf(c, k_block, 0, s1);
  cudaDeviceSynchronize();
  CHECK(g_mismatches.load() == 0, "%ld reads saw another user's bytes", g_mismatches.load());
}

// PyTorch's graph capture (torch.cuda.graph begins it in the global mode) over its entry
// points: an allocation in the capture reclaims earlier frees, querying their events, which a
// global-mode capture forbids every thread not in the relaxed mode; unguarded, the query
// failed, invalidated the capture, and the pool released the block its stream still read
// (session 41 on an H200). The block freed inside the capture stays allocated.
void torch_capture_global() {
  void* h = open_memweave();
  if (h == nullptr) return ++probe_failures(), void();
  auto tm = reinterpret_cast<torch_malloc_fn>(::dlsym(h, "memweave_torch_malloc"));
  auto tf = reinterpret_cast<torch_free_fn>(::dlsym(h, "memweave_torch_free"));
  auto stats =
      reinterpret_cast<memweave_status (*)(memweave_stats*)>(::dlsym(h, "memweaveGetStats"));
  cudaStream_t s1 = nullptr, s2 = nullptr;
  cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
  void* a = tm(k_block, 0, s1);
  launch_write(s1, a, k_block, 0x11);
  launch_read(s1, a, k_block, 0x11, 150);
  tf(a, k_block, 0, s1);  // pending on s1 behind the reader
  CHECK(cudaStreamBeginCapture(s2, cudaStreamCaptureModeGlobal) == cudaSuccess, "capture");
  void* b = tm(k_block, 0, s2);
  CHECK(b != nullptr && b != a, "the block s1 still reads was handed to the capture");
  memweave_stats before{}, after{};
  CHECK(stats(&before) == MEMWEAVE_SUCCESS, "memweaveGetStats");
  tf(b, k_block, 0, s2);
  CHECK(stats(&after) == MEMWEAVE_SUCCESS && after.live_allocations == before.live_allocations,
        "a block freed in the capture went back to the pool");
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamEndCapture(s2, &graph) == cudaSuccess,
        "the capture was invalidated by memweave's calls");
  cudaDeviceSynchronize();
  CHECK(g_mismatches.load() == 0, "%ld reads saw another user's bytes", g_mismatches.load());
  void* c = tm(k_block, 0, s2);
  CHECK(c != nullptr && c != b, "after the capture: %p (the graph's block %p)", c, b);
  tf(c, k_block, 0, s2);
}

// Out of memory through PyTorch's entry points: pending frees of another stream are waited
// for, and a request that still cannot be served throws an out-of-memory error (never NULL).
void torch_oom() {
  void* h = open_memweave();
  if (h == nullptr) return ++probe_failures(), void();
  auto tm = reinterpret_cast<torch_malloc_fn>(::dlsym(h, "memweave_torch_malloc"));
  auto tf = reinterpret_cast<torch_free_fn>(::dlsym(h, "memweave_torch_free"));
  cudaStream_t s1 = nullptr, s2 = nullptr;
  cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(tm(k_block, 0, s1));  // the whole 8 MiB pool
  for (void* p : blocks) launch_write(s1, p, k_block, 0x44);
  launch_read(s1, blocks.back(), k_block, 0x44, 150);
  for (void* p : blocks) tf(p, k_block, 0, s1);
  // Every block is pending on s1: s2's request waits for s1 instead of failing.
  void* b = nullptr;
  try {
    b = tm(4 * k_block, 0, s2);
  } catch (const std::exception& e) {
    CHECK(false, "threw although frees were pending: %s", e.what());
  }
  CHECK(b != nullptr, "no block");
  if (b != nullptr) {
    std::memset(b, 0x55, 4 * k_block);
    tf(b, 4 * k_block, 0, s2);
  }
  std::string what;
  try {
    void* big = tm(64 * k_block, 0, s2);
    CHECK(false, "an impossible request returned %p", big);
  } catch (const std::exception& e) {
    what = e.what();
  }
  std::printf("oom_message=%s\n", what.c_str());
  CHECK(what.find("CUDA out of memory") != std::string::npos, "message: %s", what.c_str());
  CHECK(what.find("largest free run") != std::string::npos, "message: %s", what.c_str());
  CHECK(what.find("fragmentation") != std::string::npos, "message: %s", what.c_str());
  cudaDeviceSynchronize();
  CHECK(g_mismatches.load() == 0, "%ld reads saw another user's bytes", g_mismatches.load());
}

// The current device chooses the pool; cudaMemGetInfo answers for it.
void current_device() {
  auto owns = memweave_symbol<int (*)(const void*)>("memweaveOwns");
  CHECK(owns != nullptr, "libmemweave.so is not in the process (LD_PRELOAD?)");
  CHECK(cudaSetDevice(1) == cudaSuccess, "cudaSetDevice(1)");
  void* p = nullptr;
  CHECK(cudaMalloc(&p, k_block) == cudaSuccess, "cudaMalloc on device 1");
  CHECK(fake_cudart_device_of(p) == 1, "cudaMalloc after cudaSetDevice(1) gave memory of device %d",
        fake_cudart_device_of(p));
  if (owns != nullptr) CHECK(owns(p) == 1, "not the pool's");
  std::size_t free1 = 0, total1 = 0;
  CHECK(cudaMemGetInfo(&free1, &total1) == cudaSuccess, "cudaMemGetInfo");
  std::printf("device1_total=%zu\ndevice1_free=%zu\n", total1, free1);
  CHECK(total1 == (64u << 20), "device 1's pool should be half of its 128 MiB: %zu", total1);
  CHECK(free1 == total1 - k_block, "free %zu", free1);
  CHECK(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice(0)");
  void* q = nullptr;
  CHECK(cudaMalloc(&q, k_block) == cudaSuccess, "cudaMalloc on device 0");
  CHECK(fake_cudart_device_of(q) == 0, "cudaMalloc on device 0 gave memory of device %d",
        fake_cudart_device_of(q));
  std::size_t free0 = 0, total0 = 0;
  CHECK(cudaMemGetInfo(&free0, &total0) == cudaSuccess, "cudaMemGetInfo");
  std::printf("device0_total=%zu\n", total0);
  CHECK(total0 == (128u << 20), "device 0's pool should be half of its 256 MiB: %zu", total0);
  CHECK(cudaFree(p) == cudaSuccess, "cudaFree of device 1's block with device 0 current");
  CHECK(cudaFree(q) == cudaSuccess, "cudaFree");
}

// Threads on two devices at once: the pools are made concurrently on first use, and every
// block comes from the device current on its thread.
void threads_two_devices() {
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const int d = t % 2;
      if (cudaSetDevice(d) != cudaSuccess) {
        wrong.fetch_add(1);
        return;
      }
      cudaStream_t s = nullptr;
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      for (int i = 0; i < 200; ++i) {
        const std::size_t n = 4096u << (i % 5);
        void* p = nullptr;
        const cudaError_t e = (i % 2 == 0) ? cudaMalloc(&p, n) : cudaMallocAsync(&p, n, s);
        if (e != cudaSuccess || fake_cudart_device_of(p) != d) {
          wrong.fetch_add(1);
          continue;
        }
        const auto v = static_cast<unsigned char>(1 + t);
        launch_write(s, p, n, v);
        launch_read(s, p, n, v, 0);
        if (i % 3 == 0) {
          cudaFree(p);
        } else {
          cudaFreeAsync(p, s);
        }
      }
      cudaStreamSynchronize(s);
    });
  }
  for (auto& th : threads) th.join();
  CHECK(wrong.load() == 0, "%d allocations failed or came from the other device", wrong.load());
  CHECK(g_mismatches.load() == 0, "%ld reads saw another user's bytes", g_mismatches.load());
}

// memweaveInit with the interposer preloaded: memweave's own cudaMalloc of its arena must
// reach the runtime, not the interposer (which would wait for the init mutex held).
void init_deadlock() {
  auto init = memweave_symbol<memweave_status (*)(const memweave_config*)>("memweaveInit");
  auto fin = memweave_symbol<memweave_status (*)()>("memweaveFinalize");
  CHECK(init != nullptr && fin != nullptr, "libmemweave.so is not in the process");
  if (init == nullptr) return;
  CHECK(init(nullptr) == MEMWEAVE_SUCCESS, "memweaveInit");
  void* p = nullptr;
  CHECK(cudaMalloc(&p, k_block) == cudaSuccess, "cudaMalloc after memweaveInit");
  CHECK(cudaFree(p) == cudaSuccess, "cudaFree");
  CHECK(fin() == MEMWEAVE_SUCCESS, "memweaveFinalize");
}

// The PyTorch entry's first call initializes memweave, with the interposer preloaded.
void torch_deadlock() {
  auto tm = memweave_symbol<torch_malloc_fn>("memweave_torch_malloc");
  auto tf = memweave_symbol<torch_free_fn>("memweave_torch_free");
  CHECK(tm != nullptr && tf != nullptr, "libmemweave.so is not in the process");
  if (tm == nullptr) return;
  void* p = tm(k_block, 0, nullptr);
  CHECK(p != nullptr, "malloc");
  tf(p, k_block, 0, nullptr);
}

// MEMWEAVE_DEVICE=auto (the default) with no usable GPU: no simulated host memory.
void auto_no_device() {
  auto mwmalloc = memweave_symbol<memweave_status (*)(void**, std::size_t)>("memweaveMalloc");
  auto msg = memweave_symbol<const char* (*)()>("memweaveGetLastErrorMessage");
  CHECK(mwmalloc != nullptr, "libmemweave.so is not in the process");
  if (mwmalloc == nullptr) return;
  void* p = nullptr;
  const memweave_status rc = mwmalloc(&p, k_block);
  std::printf("memweave_malloc_rc=%d\nmessage=%s\n", rc, msg != nullptr ? msg() : "");
  CHECK(rc == MEMWEAVE_ERROR_NO_DEVICE, "memweaveMalloc without a GPU returned %d, %p", rc, p);
  CHECK(p == nullptr, "memory was handed out");
  void* q = nullptr;
  const cudaError_t e = cudaMalloc(&q, k_block);
  std::printf("cuda_malloc_rc=%d\n", static_cast<int>(e));
  CHECK(e == cudaErrorNoDevice, "the interposed cudaMalloc should give the runtime's answer");
  CHECK(q == nullptr, "memory was handed out");
}

// A thread that never chose a device uses device 1 through memweave: no context may
// appear on device 0 (restoring the "previous" device 0 would create one).
void no_context_restore() {
  void* h = open_memweave();
  if (h == nullptr) return ++probe_failures(), void();
  auto tm = reinterpret_cast<torch_malloc_fn>(::dlsym(h, "memweave_torch_malloc"));
  auto tf = reinterpret_cast<torch_free_fn>(::dlsym(h, "memweave_torch_free"));
  cudaSetDevice(1);
  cudaStream_t s = nullptr;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  CHECK(fake_cudart_contexts(0) == 0, "the probe itself made a context on device 0");
  std::thread t([&] {
    try {
      void* p = tm(k_block, 1, s);
      CHECK(fake_cudart_device_of(p) == 1, "memory of device %d", fake_cudart_device_of(p));
      tf(p, k_block, 1, s);
    } catch (const std::exception& e) {
      CHECK(false, "malloc threw: %s", e.what());
    }
  });
  t.join();
  CHECK(fake_cudart_contexts(0) == 0, "memweave created a context on device 0");
}

// A stream of device 0 used with device 1 current: cudaMallocAsync takes from the stream's
// device's pool, as the runtime does, and a block freed in that stream's order is not
// handed out (on any device) while the stream's kernel still writes it.
void stream_of_another_device() {
  CHECK(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice(0)");
  cudaStream_t s0 = nullptr;
  CHECK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking) == cudaSuccess, "stream");
  CHECK(cudaSetDevice(1) == cudaSuccess, "cudaSetDevice(1)");
  void* q = nullptr;
  CHECK(cudaMallocAsync(&q, k_block, s0) == cudaSuccess, "cudaMallocAsync on device 0's stream");
  CHECK(fake_cudart_device_of(q) == 0,
        "cudaMallocAsync on a stream of device 0 gave memory of device %d (the current one)",
        fake_cudart_device_of(q));
  launch_write(s0, q, k_block, 0x11);
  launch_read(s0, q, k_block, 0x11, 150);  // still reading when the next user writes
  CHECK(cudaFreeAsync(q, s0) == cudaSuccess, "cudaFreeAsync on device 0's stream");
  for (const int d : {1, 0}) {
    CHECK(cudaSetDevice(d) == cudaSuccess, "cudaSetDevice");
    void* r = nullptr;
    CHECK(cudaMalloc(&r, k_block) == cudaSuccess, "cudaMalloc on device %d", d);
    if (r == q) std::printf("reused_after_the_stream_reached_the_free=1\n");
    std::memset(r, 0x22, k_block);  // the next user writes its block at once
    CHECK(cudaFree(r) == cudaSuccess, "cudaFree");
  }
  CHECK(cudaStreamSynchronize(s0) == cudaSuccess, "sync");
  CHECK(g_mismatches.load() == 0, "%ld reads saw another user's bytes", g_mismatches.load());
  CHECK(cudaStreamDestroy(s0) == cudaSuccess, "destroy");
}

// A pool that cannot be made (MEMWEAVE_POOL_BYTES above the device): memweave cannot serve
// the device, so the interposer passes its calls to the runtime instead of failing them.
void pool_cannot_be_made() {
  void* p = nullptr;
  CHECK(cudaMalloc(&p, k_block) == cudaSuccess, "cudaMalloc was not forwarded");
  CHECK(fake_cudart_device_of(p) == 0, "not device memory");
  std::size_t free_bytes = 0, total = 0;
  CHECK(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess, "cudaMemGetInfo was not forwarded");
  CHECK(total == (256u << 20), "the runtime's total: %zu", total);
  CHECK(cudaFree(p) == cudaSuccess, "cudaFree");
  // The runtime (the stand-in) refuses what no device holds; its rounding once wrapped.
  void* q = nullptr;
  CHECK(cudaMalloc(&q, SIZE_MAX) == cudaErrorMemoryAllocation, "SIZE_MAX was served");
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation, "no error recorded");
}

// Frees of what is not a live allocation return cudaErrorInvalidValue, as CUDA 13's
// cudaFree documents (not the deprecated cudaErrorInvalidDevicePointer).
void bad_frees() {
  void* p = nullptr;
  CHECK(cudaMalloc(&p, k_block) == cudaSuccess, "cudaMalloc");
  CHECK(cudaFree(static_cast<char*>(p) + 1024) == cudaErrorInvalidValue, "interior free");
  CHECK(cudaFree(p) == cudaSuccess, "cudaFree");
  CHECK(cudaFree(p) == cudaErrorInvalidValue, "double free");
  CHECK(cudaFreeAsync(p, nullptr) == cudaErrorInvalidValue, "double stream-ordered free");
  // A kernel that failed shows at the wait cudaFree makes: its code comes back as the
  // runtime's (it was cudaErrorUnknown), and the block is freed all the same.
  void* q = nullptr;
  CHECK(cudaMalloc(&q, k_block) == cudaSuccess, "cudaMalloc");
  fake_cudart_fail_next_sync(static_cast<int>(cudaErrorIllegalAddress));
  const cudaError_t e = cudaFree(q);
  CHECK(e == cudaErrorIllegalAddress, "cudaFree after a failed kernel returned %d, not %d",
        static_cast<int>(e), static_cast<int>(cudaErrorIllegalAddress));
  CHECK(cudaFree(q) == cudaErrorInvalidValue, "the block was not freed");
}

// Two devices traced: each pool writes its own file (the path, and the path with
// ".device1"), none truncating the other's.
void traces_two_devices() {
  for (const int d : {0, 1, 0}) {
    CHECK(cudaSetDevice(d) == cudaSuccess, "cudaSetDevice");
    for (int i = 0; i < 3; ++i) {
      void* p = nullptr;
      CHECK(cudaMalloc(&p, k_block) == cudaSuccess, "cudaMalloc");
      CHECK(cudaFree(p) == cudaSuccess, "cudaFree");
    }
  }
}

// PyTorch's device index names a device the runtime lists, or -1 for the current one.
void torch_bad_device() {
  void* h = open_memweave();
  if (h == nullptr) return ++probe_failures(), void();
  auto tmalloc = reinterpret_cast<torch_malloc_fn>(::dlsym(h, "memweave_torch_malloc"));
  for (const int device : {5, -7}) {
    try {
      (void)tmalloc(1024, device, nullptr);
      CHECK(false, "device %d was served", device);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      std::printf("device %d: %s\n", device, e.what());
      CHECK(what.find("device " + std::to_string(device) + " is not a device of this process") !=
                std::string::npos,
            "%s", e.what());
      CHECK(what.find("MEMWEAVE_CUDA_DEVICE") == std::string::npos, "%s", e.what());
      // Not an out-of-memory: no pool can serve that device at all.
      CHECK(what.find("out of memory") == std::string::npos, "%s", e.what());
    }
  }
}

// Each device's default stream is a stream of its own. A block of device 1 freed on the
// default stream while device 0 is current is ordered after device 0's default stream (the
// runtime's meaning of NULL), where a kernel still reads it: device 1's default stream may not
// take it before that stream reaches the free (both handles are NULL: once keyed alike).
void default_streams_of_two_devices() {
  CHECK(cudaSetDevice(1) == cudaSuccess, "cudaSetDevice(1)");
  void* p = nullptr;
  CHECK(cudaMallocAsync(&p, k_block, nullptr) == cudaSuccess, "cudaMallocAsync on device 1");
  CHECK(fake_cudart_device_of(p) == 1, "not device 1's memory");
  std::memset(p, 0x11, k_block);
  CHECK(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice(0)");
  launch_read(nullptr, p, k_block, 0x11, 150);  // device 0's default stream reads it
  CHECK(cudaFreeAsync(p, nullptr) == cudaSuccess, "cudaFreeAsync on device 0's default stream");
  CHECK(cudaSetDevice(1) == cudaSuccess, "cudaSetDevice(1)");
  void* q = nullptr;
  CHECK(cudaMallocAsync(&q, k_block, nullptr) == cudaSuccess, "cudaMallocAsync on device 1");
  CHECK(q != p, "device 1's default stream took a block device 0's default stream still reads");
  std::memset(q, 0x22, k_block);  // the next user writes its block at once
  CHECK(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice(0)");
  CHECK(cudaDeviceSynchronize() == cudaSuccess, "sync");
  CHECK(g_mismatches.load() == 0, "%ld reads saw another user's bytes", g_mismatches.load());
  CHECK(cudaSetDevice(1) == cudaSuccess, "cudaSetDevice(1)");
  CHECK(cudaFreeAsync(q, nullptr) == cudaSuccess, "cudaFreeAsync");
  CHECK(cudaDeviceSynchronize() == cudaSuccess, "sync");
}

// PyTorch frees a block with its device and stream and does not make that device current
// first: a block of cuda:1 freed on cuda:1's default stream (NULL) while device 0 is current
// is ordered after cuda:1's default stream, where a kernel still reads it, not after device
// 0's (idle): another stream of cuda:1 may not take it before. With `free_device` 0 the free
// names the wrong device: the block's own is taken (its default stream is the one PyTorch
// means; device 0's was taken, and the block was handed out while cuda:1 still read it).
void torch_default_stream_of_another_device(int free_device = 1) {
  void* h = open_memweave();
  if (h == nullptr) return ++probe_failures(), void();
  auto tm = reinterpret_cast<torch_malloc_fn>(::dlsym(h, "memweave_torch_malloc"));
  auto tf = reinterpret_cast<torch_free_fn>(::dlsym(h, "memweave_torch_free"));
  CHECK(cudaSetDevice(1) == cudaSuccess, "cudaSetDevice(1)");
  cudaStream_t s1 = nullptr;
  CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking) == cudaSuccess, "stream");
  void* p = tm(k_block, 1, nullptr);
  CHECK(p != nullptr && fake_cudart_device_of(p) == 1, "not device 1's memory");
  std::memset(p, 0x11, k_block);
  launch_read(nullptr, p, k_block, 0x11, 150);  // cuda:1's default stream reads it
  CHECK(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice(0)");
  tf(p, k_block, free_device, nullptr);
  // Long enough for an event recorded on device 0's idle default stream to be done.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  void* q = tm(k_block, 1, s1);
  CHECK(q != p, "another stream of cuda:1 took a block its default stream still reads");
  std::memset(q, 0x22, k_block);
  CHECK(cudaSetDevice(1) == cudaSuccess, "cudaSetDevice(1)");
  CHECK(cudaDeviceSynchronize() == cudaSuccess, "sync");
  CHECK(g_mismatches.load() == 0, "%ld reads saw another user's bytes", g_mismatches.load());
  tf(q, k_block, 1, s1);
  CHECK(cudaDeviceSynchronize() == cudaSuccess, "sync");
  CHECK(cudaStreamDestroy(s1) == cudaSuccess, "destroy");
}

// cudaGetLastError as the runtime keeps it: a failure of a call memweave served is recorded,
// the more recent of two errors is the one returned, reading resets it, and an error the
// program has not read yet survives memweave's own runtime calls (which clear the runtime's).
void last_error() {
  CHECK(cudaSetDevice(99) == cudaErrorInvalidDevice, "cudaSetDevice(99)");
  void* p = nullptr;
  CHECK(cudaMalloc(&p, k_block) == cudaSuccess, "cudaMalloc");  // memweave's first use
  CHECK(cudaPeekAtLastError() == cudaErrorInvalidDevice, "the program's error was cleared");
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice, "the program's error was cleared");
  CHECK(cudaGetLastError() == cudaSuccess, "reading did not reset it");
  // A failure memweave served.
  CHECK(cudaFree(static_cast<char*>(p) + 1024) == cudaErrorInvalidValue, "interior free");
  CHECK(cudaPeekAtLastError() == cudaErrorInvalidValue, "peek after an interposed failure");
  CHECK(cudaGetLastError() == cudaErrorInvalidValue, "an interposed failure left no error");
  CHECK(cudaGetLastError() == cudaSuccess, "reading did not reset it");
  void* big = nullptr;
  CHECK(cudaMalloc(&big, std::size_t{1} << 40) == cudaErrorMemoryAllocation, "1 TiB");
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation, "an out-of-memory left no error");
  // The more recent of the two: memweave's, then the runtime's.
  CHECK(cudaFree(static_cast<char*>(p) + 1024) == cudaErrorInvalidValue, "interior free");
  CHECK(cudaSetDevice(99) == cudaErrorInvalidDevice, "cudaSetDevice(99)");
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice, "not the more recent error");
  CHECK(cudaGetLastError() == cudaSuccess, "reading did not reset both");
  // The runtime's, then memweave's.
  CHECK(cudaSetDevice(99) == cudaErrorInvalidDevice, "cudaSetDevice(99)");
  CHECK(cudaFree(static_cast<char*>(p) + 1024) == cudaErrorInvalidValue, "interior free");
  CHECK(cudaGetLastError() == cudaErrorInvalidValue, "not the more recent error");
  CHECK(cudaGetLastError() == cudaSuccess, "reading did not reset both");
  // Across a stream-ordered free whose event memweave queries (not ready: a reader runs).
  cudaStream_t s = nullptr;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
  std::memset(p, 0x11, k_block);
  launch_read(s, p, k_block, 0x11, 100);
  CHECK(cudaFreeAsync(p, s) == cudaSuccess, "cudaFreeAsync");
  CHECK(cudaSetDevice(99) == cudaErrorInvalidDevice, "cudaSetDevice(99)");
  void* q = nullptr;
  CHECK(cudaMallocAsync(&q, k_block, nullptr) == cudaSuccess, "cudaMallocAsync");
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice, "the program's error was cleared");
  CHECK(cudaFree(q) == cudaSuccess, "cudaFree");
  CHECK(cudaStreamSynchronize(s) == cudaSuccess, "sync");
  CHECK(cudaStreamDestroy(s) == cudaSuccess, "destroy");
}

// A child forked after memweave was initialized (another thread allocating as it forks) is
// refused at once with a message saying why: the pools' streams and worker threads stayed in
// the parent, and waiting for them hung.
void fork_child_refuses() {
  void* p = nullptr;
  CHECK(cudaMalloc(&p, k_block) == cudaSuccess, "cudaMalloc");
  auto m = memweave_symbol<int (*)(void**, std::size_t)>("memweaveMalloc");
  auto f = memweave_symbol<int (*)(void*)>("memweaveFree");
  auto host_free = memweave_symbol<int (*)(void*)>("memweaveHostFree");
  auto message = memweave_symbol<const char* (*)()>("memweaveGetLastErrorMessage");
  auto initialized = memweave_symbol<int (*)()>("memweaveIsInitialized");
  auto finalize = memweave_symbol<int (*)()>("memweaveFinalize");
  CHECK(m != nullptr && f != nullptr && host_free != nullptr && message != nullptr &&
            initialized != nullptr && finalize != nullptr,
        "libmemweave.so is not preloaded");
  if (m == nullptr || f == nullptr || host_free == nullptr || message == nullptr ||
      initialized == nullptr || finalize == nullptr) {
    return;
  }
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    while (!stop.load()) {
      void* q = nullptr;
      if (cudaMalloc(&q, 4096) == cudaSuccess) (void)cudaFree(q);
    }
  });
  for (int i = 0; i < 20; ++i) {
    const pid_t child = ::fork();
    if (child == 0) {
      ::alarm(10);  // a hang is a failure, not a hung test
      void* q = nullptr;
      // memweaveHostFree too (it called any pointer "not a live allocation" there).
      const bool refused = m(&q, 8192) == MEMWEAVE_ERROR_NOT_SUPPORTED &&
                           std::strstr(message(), "forked") != nullptr &&
                           f(p) == MEMWEAVE_ERROR_NOT_SUPPORTED &&
                           host_free(p) == MEMWEAVE_ERROR_NOT_SUPPORTED;
      // Not initialized there, and finalizing (allowed unconditionally) agrees: it
      // succeeds, releasing nothing of the parent's (it said "not supported").
      const bool agree = initialized() == 0 && finalize() == MEMWEAVE_SUCCESS &&
                         m(&q, 8192) == MEMWEAVE_ERROR_NOT_SUPPORTED;
      std::_Exit(refused && agree ? 0 : 3);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fork %d: the child %s (status %#x)", i,
          WIFSIGNALED(status) ? "hung or crashed" : "was not refused with the reason", status);
  }
  stop.store(true);
  busy.join();
  CHECK(cudaFree(p) == cudaSuccess, "cudaFree");
}

// cudaDeviceReset frees every allocation of the device, memweave's arena among them: a
// cudaMalloc after it must be device memory the runtime holds (a new pool's), not a block of
// the arena the reset freed, which memweave went on handing out (session 36's reading of
// the interposer).
void device_reset() {
  auto owns = memweave_symbol<int (*)(const void*)>("memweaveOwns");
  CHECK(owns != nullptr, "libmemweave.so is not in the process (LD_PRELOAD?)");
  if (owns == nullptr) return;
  auto host_malloc = memweave_symbol<int (*)(void**, std::size_t)>("memweaveHostMalloc");
  void* before = nullptr;
  CHECK(cudaMalloc(&before, k_block) == cudaSuccess, "cudaMalloc");
  CHECK(owns(before) == 1, "the block is not the pool's");
  // The pinned host pool allocates its region through the device's pool, and a stream-ordered
  // free keeps its event for reuse: the reset destroys both (page-locked memory and events of
  // the device's context), so memweave lets go of them first.
  void* pinned = nullptr;
  CHECK(host_malloc != nullptr && host_malloc(&pinned, 4096) == MEMWEAVE_SUCCESS,
        "memweaveHostMalloc");
  CHECK(fake_cudart_host_bytes() > 0, "the host pool holds no page-locked region");
  cudaStream_t before_reset = nullptr;
  CHECK(cudaStreamCreateWithFlags(&before_reset, cudaStreamNonBlocking) == cudaSuccess, "stream");
  void* ordered = nullptr;
  CHECK(cudaMallocAsync(&ordered, k_block, before_reset) == cudaSuccess, "cudaMallocAsync");
  CHECK(cudaFreeAsync(ordered, before_reset) == cudaSuccess, "cudaFreeAsync");
  CHECK(cudaStreamSynchronize(before_reset) == cudaSuccess, "sync");
  CHECK(cudaStreamDestroy(before_reset) == cudaSuccess, "cudaStreamDestroy");
  CHECK(cudaDeviceReset() == cudaSuccess, "cudaDeviceReset");
  CHECK(owns(before) == 0, "memweave still owns a block the reset freed");
  CHECK(fake_cudart_host_bytes() == 0,
        "the host pool kept its region (%zu bytes) through the reset, which frees it",
        fake_cudart_host_bytes());
  CHECK(fake_cudart_events(0) == 0, "memweave kept %ld events the reset destroys",
        fake_cudart_events(0));
  void* pinned_after = nullptr;
  CHECK(host_malloc != nullptr && host_malloc(&pinned_after, 4096) == MEMWEAVE_SUCCESS,
        "memweaveHostMalloc after the reset");
  CHECK(fake_cudart_host_bytes() > 0, "no new page-locked region after the reset");
  void* after = nullptr;
  CHECK(cudaMalloc(&after, k_block) == cudaSuccess, "cudaMalloc after the reset");
  CHECK(owns(after) == 1, "the block after the reset is not a pool's");
  CHECK(fake_cudart_device_of(after) == 0,
        "the block after the reset is in memory the runtime freed (the old arena)");
  cudaStream_t s = nullptr;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
  launch_write(s, after, k_block, 0x5a);
  launch_read(s, after, k_block, 0x5a, 0);
  CHECK(cudaStreamSynchronize(s) == cudaSuccess, "synchronize");
  CHECK(g_mismatches.load() == 0, "%ld reads saw other bytes", g_mismatches.load());
  CHECK(cudaFree(after) == cudaSuccess, "cudaFree after the reset");
  std::size_t free_bytes = 0, total = 0;
  CHECK(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess && free_bytes == total,
        "the new pool is not whole after its block came back (%zu of %zu free)", free_bytes, total);
  cudaStreamDestroy(s);
}

// A block of device 0's pool freed on a stream of device 1 waits on an event of device 1,
// which device 1's reset destroys: memweave waits for it first and keeps none of device 1's
// events (the pool kept it, and queried a destroyed event later; session 44's hostile run).
void reset_of_the_freeing_streams_device() {
  CHECK(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice(0)");
  void* p0 = nullptr;
  CHECK(cudaMalloc(&p0, k_block) == cudaSuccess, "cudaMalloc on device 0");
  CHECK(cudaSetDevice(1) == cudaSuccess, "cudaSetDevice(1)");
  void* p1 = nullptr;
  CHECK(cudaMalloc(&p1, 4096) == cudaSuccess, "cudaMalloc on device 1");
  cudaStream_t s1 = nullptr;
  CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking) == cudaSuccess, "stream");
  launch_read(s1, p1, 4096, 0, 100);  // the free's event waits for this
  CHECK(cudaFreeAsync(p0, s1) == cudaSuccess, "cudaFreeAsync of device 0's block on device 1");
  CHECK(cudaStreamDestroy(s1) == cudaSuccess, "cudaStreamDestroy");
  CHECK(cudaDeviceReset() == cudaSuccess, "cudaDeviceReset of device 1");
  CHECK(fake_cudart_events(1) == 0, "memweave kept %ld events of device 1 through its reset",
        fake_cudart_events(1));
  CHECK(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice(0)");
  void* again = nullptr;
  CHECK(cudaMalloc(&again, k_block) == cudaSuccess, "cudaMalloc on device 0 after the reset");
  CHECK(cudaFree(again) == cudaSuccess, "cudaFree");
}

// The same where the reset device never made a pool of its own: the events are still its,
// held by device 1's pool (the release returned at once, keeping them; session 44's hostile
// run).
void reset_of_a_device_without_a_pool() {
  CHECK(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice(0)");
  cudaStream_t s0 = nullptr;
  CHECK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking) == cudaSuccess, "stream");
  CHECK(cudaSetDevice(1) == cudaSuccess, "cudaSetDevice(1)");
  std::vector<void*> blocks(8, nullptr);
  for (void*& p : blocks) CHECK(cudaMalloc(&p, 4096) == cudaSuccess, "cudaMalloc on device 1");
  for (void* p : blocks) CHECK(cudaFreeAsync(p, s0) == cudaSuccess, "cudaFreeAsync on device 0");
  CHECK(cudaStreamSynchronize(s0) == cudaSuccess, "sync");
  CHECK(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice(0)");
  CHECK(cudaStreamDestroy(s0) == cudaSuccess, "cudaStreamDestroy");
  CHECK(cudaDeviceReset() == cudaSuccess, "cudaDeviceReset of device 0");
  CHECK(fake_cudart_events(0) == 0, "memweave kept %ld events of device 0 through its reset",
        fake_cudart_events(0));
  CHECK(cudaSetDevice(1) == cudaSuccess, "cudaSetDevice(1)");
  std::size_t free_bytes = 0, total = 0;
  CHECK(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess && free_bytes == total,
        "device 1's pool is not whole after its blocks came back (%zu of %zu free)", free_bytes,
        total);
}

// Pinned memory belongs to the device current when it was made, as cudaHostAlloc's to that
// context: a reset of device 0 frees device 0's and leaves device 1's. With one host pool for
// every device, made through the first that asked, device 1's pinned allocations died with
// device 0's reset (and device 0's outlived it had device 1 asked first).
void host_pools_of_two_devices() {
  auto host_malloc = memweave_symbol<int (*)(void**, std::size_t)>("memweaveHostMalloc");
  auto host_free = memweave_symbol<int (*)(void*)>("memweaveHostFree");
  CHECK(host_malloc != nullptr && host_free != nullptr,
        "libmemweave.so is not in the process (LD_PRELOAD?)");
  if (host_malloc == nullptr || host_free == nullptr) return;
  void* on0 = nullptr;
  void* on1 = nullptr;
  CHECK(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice(0)");
  CHECK(host_malloc(&on0, 4096) == MEMWEAVE_SUCCESS, "memweaveHostMalloc on device 0");
  CHECK(cudaSetDevice(1) == cudaSuccess, "cudaSetDevice(1)");
  CHECK(host_malloc(&on1, 4096) == MEMWEAVE_SUCCESS, "memweaveHostMalloc on device 1");
  const std::size_t both = fake_cudart_host_bytes();
  CHECK(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice(0)");
  CHECK(cudaDeviceReset() == cudaSuccess, "cudaDeviceReset of device 0");
  CHECK(fake_cudart_host_bytes() > 0 && fake_cudart_host_bytes() < both,
        "the reset of device 0 left %zu of %zu page-locked bytes (device 1's region alone "
        "should stay)",
        fake_cudart_host_bytes(), both);
  // Device 1's allocation is live, whichever device frees it; device 0's died with the reset.
  if (on1 != nullptr) std::memset(on1, 0x5a, 4096);
  CHECK(host_free(on1) == MEMWEAVE_SUCCESS,
        "device 1's pinned memory did not survive device 0's "
        "reset");
  CHECK(host_free(on0) == MEMWEAVE_ERROR_INVALID_DEVICE_POINTER,
        "device 0's pinned memory is still served after its reset");
  void* again = nullptr;
  CHECK(host_malloc(&again, 4096) == MEMWEAVE_SUCCESS && host_free(again) == MEMWEAVE_SUCCESS,
        "memweaveHostMalloc on device 0 after its reset");
}

// cudaDeviceReset of device 0 while a thread using only device 1 allocates and frees: each
// free (and memweaveOwns) scans every device's pool for the pointer, device 0's among them,
// which the reset destroys. The reset waits for such scans. Before it did, the scan read
// device 0's heap as it was freed (SIGSEGV; session 44's hostile run): under TSan the read
// and the destruction are a race, under ASan a heap-use-after-free where the timing lets.
void reset_beside_another_device() {
  auto owns = memweave_symbol<int (*)(const void*)>("memweaveOwns");
  CHECK(owns != nullptr, "libmemweave.so is not in the process (LD_PRELOAD?)");
  if (owns == nullptr) return;
  std::atomic<bool> started{false}, done{false};
  std::atomic<int> wrong{0};
  std::thread other([&] {
    void* p = nullptr;
    if (cudaSetDevice(1) != cudaSuccess || cudaMalloc(&p, 4096) != cudaSuccess) {
      wrong.fetch_add(1);
      started = true;
      return;
    }
    started = true;
    for (long i = 1; !done.load(); ++i) {
      if (owns(p) != 1) wrong.fetch_add(1);
      if (i % 64 == 0 && (cudaFree(p) != cudaSuccess || cudaMalloc(&p, 4096) != cudaSuccess)) {
        wrong.fetch_add(1);
      }
    }
    if (cudaFree(p) != cudaSuccess) wrong.fetch_add(1);
  });
  while (!started.load()) std::this_thread::yield();
  CHECK(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice(0)");
  for (int i = 0; i < 100; ++i) {
    void* q = nullptr;
    CHECK(cudaMalloc(&q, 4096) == cudaSuccess, "cudaMalloc on device 0 (reset %d)", i);
    CHECK(cudaDeviceReset() == cudaSuccess, "cudaDeviceReset %d", i);
  }
  done = true;
  other.join();
  CHECK(wrong.load() == 0, "%d calls on device 1 failed beside device 0's resets", wrong.load());
}

// PyTorch's entry points in children forked while another thread logs (bad frees, each an
// error line): the child's refusal is logged too, and must not wait for a lock the parent's
// logging thread held at the fork (session 36's hostile run: half the children hung).
void torch_fork_while_logging() {
  void* h = open_memweave();
  if (h == nullptr) return ++probe_failures(), void();
  auto tm = reinterpret_cast<torch_malloc_fn>(::dlsym(h, "memweave_torch_malloc"));
  auto tf = reinterpret_cast<torch_free_fn>(::dlsym(h, "memweave_torch_free"));
  void* live = tm(k_block, 0, nullptr);  // initializes memweave: children are refused
  CHECK(live != nullptr, "malloc");
  // The lines go nowhere; the logging (and its locks) still happens.
  const int devnull = ::open("/dev/null", O_WRONLY);
  const int saved_stderr = ::dup(2);
  ::dup2(devnull, 2);
  static int not_ours = 0;
  std::atomic<bool> stop{false};
  std::thread logger([&] {
    while (!stop.load()) tf(&not_ours, 4, 0, nullptr);
  });
  int hung = 0;
  for (int i = 0; i < 16; ++i) {
    const pid_t child = ::fork();
    if (child == 0) {
      ::alarm(10);  // a hang is a failure, not a hung test
      tf(&not_ours, 4, 0, nullptr);
      try {
        (void)tm(4096, 0, nullptr);
      } catch (...) {  // refused, as it should be
      }
      std::_Exit(0);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    hung += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  stop.store(true);
  logger.join();
  ::dup2(saved_stderr, 2);
  ::close(saved_stderr);
  ::close(devnull);
  CHECK(hung == 0, "%d of 16 children hung or crashed", hung);
  tf(live, k_block, 0, nullptr);
}

// A failing call made from a global destructor, after the main thread's thread-locals are
// destroyed (the error message's string among them): it still fails cleanly, and writes
// nothing into freed memory (AddressSanitizer's build checks that).
struct free_at_exit {
  int (*free_fn)(void*) = nullptr;
  ~free_at_exit() {
    if (free_fn == nullptr) return;
    static int not_ours = 0;
    if (free_fn(&not_ours) != MEMWEAVE_ERROR_INVALID_DEVICE_POINTER) {
      std::printf("FAIL: a bad free at exit was not refused\n");
      std::_Exit(1);
    }
  }
} g_free_at_exit;

void error_at_exit() {
  auto f = memweave_symbol<int (*)(void*)>("memweaveFree");
  CHECK(f != nullptr, "libmemweave.so is not preloaded");
  static int not_ours = 0;
  if (f != nullptr) CHECK(f(&not_ours) == MEMWEAVE_ERROR_INVALID_DEVICE_POINTER, "bad free");
  g_free_at_exit.free_fn = f;  // and once more after main, from a global destructor
}

// A new stream with a block allocated on it, written, then freed while a reader still runs
// (150 ms): the block.
void* freed_while_read(cudaStream_t* s, unsigned char value) {
  CHECK(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking) == cudaSuccess, "stream");
  void* a = nullptr;
  CHECK(cudaMallocAsync(&a, k_block, *s) == cudaSuccess, "cudaMallocAsync");
  launch_write(*s, a, k_block, value);
  launch_read(*s, a, k_block, value, 150);
  CHECK(cudaFreeAsync(a, *s) == cudaSuccess, "cudaFreeAsync");
  return a;
}

// A stream retired before it is destroyed: the blocks freed on it wait for their events, even
// for the same handle (a stream created later may get it while the old one's work runs).
void retired_stream() {
  auto retire = memweave_symbol<int (*)(cudaStream_t)>("memweaveRetireStream");
  CHECK(retire != nullptr, "libmemweave.so is not preloaded");
  if (retire == nullptr) return;
  cudaStream_t s = nullptr;
  void* a = freed_while_read(&s, 0x11);
  CHECK(retire(s) == MEMWEAVE_SUCCESS, "memweaveRetireStream");
  void* b = nullptr;
  CHECK(cudaMallocAsync(&b, k_block, s) == cudaSuccess, "cudaMallocAsync");
  CHECK(b != a, "the handle of a retired stream took a block its work still reads");
  std::memset(b, 0x22, k_block);  // "another stream" writes its block at once
  CHECK(retire(nullptr) == MEMWEAVE_SUCCESS, "the default stream: a no-op");
  CHECK(cudaStreamSynchronize(s) == cudaSuccess, "sync");
  CHECK(g_mismatches.load() == 0, "%ld reads saw another user's bytes", g_mismatches.load());
  CHECK(cudaFree(b) == cudaSuccess, "cudaFree");
  CHECK(cudaStreamDestroy(s) == cudaSuccess, "cudaStreamDestroy (interposed)");
  // The interposed cudaStreamDestroy retires by itself (the test reads the debug line): a
  // block freed on a stream whose reader still runs when it is destroyed.
  cudaStream_t t = nullptr;
  (void)freed_while_read(&t, 0x33);
  std::printf("destroying the stream\n");
  CHECK(cudaStreamDestroy(t) == cudaSuccess, "cudaStreamDestroy (interposed)");
}

// Stream capture (CUDA graphs): an allocation on a capturing stream is the graph's, made by
// the runtime (a block of the pool would be written by every launch of the graph after the
// pool gave it away), as is its free there; a block of the pool is not freed in a capture
// (the free would run whenever the graph does): the error, and the block stays live.
void stream_capture() {
  auto owns = memweave_symbol<int (*)(const void*)>("memweaveOwns");
  CHECK(owns != nullptr, "libmemweave.so is not preloaded");
  if (owns == nullptr) return;
  cudaStream_t s = nullptr;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
  void* before = nullptr;
  CHECK(cudaMallocAsync(&before, k_block, s) == cudaSuccess, "cudaMallocAsync");
  CHECK(owns(before) == 1, "a block before the capture is not the pool's");
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess, "capture");
  void* in_graph = nullptr;
  CHECK(cudaMallocAsync(&in_graph, k_block, s) == cudaSuccess, "cudaMallocAsync in a capture");
  CHECK(in_graph != nullptr && owns(in_graph) == 0,
        "an allocation in a capture came from the pool, not the runtime (the graph's)");
  CHECK(cudaFreeAsync(in_graph, s) == cudaSuccess, "the graph's block freed in the capture");
  CHECK(cudaFreeAsync(before, s) == cudaErrorStreamCaptureUnsupported,
        "a block of the pool freed in a capture was not refused");
  CHECK(cudaGetLastError() == cudaErrorStreamCaptureUnsupported,
        "cudaGetLastError does not report the refusal");
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamEndCapture(s, &graph) == cudaSuccess, "end of the capture");
  void* after = nullptr;
  CHECK(cudaMallocAsync(&after, k_block, s) == cudaSuccess, "cudaMallocAsync after");
  CHECK(owns(after) == 1 && after != before, "after the capture the pool serves again");
  // Still live after the refused free: this free succeeds (it would be a double free).
  CHECK(cudaFreeAsync(before, s) == cudaSuccess, "the block freed after the capture");
  CHECK(cudaFreeAsync(after, s) == cudaSuccess, "cudaFreeAsync");
  CHECK(cudaStreamSynchronize(s) == cudaSuccess, "sync");
  CHECK(cudaStreamDestroy(s) == cudaSuccess, "cudaStreamDestroy");
}

// A synchronous cudaFree while a stream of the device is being captured (global mode, then
// relaxed): the wait for the device it needs is refused, so the free is refused and changes nothing
// (before: the refusal was taken for a failed device, whose work is over, and the block went back
// to the pool with work perhaps still using it).
void free_during_global_capture() {
  auto owns = memweave_symbol<int (*)(const void*)>("memweaveOwns");
  CHECK(owns != nullptr, "libmemweave.so is not preloaded");
  if (owns == nullptr) return;
  void* p = nullptr;
  CHECK(cudaMalloc(&p, k_block) == cudaSuccess, "cudaMalloc");
  cudaStream_t s = nullptr;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess, "capture");
  CHECK(owns(p) == 1, "the block is not the pool's");
  CHECK(cudaFree(p) == cudaErrorStreamCaptureUnsupported, "cudaFree in a capture not refused");
  cudaGraph_t graph = nullptr;
  (void)cudaStreamEndCapture(s, &graph);  // invalidated by the refused wait, as by cudaFree
  (void)cudaGetLastError();
  // Still live: its free now succeeds (a block the refused free had given back would be a
  // double free).
  CHECK(cudaFree(p) == cudaSuccess, "cudaFree after the capture");
  // In the relaxed mode too: waiting for the device takes in the captured work.
  CHECK(cudaMalloc(&p, k_block) == cudaSuccess, "cudaMalloc");
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess, "capture");
  CHECK(cudaFree(p) == cudaErrorStreamCaptureUnsupported, "cudaFree in a relaxed capture");
  (void)cudaStreamEndCapture(s, &graph);
  (void)cudaGetLastError();
  CHECK(cudaFree(p) == cudaSuccess, "cudaFree after the relaxed capture");
  CHECK(cudaStreamDestroy(s) == cudaSuccess, "cudaStreamDestroy");
}

// PyTorch frees from any thread, also one that never chose a device: ordering the free on
// another device's default stream leaves that thread as it was (no context, its default
// device), where cudaSetDevice left it on the block's device (its next allocation there).
void torch_free_leaves_the_thread_as_it_was() {
  void* h = open_memweave();
  if (h == nullptr) return ++probe_failures(), void();
  auto tm = reinterpret_cast<torch_malloc_fn>(::dlsym(h, "memweave_torch_malloc"));
  auto tf = reinterpret_cast<torch_free_fn>(::dlsym(h, "memweave_torch_free"));
  using get_current_fn = int (*)(void**);
  void* f = nullptr;
  cudaDriverEntryPointQueryResult found{};
  cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &f, 12000, cudaEnableDefault, &found);
  const auto get_current = reinterpret_cast<get_current_fn>(f);
  CHECK(cudaSetDevice(1) == cudaSuccess, "cudaSetDevice(1)");
  void* p = tm(k_block, 1, nullptr);
  std::thread t([&] {
    tf(p, k_block, 1, nullptr);
    int d = -1;
    CHECK(cudaGetDevice(&d) == cudaSuccess && d == 0, "the freeing thread was left on device %d",
          d);
    void* ctx = &d;
    CHECK(get_current != nullptr && get_current(&ctx) == 0 && ctx == nullptr,
          "the freeing thread was left with a context");
  });
  t.join();
  CHECK(fake_cudart_contexts(0) == 0, "memweave created a context on device 0");
  CHECK(cudaDeviceSynchronize() == cudaSuccess, "sync");
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  const std::string scenario = argc > 1 ? argv[1] : "";
  if (scenario == "sync_free") {
    sync_free();
  } else if (scenario == "async_streams") {
    async_streams();
  } else if (scenario == "torch_streams") {
    torch_streams();
  } else if (scenario == "torch_oom") {
    torch_oom();
  } else if (scenario == "current_device") {
    current_device();
  } else if (scenario == "threads_two_devices") {
    threads_two_devices();
  } else if (scenario == "init_deadlock") {
    init_deadlock();
  } else if (scenario == "torch_deadlock") {
    torch_deadlock();
  } else if (scenario == "auto_no_device") {
    auto_no_device();
  } else if (scenario == "no_context_restore") {
    no_context_restore();
  } else if (scenario == "stream_of_another_device") {
    stream_of_another_device();
  } else if (scenario == "pool_cannot_be_made") {
    pool_cannot_be_made();
  } else if (scenario == "bad_frees") {
    bad_frees();
  } else if (scenario == "traces_two_devices") {
    traces_two_devices();
  } else if (scenario == "torch_bad_device") {
    torch_bad_device();
  } else if (scenario == "default_streams_of_two_devices") {
    default_streams_of_two_devices();
  } else if (scenario == "torch_default_stream_of_another_device") {
    torch_default_stream_of_another_device();
  } else if (scenario == "torch_free_naming_another_device") {
    torch_default_stream_of_another_device(0);
  } else if (scenario == "last_error") {
    last_error();
  } else if (scenario == "reset_of_the_freeing_streams_device") {
    reset_of_the_freeing_streams_device();
  } else if (scenario == "reset_of_a_device_without_a_pool") {
    reset_of_a_device_without_a_pool();
  } else if (scenario == "host_pools_of_two_devices") {
    host_pools_of_two_devices();
  } else if (scenario == "reset_beside_another_device") {
    reset_beside_another_device();
  } else if (scenario == "device_reset") {
    device_reset();
  } else if (scenario == "torch_fork_while_logging") {
    torch_fork_while_logging();
  } else if (scenario == "fork_child_refuses") {
    fork_child_refuses();
  } else if (scenario == "error_at_exit") {
    error_at_exit();
  } else if (scenario == "retired_stream") {
    retired_stream();
  } else if (scenario == "stream_capture") {
    stream_capture();
  } else if (scenario == "free_during_global_capture") {
    free_during_global_capture();
  } else if (scenario == "torch_capture_global") {
    torch_capture_global();
  } else if (scenario == "torch_free_leaves_the_thread_as_it_was") {
    torch_free_leaves_the_thread_as_it_was();
  } else {
    std::printf("FAIL: unknown scenario '%s'\n", scenario.c_str());
    return 2;
  }
  std::printf("failures=%d\n", probe_failures());
  return probe_failures() == 0 ? 0 : 1;
}
