// libmemweave_preload.so: with LD_PRELOAD, an unmodified program linked against the SHARED
// CUDA runtime gets cudaMalloc, cudaFree, cudaMallocAsync, cudaFreeAsync and
// cudaMemGetInfo from memweave's pools, with the runtime's contract:
//
// - cudaMalloc / cudaMallocAsync: from the pool of the calling thread's current device
//   (memweaveMalloc / memweaveMallocAsync; initialized from MEMWEAVE_* on first use). When
//   memweave cannot serve that device (no usable GPU, a bad setting), one warning is logged
//   and the call goes to the real runtime, so the program runs as it would without us.
//   memweave never hands out simulated host memory here unless MEMWEAVE_DEVICE=host names it.
// - cudaFree: pointers inside a pool go back to it after the device is idle (as the
//   runtime's cudaFree, which synchronizes); cudaFreeAsync: back in the stream's order
//   (reused at once on that stream, elsewhere once the stream reaches the free). Every
//   other pointer, and NULL (programs use cudaFree(0) to create the context), goes to the
//   real function.
// - cudaMemGetInfo: the current device's pool's free and total bytes.
// - cudaStreamDestroy: first memweaveRetireStream (the blocks freed on the stream wait for
//   their events from then on), then the runtime's.
// - cudaDeviceReset: first memweaveReleaseDevicePool (the current device's pool goes back to
//   the runtime before the reset frees its arena), then the runtime's.
// - cudaGetLastError / cudaPeekAtLastError: the runtime's last error, and a failure of a call
//   memweave served as the runtime would have recorded it (the runtime keeps one error per
//   host thread, set by every failing call). memweave's own runtime calls clear the runtime's
//   (a free's event not ready yet, a retried arena), so an error the program had not read
//   yet is kept here across them. An out-of-memory is also logged, with the request, the
//   free bytes and the largest free run, which a plain CUDA program has no other way to see.
// The real functions are found with dlsym(RTLD_NEXT). Calls go straight to them while the
// thread is already inside memweave: inside one of these functions (a thread-local depth)
// or inside any memweave call (memweave_internal_busy(): memweaveInit, the PyTorch entry
// points, ...), since memweave's cuda backend calls cudaMalloc, cudaFree and cudaMemGetInfo
// itself to take its arenas, and sending those back into memweave would deadlock.
// Thread-safe: the depth is per thread, the real pointers are resolved once (atomics), and
// the C API is thread-safe. A program linked with the static cudart (the nvcc default)
// binds its calls inside itself and is not affected: link it with -cudart shared.
// cudaMallocManaged/Pitch/FromPoolAsync still go to the runtime.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <atomic>
#include <string>

#include "capi/capi_busy.h"
#include "memweave/core/log.hpp"
#include "memweave/memweave.h"

