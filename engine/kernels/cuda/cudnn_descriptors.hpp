// Private helpers of the cuda kernels: RAII owners of the cuDNN descriptors (created per
// call: making a descriptor is a host-side struct fill, far cheaper than the kernel it
// describes), shape-to-int conversion, and the argument checks every kernel runs before it
// enqueues anything. Not part of the kernels' API.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include <cudnn.h>

#include "engine/kernels/cuda/cuda_library_check.hpp"
#include "engine/kernels/kernel_checks.hpp"
#include "memweave/core/error.hpp"
#include "memweave/engine/layer_params.hpp"

namespace memweave::kernels::cuda::detail {

// The argument checks shared with the host kernels (engine/kernels/kernel_checks.hpp).
using checks::check_pointer;
using checks::check_pointers;
using checks::shape_text;

/// Throws invalid_argument naming the kernel when a shape has an empty or negative extent
/// (checks::check_shape), or more elements than cuDNN's int-indexed descriptors hold
/// (2^31 - 1). The shape check these kernels pass to the shared checks.
void check_shape(const char* kernel, const shape4& s);

/// check_shape(kernel, s), then check_pointers(kernel, args).
inline void check_tensors(const char* kernel, const shape4& s,
                          std::initializer_list<checks::named_pointer> args) {
  checks::check_tensors(kernel, s, args, check_shape);
}

/// `v` as an int; throws invalid_argument naming the kernel and `what` when out of range.
int to_int(const char* kernel, const char* what, std::int64_t v);

/// A cudnnTensorDescriptor_t (FP32, NCHW).
class tensor_descriptor {
 public:
  tensor_descriptor() { MEMWEAVE_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d_)); }
  /// Packed NCHW of shape `s` (checked by check_shape first).
  explicit tensor_descriptor(const shape4& s) : tensor_descriptor() { set(s); }
  ~tensor_descriptor() { (void)cudnnDestroyTensorDescriptor(d_); }
  tensor_descriptor(const tensor_descriptor&) = delete;
  tensor_descriptor& operator=(const tensor_descriptor&) = delete;

  void set(const shape4& s);
  /// The (1, c, 1, 1) descriptor of per-channel vectors (biases, BN parameters).
  void set_channels(std::int64_t c);
  cudnnTensorDescriptor_t get() const noexcept { return d_; }

 private:
  cudnnTensorDescriptor_t d_ = nullptr;
};

/// A cudnnFilterDescriptor_t (FP32, NCHW: out, in/groups, kh, kw).
class filter_descriptor {
 public:
  filter_descriptor() { MEMWEAVE_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d_)); }
  ~filter_descriptor() { (void)cudnnDestroyFilterDescriptor(d_); }
  filter_descriptor(const filter_descriptor&) = delete;
  filter_descriptor& operator=(const filter_descriptor&) = delete;
  cudnnFilterDescriptor_t get() const noexcept { return d_; }

 private:
  cudnnFilterDescriptor_t d_ = nullptr;
};

/// A cudnnConvolutionDescriptor_t.
class convolution_descriptor {
 public:
  convolution_descriptor() { MEMWEAVE_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d_)); }
  ~convolution_descriptor() { (void)cudnnDestroyConvolutionDescriptor(d_); }
  convolution_descriptor(const convolution_descriptor&) = delete;
  convolution_descriptor& operator=(const convolution_descriptor&) = delete;
  cudnnConvolutionDescriptor_t get() const noexcept { return d_; }

 private:
  cudnnConvolutionDescriptor_t d_ = nullptr;
};

/// A cudnnPoolingDescriptor_t.
class pooling_descriptor {
 public:
  pooling_descriptor() { MEMWEAVE_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&d_)); }
  ~pooling_descriptor() { (void)cudnnDestroyPoolingDescriptor(d_); }
  pooling_descriptor(const pooling_descriptor&) = delete;
  pooling_descriptor& operator=(const pooling_descriptor&) = delete;
  cudnnPoolingDescriptor_t get() const noexcept { return d_; }

 private:
  cudnnPoolingDescriptor_t d_ = nullptr;
};

/// A cudnnActivationDescriptor_t.
class activation_descriptor {
 public:
  activation_descriptor() { MEMWEAVE_CUDNN_CHECK(cudnnCreateActivationDescriptor(&d_)); }
  ~activation_descriptor() { (void)cudnnDestroyActivationDescriptor(d_); }
  activation_descriptor(const activation_descriptor&) = delete;
  activation_descriptor& operator=(const activation_descriptor&) = delete;
  cudnnActivationDescriptor_t get() const noexcept { return d_; }

 private:
  cudnnActivationDescriptor_t d_ = nullptr;
};

/// A cudnnLRNDescriptor_t.
class lrn_descriptor {
 public:
  lrn_descriptor() { MEMWEAVE_CUDNN_CHECK(cudnnCreateLRNDescriptor(&d_)); }
  ~lrn_descriptor() { (void)cudnnDestroyLRNDescriptor(d_); }
  lrn_descriptor(const lrn_descriptor&) = delete;
  lrn_descriptor& operator=(const lrn_descriptor&) = delete;
  cudnnLRNDescriptor_t get() const noexcept { return d_; }

 private:
  cudnnLRNDescriptor_t d_ = nullptr;
};

/// The blend factors of cuDNN/cuBLAS calls on FP32 data (host memory).
inline constexpr float k_one = 1.0f;
inline constexpr float k_zero = 0.0f;
/// beta for an output that is overwritten (0) or accumulated into (1).
inline const float* beta_for(bool accumulate) noexcept {
  return accumulate ? &k_one : &k_zero;
}

}  // namespace memweave::kernels::cuda::detail
