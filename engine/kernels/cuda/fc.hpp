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
#pragma once

#include "engine/kernels/cuda/cuda_kernel_context.hpp"
#include "memweave/engine/layer_params.hpp"

namespace memweave::kernels::cuda {

/// y = x * W^T (+ b when p.bias; b must then be non-null).
void fc_forward(cuda_kernel_context& ctx, const shape4& in, const fc_params& p, const float* x,
                const float* w, const float* b, float* y);

/// dx = dy * W. accumulate: dx += it (SGEMM's beta = 1).
void fc_backward_data(cuda_kernel_context& ctx, const shape4& in, const fc_params& p,
                      const float* w, const float* dy, float* dx, bool accumulate);

/// dW = dy^T * x (overwritten); db = column sums of dy (overwritten) when `db` is non-null.
/// accumulate: both add to what they hold (SGEMM's and cuDNN's beta = 1), as a split step's
/// micro-batches after the first.
void fc_backward_weights(cuda_kernel_context& ctx, const shape4& in, const fc_params& p,
                         const float* x, const float* dy, float* dw, float* db,
                         bool accumulate = false);

}  // namespace memweave::kernels::cuda
