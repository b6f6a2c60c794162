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
//
// Determinism: with cuda_kernel_options::deterministic (MEMWEAVE_CUDNN_DETERMINISTIC) the
// convolution listings keep only algorithms cuDNN reports deterministic, and the fixed
// fallbacks are deterministic ones (conv.hpp). cuBLAS needs no switch: its routines give the
// same bits on every run on one GPU model and toolkit as long as one stream uses the handle
// (multi-stream use of one handle is what CUBLAS_WORKSPACE_CONFIG works around), and this
// context binds its handle to one stream for life and never enables atomics mode.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

namespace memweave::kernels::cuda {

namespace detail {
class conv_algo_cache;

}  // namespace detail

/// How a context chooses among cuDNN's algorithms. Settings made in code override the
/// environment.
struct cuda_kernel_options {
  /// Only algorithms cuDNN reports CUDNN_DETERMINISTIC (MEMWEAVE_CUDNN_DETERMINISTIC).
  bool deterministic = false;
  /// Reads MEMWEAVE_CUDNN_DETERMINISTIC; throws invalid_argument naming it when malformed.
  static cuda_kernel_options from_environment();
};

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
  /// default stream 0). The cuBLAS handle runs without a workspace (cublasSetWorkspace with
  /// 0 bytes): every device byte a step's kernels use is then a tensor or a convolution
  /// workspace that `plan` models too. Allocates 16 bytes of device scratch (cudaMalloc). Throws
  /// device_error when a handle cannot be made (no device, driver too old, out of memory),
  /// invalid_argument when MEMWEAVE_CUDNN_DETERMINISTIC is malformed (default options).
  explicit cuda_kernel_context(cudaStream_t stream, const cuda_kernel_options& options =
                                                        cuda_kernel_options::from_environment());

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

  /// Whether only deterministic cuDNN algorithms are listed and chosen.
  bool deterministic() const noexcept { return options_.deterministic; }
  /// The device the context was made on.
  int ordinal() const noexcept { return ordinal_; }

  /// Device scratch: the softmax loss of the latest forward (one double).
  double* loss_scratch() const noexcept { return loss_; }
  /// Device scratch: non-zero when a softmax kernel met a label out of range (one int).
  int* label_error_scratch() const noexcept { return label_error_; }

  /// Device scratch of at least `doubles` doubles, for the sums that cross a split step's
  /// micro-batches (BN's, micro_batch.hpp): 16 bytes per channel of the widest BN split so
  /// far, cudaMalloc'd outside the heap as the loss scratch is. Grow-only; growing frees the
  /// old buffer (cudaFree waits for the device), so the pointer holds until the next call.
  double* sums_scratch(std::size_t doubles);

  /// Two more streams (non-blocking, made at first use with the device current) for a split
  /// step's copies out and in at once, the link's two directions, and the events that fork
  /// them from stream() and join them back (link_streams::fork / join). Destroyed with the
  /// context.
  struct link_streams {
    cudaStream_t out = nullptr;
    cudaStream_t in = nullptr;
    cudaEvent_t forked = nullptr;
    cudaEvent_t out_done = nullptr;
    cudaEvent_t in_done = nullptr;
  };
  const link_streams& side_links();

  /// What a split step's fp16 micro-tensors (MEMWEAVE_SPLIT_COMPRESS=fp16) cross the link
  /// through, made at first use outside the heap, as sums_scratch is (4 MiB of device memory
  /// and a pinned word): per direction a device buffer of `chunk` halves, which a slice
  /// crosses chunk by chunk, expanded or rounded by a kernel on the device; and the largest
  /// relative error of the values rounded, as a float's bits, in a device word read back
  /// through a pinned one. Freed with the context.
  struct fp16_staging {
    static constexpr std::size_t chunk = std::size_t{1} << 20;  // values
    std::uint16_t* in = nullptr;     // device: the copies in, then the kernels expanding them
    std::uint16_t* out = nullptr;    // device: the kernels rounding, then the copies out
    unsigned* error = nullptr;       // device
    unsigned* error_host = nullptr;  // pinned
  };
  const fp16_staging& fp16_links();

  /// The cuDNN convolution heuristics met so far, by shape (see conv.hpp).
  detail::conv_algo_cache& conv_cache() noexcept { return *conv_cache_; }

 private:
  void release() noexcept;
  static void destroy(link_streams& l) noexcept;

  cuda_kernel_options options_;
  int ordinal_ = 0;
  cudaStream_t stream_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* scratch_ = nullptr;     // cudaMalloc'd: [double loss][int label error]
  double* loss_ = nullptr;      // into scratch_
  int* label_error_ = nullptr;  // into scratch_
  double* sums_ = nullptr;      // cudaMalloc'd: sums_doubles_ of them
  std::size_t sums_doubles_ = 0;
  link_streams links_;  // made by side_links()
  fp16_staging fp16_;   // made by fp16_links(): in, out and error in one cudaMalloc
  std::unique_ptr<detail::conv_algo_cache> conv_cache_;
};

}  // namespace memweave::kernels::cuda
