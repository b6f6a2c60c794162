// Cross-channel local response normalization on the GPU through cuDNN
// (cudnnLRNCrossChannelForward/Backward), with the host kernels' semantics
// (engine/kernels/host/lrn.hpp): y = x * (k + alpha/size * sum_{window} x^2)^-beta, the
// window c - (size-1)/2 .. c + size/2 (cuDNN's lookBehind / lookAhead for lrnN = size;
// cuDNN divides alpha by the window width itself). cuDNN bounds the parameters: 1 <= size
// <= 16, k >= 1e-5, beta >= 0.01.
#pragma once

#include "engine/kernels/cuda/cuda_kernel_context.hpp"
#include "memweave/engine/layer_params.hpp"

namespace memweave::kernels::cuda {

/// y = lrn(x). Throws invalid_argument for parameters outside cuDNN's bounds.
void lrn_forward(cuda_kernel_context& ctx, const shape4& in, const lrn_params& p, const float* x,
                 float* y);

/// dx from x, y, dy (accumulate: dx += it, cuDNN's beta = 1).
void lrn_backward(cuda_kernel_context& ctx, const shape4& in, const lrn_params& p, const float* x,
                  const float* y, const float* dy, float* dx, bool accumulate);

}  // namespace memweave::kernels::cuda