namespace {

thread_local int t_depth = 0;  // > 0 while this thread is inside an interposed call

struct reentry_guard {
  reentry_guard() noexcept { ++t_depth; }
  ~reentry_guard() { --t_depth; }
  reentry_guard(const reentry_guard&) = delete;
  reentry_guard& operator=(const reentry_guard&) = delete;
};

// Whether this call comes from memweave itself (and must reach the real runtime).
bool from_memweave() noexcept {
  return t_depth > 0 || memweave_internal_busy() != 0;
}

// The runtime's own function `name`, resolved once; nullptr when the process has no CUDA
// runtime after us (e.g. it never loaded libcudart).
template <class F>
F real(std::atomic<F>& slot, const char* name) noexcept {
  F f = slot.load(std::memory_order_acquire);
  if (f == nullptr) {
    f = reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
    slot.store(f, std::memory_order_release);
  }
  return f;
}

using malloc_fn = cudaError_t (*)(void**, size_t);
using free_fn = cudaError_t (*)(void*);
using malloc_async_fn = cudaError_t (*)(void**, size_t, cudaStream_t);
using free_async_fn = cudaError_t (*)(void*, cudaStream_t);
using mem_get_info_fn = cudaError_t (*)(size_t*, size_t*);
using last_error_fn = cudaError_t (*)();
using stream_destroy_fn = cudaError_t (*)(cudaStream_t);
using device_reset_fn = cudaError_t (*)();

std::atomic<malloc_fn> g_real_malloc{nullptr};
std::atomic<free_fn> g_real_free{nullptr};
std::atomic<malloc_async_fn> g_real_malloc_async{nullptr};
std::atomic<free_async_fn> g_real_free_async{nullptr};
std::atomic<malloc_async_fn> g_real_malloc_async_ptsz{nullptr};
std::atomic<free_async_fn> g_real_free_async_ptsz{nullptr};
std::atomic<mem_get_info_fn> g_real_mem_get_info{nullptr};
std::atomic<last_error_fn> g_real_get_last_error{nullptr};
std::atomic<last_error_fn> g_real_peek_at_last_error{nullptr};
std::atomic<stream_destroy_fn> g_real_stream_destroy{nullptr};
std::atomic<device_reset_fn> g_real_device_reset{nullptr};
std::atomic<bool> g_warned{false};

cudaError_t real_malloc(void** p, size_t bytes) noexcept {
  malloc_fn f = real(g_real_malloc, "cudaMalloc");
  return f != nullptr ? f(p, bytes) : cudaErrorInitializationError;
}

cudaError_t real_free(void* p) noexcept {
  free_fn f = real(g_real_free, "cudaFree");
  return f != nullptr ? f(p) : cudaErrorInitializationError;
}

cudaError_t real_malloc_async(std::atomic<malloc_async_fn>& slot, const char* name, void** p,
                              size_t bytes, cudaStream_t s) noexcept {
  malloc_async_fn f = real(slot, name);
  return f != nullptr ? f(p, bytes, s) : cudaErrorInitializationError;
}

cudaError_t real_free_async(std::atomic<free_async_fn>& slot, const char* name, void* p,
                            cudaStream_t s) noexcept {
  free_async_fn f = real(slot, name);
  return f != nullptr ? f(p, s) : cudaErrorInitializationError;
}

cudaError_t real_mem_get_info(size_t* free_bytes, size_t* total_bytes) noexcept {
  mem_get_info_fn f = real(g_real_mem_get_info, "cudaMemGetInfo");
  return f != nullptr ? f(free_bytes, total_bytes) : cudaErrorInitializationError;
}

cudaError_t real_get_last_error() noexcept {
  last_error_fn f = real(g_real_get_last_error, "cudaGetLastError");
  return f != nullptr ? f() : cudaSuccess;
}

cudaError_t real_peek_at_last_error() noexcept {
  last_error_fn f = real(g_real_peek_at_last_error, "cudaPeekAtLastError");
  return f != nullptr ? f() : cudaSuccess;
}

// This thread's last error that the runtime does not hold: a failure of a call memweave
// served, or the runtime's own that memweave's calls cleared. Whenever it is set the
// runtime's is cleared, so an error the runtime holds is always the more recent one.
// Trivially destructible: readable until the thread is gone.
thread_local cudaError_t t_error = cudaSuccess;
// Whether this thread's last out-of-memory was logged (log_out_of_memory); reset by a success.
thread_local bool t_out_of_memory_told = false;

// Around a call memweave serves: keeps the program's view of the last error as the runtime's
// would be after the call.
class last_error_scope {
 public:
  last_error_scope() noexcept : before_(real_peek_at_last_error()) {}
  last_error_scope(const last_error_scope&) = delete;
  last_error_scope& operator=(const last_error_scope&) = delete;

  /// The result of the call memweave served, recorded as the runtime records a failure.
  cudaError_t served(cudaError_t r) noexcept {
    if (r != cudaSuccess) {
      (void)real_get_last_error();  // older than this one
      t_error = r;
    } else {
      keep_before();
    }
    return r;
  }
  /// The result of the runtime's own function, called after memweave could not serve the
  /// call: the runtime recorded a failure itself.
  cudaError_t forwarded(cudaError_t r) noexcept {
    if (r == cudaSuccess) keep_before();
    return r;
  }

