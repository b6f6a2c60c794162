// Max and average pooling on the GPU through cuDNN, with the host kernels' semantics
// (engine/kernels/host/pool.hpp): windows start inside the padded input (floor division);
// max ignores the padding (CUDNN_POOLING_MAX); average divides by kernel_h * kernel_w,
// padding included (CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING); global = one window over
// the whole H x W; adaptive average pooling by a custom kernel with the host's order and
// rounding (bit-identical to it). Max backward routes each dy to its window's maximum, found again
// from x and y (no index tensor); ties, which random data does not have, may route differently from
// the host's first-in-scan-order rule.
#pragma once

#include "engine/kernels/cuda/cuda_kernel_context.hpp"
#include "memweave/engine/layer_params.hpp"

namespace memweave::kernels::cuda {

/// y = pool(x). Throws invalid_argument for a padding not smaller than the kernel, or a
/// kernel larger than the padded input.
void pool_forward(cuda_kernel_context& ctx, const shape4& in, const pool_params& p, const float* x,
                  float* y);

/// dx from x, y, dy (accumulate: dx += it, cuDNN's beta = 1). x and y are read only by max
/// pooling and may be null for average pooling.
void pool_backward(cuda_kernel_context& ctx, const shape4& in, const pool_params& p, const float* x,
                   const float* y, const float* dy, float* dx, bool accumulate);

}  // namespace memweave::kernels::cuda
