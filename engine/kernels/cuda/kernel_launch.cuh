// What every custom kernel's launcher shares (custom_kernels.cu, micro_batch.cu): the
// block size, a grid for an element count, and the check right after a launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device/cuda/cuda_check.hpp"

namespace memweave::kernels::cuda::detail {

/// Threads per block of every custom kernel (a power of two: the reductions halve it).
inline constexpr unsigned k_threads = 256;

/// Blocks for `count` elements at k_threads each, at least 1 and at most 65535 (the
/// element-wise kernels stride over what a grid does not cover).
inline unsigned grid_for(std::int64_t count) {
  const std::int64_t b = (count + k_threads - 1) / k_threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

/// A failed launch (bad configuration, no device) is reported here, naming the kernel,
/// rather than at some later synchronization.
inline void check_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) ::memweave::cuda_backend::throw_cuda_error(e, kernel, __FILE__, __LINE__);
}

}  // namespace memweave::kernels::cuda::detail
