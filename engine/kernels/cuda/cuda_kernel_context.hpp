// The execution context of the cuda kernels: a cuDNN handle and a cuBLAS handle bound to
// one CUDA stream (the device's compute stream), with their math modes fixed, a few bytes
// of device scratch for the softmax loss, and a cache of cuDNN convolution heuristics.
//
// Math: FP32 everywhere, no TF32. cuBLAS runs in CUBLAS_DEFAULT_MATH, under which SGEMM
// uses no tensor cores (TF32 needs CUBLAS_TF32_TENSOR_OP_MATH); CUBLAS_PEDANTIC_MATH is not
// used because it also forbids the fast FP32 kernels and buys nothing for FP32 SGEMM.
// cuDNN convolutions use CUDNN_FMA_MATH: CUDNN_DEFAULT_MATH would allow TF32 tensor-core
// kernels for FP32 on Ampere and later, FMA_MATH restricts them to FP32 FMA kernels, so
// the results stay comparable with the host kernels (and between GPU generations).
#pragma once

#include <cstddef>
#include <memory>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

namespace memweave::kernels::cuda {

namespace detail {
class conv_algo_cache;
}  // namespace detail

/// cuDNN and cuBLAS handles bound to one stream. Every kernel of this library enqueues its
/// work on stream() from the calling thread and returns without waiting (the softmax loss
/// read-back excepted). Not thread-safe: one host thread uses a context at a time (as a
/// cuDNN handle). Construct, use and destroy it with the stream's device current.
class cuda_kernel_context {
 public:
  /// The math mode of every cuDNN convolution descriptor the kernels make.
  static constexpr cudnnMathType_t cudnn_math = CUDNN_FMA_MATH;
  /// The math mode of the cuBLAS handle.
  static constexpr cublasMath_t cublas_math = CUBLAS_DEFAULT_MATH;

  /// Creates the handles and binds them to `stream` (cudaStream_t; may be the legacy
  /// default stream 0). `cublas_workspace`, when non-null, is a caller-owned device buffer
  /// of `cublas_workspace_bytes` bytes (256-byte aligned) that cuBLAS uses instead of the
  /// workspace it would otherwise allocate itself outside any memweave pool. Allocates 16
  /// bytes of device scratch (cudaMalloc). Throws device_error when a handle cannot be made
  /// (no device, driver too old, out of memory).
  explicit cuda_kernel_context(cudaStream_t stream, void* cublas_workspace = nullptr,
                               std::size_t cublas_workspace_bytes = 0);

  /// Destroys the handles and frees the scratch; waits for nothing (the caller synchronizes
  /// the stream first if work may still run). Never throws.
  ~cuda_kernel_context();
  cuda_kernel_context(const cuda_kernel_context&) = delete;
  cuda_kernel_context& operator=(const cuda_kernel_context&) = delete;

  /// The stream every kernel runs on.
  cudaStream_t stream() const noexcept { return stream_; }
  /// The cuDNN handle, bound to stream().
  cudnnHandle_t cudnn() const noexcept { return cudnn_; }
  /// The cuBLAS handle, bound to stream(), in cublas_math.
  cublasHandle_t cublas() const noexcept { return cublas_; }

  /// Device scratch: the softmax loss of the latest forward (one double).
  double* loss_scratch() const noexcept { return loss_; }
  /// Device scratch: non-zero when a softmax kernel met a label out of range (one int).
  int* label_error_scratch() const noexcept { return label_error_; }

  /// The cuDNN convolution heuristics met so far, by shape (see conv.hpp).
  detail::conv_algo_cache& conv_cache() noexcept { return *conv_cache_; }

 private:
  void release() noexcept;

  cudaStream_t stream_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* scratch_ = nullptr;     // cudaMalloc'd: [double loss][int label error]
  double* loss_ = nullptr;      // into scratch_
  int* label_error_ = nullptr;  // into scratch_
  std::unique_ptr<detail::conv_algo_cache> conv_cache_;
};

}  // namespace memweave::kernels::cuda