 private:
  // An error the runtime held before the call and no longer does was cleared inside memweave.
  void keep_before() noexcept {
    if (before_ != cudaSuccess && real_peek_at_last_error() == cudaSuccess) t_error = before_;
  }
  const cudaError_t before_;
};

// After a call of memweave's allocation or memory-info functions (their arguments checked
// already): whether memweave cannot serve this device at all, so the runtime should. Any
// code but success and out-of-memory means that (no device, a bad setting, ...). Warns once.
bool memweave_unavailable(int rc) noexcept {
  if (rc == MEMWEAVE_SUCCESS || rc == MEMWEAVE_ERROR_MEMORY_ALLOCATION) return false;
  // A child forked from a process that used memweave (the one use of this code): forwarded
  // without a word, since a thread of the parent may have held the log's lock at the fork.
  if (rc == MEMWEAVE_ERROR_NOT_SUPPORTED) return true;
  if (!g_warned.exchange(true)) {
    memweave::log(memweave::log_level::warn,
                  std::string("libmemweave_preload: memweave cannot serve this device; its "
                              "CUDA allocations go to the CUDA runtime: ") +
                      memweaveGetLastErrorMessage());
  }
  return true;
}

// After an allocation memweave served: an out-of-memory of `call` is logged with memweave's
// numbers (the request, free bytes, the largest free run), since the CUDA runtime prints
// nothing and a plain program reads no C API. Once per thread's run of failures: a program
// that probes for the largest block (or falls back on failure) would otherwise fill stderr. A
// success ends the run.
void log_out_of_memory(int rc, const char* call) noexcept {
  if (rc == MEMWEAVE_SUCCESS) t_out_of_memory_told = false;
  if (rc != MEMWEAVE_ERROR_MEMORY_ALLOCATION || t_out_of_memory_told) return;
  t_out_of_memory_told = true;
  try {
    memweave::log(memweave::log_level::warn,
                  std::string("libmemweave_preload: ") + call +
                      " failed: " + memweaveGetLastErrorMessage() +
                      " (further failures on this thread are not logged until an allocation "
                      "succeeds)");
  } catch (...) {  // no memory for the text: the code still says it
  }
}

// What the interposed cudaFree/cudaFreeAsync return for memweave's answer: the CUDA 13
// runtime documents cudaErrorInvalidValue for a pointer that is not a live allocation
// (cudaErrorInvalidDevicePointer, the C API's code for it, is deprecated since CUDA 10.1).
cudaError_t free_result(int rc) noexcept {
  if (rc == MEMWEAVE_ERROR_INVALID_DEVICE_POINTER) return cudaErrorInvalidValue;
  return static_cast<cudaError_t>(rc);
}

// The stream-ordered allocation of cudaMallocAsync (`name` is the real function's name).
cudaError_t malloc_async(std::atomic<malloc_async_fn>& slot, const char* name, void** p,
                         size_t bytes, cudaStream_t s) noexcept {
  if (from_memweave()) return real_malloc_async(slot, name, p, bytes, s);
  reentry_guard guard;
  last_error_scope errors;
  if (p == nullptr) return errors.served(cudaErrorInvalidValue);
  const int rc = memweaveMallocAsync(p, bytes, s);
  // A stream being captured into a graph: the runtime makes the allocation a node of the
  // graph, which owns it (its free in the capture goes to the runtime too: not memweave's).
  if (rc == MEMWEAVE_ERROR_STREAM_CAPTURE_UNSUPPORTED || memweave_unavailable(rc)) {
    return errors.forwarded(real_malloc_async(slot, name, p, bytes, s));
  }
  log_out_of_memory(rc, "cudaMallocAsync");
  return errors.served(static_cast<cudaError_t>(rc));
}

cudaError_t free_async(std::atomic<free_async_fn>& slot, const char* name, void* p,
                       cudaStream_t s) noexcept {
  if (from_memweave() || p == nullptr) return real_free_async(slot, name, p, s);
  reentry_guard guard;
  if (memweaveOwns(p) == 0) return real_free_async(slot, name, p, s);
  last_error_scope errors;
  return errors.served(free_result(memweaveFreeAsync(p, s)));
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) cudaError_t cudaMalloc(void** devPtr, size_t size) {
  if (from_memweave()) return real_malloc(devPtr, size);
  reentry_guard guard;
  last_error_scope errors;
  if (devPtr == nullptr) return errors.served(cudaErrorInvalidValue);
  const int rc = memweaveMalloc(devPtr, size);
  if (memweave_unavailable(rc)) return errors.forwarded(real_malloc(devPtr, size));
  log_out_of_memory(rc, "cudaMalloc");
  return errors.served(static_cast<cudaError_t>(rc));
}

__attribute__((visibility("default"))) cudaError_t cudaFree(void* devPtr) {
  if (from_memweave() || devPtr == nullptr) return real_free(devPtr);
  reentry_guard guard;
  if (memweaveOwns(devPtr) == 0) return real_free(devPtr);
  last_error_scope errors;
  return errors.served(free_result(memweaveFree(devPtr)));
}

__attribute__((visibility("default"))) cudaError_t cudaMallocAsync(void** devPtr, size_t size,
                                                                   cudaStream_t stream) {
  return malloc_async(g_real_malloc_async, "cudaMallocAsync", devPtr, size, stream);
}

__attribute__((visibility("default"))) cudaError_t cudaFreeAsync(void* devPtr,
                                                                 cudaStream_t stream) {
  return free_async(g_real_free_async, "cudaFreeAsync", devPtr, stream);
}

// The per-thread-default-stream variants (nvcc --default-stream per-thread): there, stream
// 0 means the calling thread's default stream.
__attribute__((visibility("default"))) cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size,
                                                                        cudaStream_t stream) {
  return malloc_async(g_real_malloc_async_ptsz, "cudaMallocAsync_ptsz", devPtr, size,
                      stream == nullptr ? cudaStreamPerThread : stream);
}

