// Checking of CUDA runtime calls: MEMWEAVE_CUDA_CHECK(call) throws device_error naming the
// call, the error's name and its description. Private to memweave (device/ and the
// modules that call CUDA libraries through the cuda backend).
#pragma once

#include <cuda_runtime_api.h>

namespace memweave::cuda_backend {

/// Throws device_error "<call> failed: <cudaGetErrorName>: <cudaGetErrorString> (at file:line)"
/// and clears the thread's last CUDA error (non-sticky errors must not leak into later
/// calls).
[[noreturn]] void throw_cuda_error(cudaError_t error, const char* call, const char* file, int line);

}  // namespace memweave::cuda_backend

/// Evaluates a cudaError_t expression once; throws memweave::device_error unless it is
/// cudaSuccess.
#define MEMWEAVE_CUDA_CHECK(call)                                                        \
  do {                                                                                   \
    const cudaError_t memweave_cuda_status_ = (call);                                    \
    if (memweave_cuda_status_ != cudaSuccess) {                                          \
      ::memweave::cuda_backend::throw_cuda_error(memweave_cuda_status_, #call, __FILE__, \
                                                 __LINE__);                              \
    }                                                                                    \
  } while (0)
