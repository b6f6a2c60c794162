// Checking of cuDNN and cuBLAS calls, alongside device/cuda/cuda_check.hpp's
// MEMWEAVE_CUDA_CHECK for the runtime: MEMWEAVE_CUDNN_CHECK(call) and
// MEMWEAVE_CUBLAS_CHECK(call) throw memweave::device_error naming the call, the status's name
// and its description. Private to the cuda kernels.
#pragma once

#include <cublas_v2.h>
#include <cudnn.h>

#include "device/cuda/cuda_check.hpp"

namespace memweave::kernels::cuda::detail {

/// Throws device_error "<call> failed: <status name>: <description> (at file:line)".
[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file,
                                    int line);

/// Throws device_error "<call> failed: <cublasGetStatusName>: <cublasGetStatusString> (at
/// file:line)".
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file,
                                     int line);

}  // namespace memweave::kernels::cuda::detail

/// Evaluates a cudnnStatus_t expression once; throws memweave::device_error unless it is
/// CUDNN_STATUS_SUCCESS.
#define MEMWEAVE_CUDNN_CHECK(call)                                                        \
  do {                                                                                    \
    const cudnnStatus_t memweave_cudnn_status_ = (call);                                  \
    if (memweave_cudnn_status_ != CUDNN_STATUS_SUCCESS) {                                 \
      ::memweave::kernels::cuda::detail::throw_cudnn_error(memweave_cudnn_status_, #call, \
                                                           __FILE__, __LINE__);           \
    }                                                                                     \
  } while (0)

/// Evaluates a cublasStatus_t expression once; throws memweave::device_error unless it is
/// CUBLAS_STATUS_SUCCESS.
#define MEMWEAVE_CUBLAS_CHECK(call)                                                         \
  do {                                                                                      \
    const cublasStatus_t memweave_cublas_status_ = (call);                                  \
    if (memweave_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                 \
      ::memweave::kernels::cuda::detail::throw_cublas_error(memweave_cublas_status_, #call, \
                                                            __FILE__, __LINE__);            \
    }                                                                                       \
  } while (0)