__attribute__((visibility("default"))) cudaError_t cudaFreeAsync_ptsz(void* devPtr,
                                                                      cudaStream_t stream) {
  return free_async(g_real_free_async_ptsz, "cudaFreeAsync_ptsz", devPtr,
                    stream == nullptr ? cudaStreamPerThread : stream);
}

__attribute__((visibility("default"))) cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  if (from_memweave()) return real_mem_get_info(free, total);
  reentry_guard guard;
  last_error_scope errors;
  if (free == nullptr || total == nullptr) return errors.served(cudaErrorInvalidValue);
  const int rc = memweaveMemGetInfo(free, total);
  if (memweave_unavailable(rc)) return errors.forwarded(real_mem_get_info(free, total));
  return errors.served(static_cast<cudaError_t>(rc));
}

// The blocks freed on the stream wait for their events from now on: its queued work still
// runs after this returns, and a stream created later may get the same handle.
__attribute__((visibility("default"))) cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  stream_destroy_fn f = real(g_real_stream_destroy, "cudaStreamDestroy");
  if (!from_memweave()) {
    reentry_guard guard;
    (void)memweaveRetireStream(stream);
  }
  return f != nullptr ? f(stream) : cudaErrorInitializationError;
}

// The reset frees every allocation of the current device, memweave's arena among them:
// memweave gives that pool back first (memweaveReleaseDevicePool), so that it never hands out
// memory the runtime freed (or gave to someone else since); the next cudaMalloc makes a new
// pool.
__attribute__((visibility("default"))) cudaError_t cudaDeviceReset() {
  device_reset_fn f = real(g_real_device_reset, "cudaDeviceReset");
  if (!from_memweave()) {
    reentry_guard guard;
    if (memweaveReleaseDevicePool() != MEMWEAVE_SUCCESS) {
      memweave::log(memweave::log_level::warn,
                    std::string("cudaDeviceReset: memweave could not give its pool back first: ") +
                        memweaveGetLastErrorMessage());
    }
  }
  return f != nullptr ? f() : cudaErrorInitializationError;
}

// The runtime's last error if it holds one (the more recent: see t_error), else a failure of
// a call memweave served; both are reset, as the runtime resets its own.
__attribute__((visibility("default"))) cudaError_t cudaGetLastError() {
  if (from_memweave()) return real_get_last_error();
  const cudaError_t runtime = real_get_last_error();
  const cudaError_t served = t_error;
  t_error = cudaSuccess;
  return runtime != cudaSuccess ? runtime : served;
}

__attribute__((visibility("default"))) cudaError_t cudaPeekAtLastError() {
  if (from_memweave()) return real_peek_at_last_error();
  const cudaError_t runtime = real_peek_at_last_error();
  return runtime != cudaSuccess ? runtime : t_error;
}

}  // extern "C"
