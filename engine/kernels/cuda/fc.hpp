// Fully connected layer on the GPU through cuBLAS SGEMM: y = x * W^T + b, each image
// flattened.
//
// Layouts as the host kernels (engine/kernels/host/fc.hpp), all row-major: x (n, in) with
// in = in_shape.per_image(); W (out_features, in); b (out_features); y (n, out_features).
// cuBLAS is column-major, and a row-major (r x c) matrix is the column-major (c x r) matrix
// of its transpose with leading dimension c, so each product is computed transposed:
//   forward   y^T (out x n)  = W (out x in, op T of col-major in x out) * x^T (in x n)
//   data      dx^T (in x n)  = W^T (in x out) * dy^T (out x n)
//   weights   dW^T (in x out) = x^T (in x n) * dy (n x out, op T of col-major out x n)
// The bias (and its gradient) go through cuDNN (cudnnAddTensor, cudnnConvolutionBackwardBias
// over (n, out, 1, 1)). FP32 in CUBLAS_DEFAULT_MATH (no TF32).
// An output-channel group (TSPLIT's channel split) is p.out_features of every image's
// `pitch` features of y and dy (the leading dimension of their GEMM operand); its bias and
// bias gradient then go through custom kernels (launch_accumulate, launch_column_sums).
#pragma once

#include <cstdint>

#include "engine/kernels/cuda/cuda_kernel_context.hpp"
#include "memweave/engine/layer_params.hpp"

namespace memweave::kernels::cuda {

/// y = x * W^T (+ b when p.bias; b must then be non-null). y_pitch: floats from one image's
/// row of y to the next (0: p.out_features, packed; never less).
void fc_forward(cuda_kernel_context& ctx, const shape4& in, const fc_params& p, const float* x,
                const float* w, const float* b, float* y, std::int64_t y_pitch = 0);

/// dx = dy * W. accumulate: dx += it (SGEMM's beta = 1).
/// dy_pitch as fc_forward's y_pitch.
void fc_backward_data(cuda_kernel_context& ctx, const shape4& in, const fc_params& p,
                      const float* w, const float* dy, float* dx, bool accumulate,
                      std::int64_t dy_pitch = 0);

/// dW = dy^T * x (overwritten); db = column sums of dy (overwritten) when `db` is non-null.
/// accumulate: both add to what they hold (SGEMM's and cuDNN's beta = 1), as a split step's
/// micro-batches after the first. dy_pitch as fc_forward's y_pitch.
void fc_backward_weights(cuda_kernel_context& ctx, const shape4& in, const fc_params& p,
                         const float* x, const float* dy, float* dw, float* db,
                         bool accumulate = false, std::int64_t dy_pitch = 0);

}  // namespace memweave::kernels::cuda
