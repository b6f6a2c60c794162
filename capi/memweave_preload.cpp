// libmemweave_preload.so: with LD_PRELOAD, an unmodified program linked against the SHARED
// CUDA runtime gets cudaMalloc, cudaFree and cudaMemGetInfo from memweave's pool.
//
// - cudaMalloc: from the pool (memweaveMalloc; initialized from MEMWEAVE_* on first use).
//   When memweave cannot initialize at all (no such device, a bad setting), one warning is
//   logged and calls go to the real runtime, so the program runs as it would without us.
// - cudaFree: pointers inside the pool go back to it (a bad one gives the pool's error);
//   every other pointer, and NULL (programs use cudaFree(0) to create the context), goes to
//   the real cudaFree.
// - cudaMemGetInfo: the pool's free and total bytes.
// The real functions are found with dlsym(RTLD_NEXT). A thread-local depth counter makes
// calls made while we are already inside one of these functions (memweave's own cuda
// backend calls cudaMalloc and cudaMemGetInfo to take its arena) go straight to the runtime.
// Thread-safe: the counter is per thread, the real pointers are resolved once (atomics),
// and the C API is thread-safe. A program linked with the static cudart (the nvcc default)
// binds its calls inside itself and is not affected: link it with -cudart shared. Only
// these three functions are replaced: pool memory must be freed with cudaFree (not
// cudaFreeAsync), and cudaMallocAsync/Managed/Pitch still go to the runtime.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <atomic>
#include <string>

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
using mem_get_info_fn = cudaError_t (*)(size_t*, size_t*);

std::atomic<malloc_fn> g_real_malloc{nullptr};
std::atomic<free_fn> g_real_free{nullptr};
std::atomic<mem_get_info_fn> g_real_mem_get_info{nullptr};
std::atomic<bool> g_warned{false};

cudaError_t real_malloc(void** p, size_t bytes) noexcept {
  malloc_fn f = real(g_real_malloc, "cudaMalloc");
  return f != nullptr ? f(p, bytes) : cudaErrorInitializationError;
}

cudaError_t real_free(void* p) noexcept {
  free_fn f = real(g_real_free, "cudaFree");
  return f != nullptr ? f(p) : cudaErrorInitializationError;
}

cudaError_t real_mem_get_info(size_t* free_bytes, size_t* total_bytes) noexcept {
  mem_get_info_fn f = real(g_real_mem_get_info, "cudaMemGetInfo");
  return f != nullptr ? f(free_bytes, total_bytes) : cudaErrorInitializationError;
}

// After a failed call: whether memweave could not initialize (so the runtime should serve).
bool memweave_unavailable() noexcept {
  if (memweaveIsInitialized() != 0) return false;
  if (!g_warned.exchange(true)) {
    memweave::log(memweave::log_level::warn,
                  std::string("libmemweave_preload: memweave could not initialize; CUDA "
                              "allocations go to the CUDA runtime: ") +
                      memweaveGetLastErrorMessage());
  }
  return true;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) cudaError_t cudaMalloc(void** devPtr, size_t size) {
  if (t_depth > 0) return real_malloc(devPtr, size);
  reentry_guard guard;
  if (devPtr == nullptr) return cudaErrorInvalidValue;
  const int rc = memweaveMalloc(devPtr, size);
  if (rc == MEMWEAVE_SUCCESS || rc == MEMWEAVE_ERROR_MEMORY_ALLOCATION) {
    return static_cast<cudaError_t>(rc);
  }
  if (memweave_unavailable()) return real_malloc(devPtr, size);
  return static_cast<cudaError_t>(rc);
}

__attribute__((visibility("default"))) cudaError_t cudaFree(void* devPtr) {
  if (t_depth > 0 || devPtr == nullptr) return real_free(devPtr);
  reentry_guard guard;
  if (memweaveOwns(devPtr) != 0) return static_cast<cudaError_t>(memweaveFree(devPtr));
  return real_free(devPtr);
}

__attribute__((visibility("default"))) cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  if (t_depth > 0) return real_mem_get_info(free, total);
  reentry_guard guard;
  if (free == nullptr || total == nullptr) return cudaErrorInvalidValue;
  const int rc = memweaveMemGetInfo(free, total);
  if (rc == MEMWEAVE_SUCCESS) return cudaSuccess;
  if (memweave_unavailable()) return real_mem_get_info(free, total);
  return static_cast<cudaError_t>(rc);
}

}  // extern "C"
