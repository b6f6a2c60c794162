// Dropout on the GPU with the host's counter-based mask (engine/kernels/host/dropout.hpp):
// element i is kept when uniform(seed, i) >= ratio, uniform being the host's hash of
// (seed, i) mapped to [0, 1) with 24 bits. A custom kernel computes the same hash, so the
// mask is bit-identical to the host's for a seed, and so are y and dx for equal inputs.
#pragma once

#include <cstdint>

#include "engine/kernels/cuda/cuda_kernel_context.hpp"
#include "memweave/engine/layer_params.hpp"

namespace memweave::kernels::cuda {

/// mask[i] = (uniform(seed, i) >= ratio) ? 1/(1 - ratio) : 0; y[i] = x[i] * mask[i].
/// Throws invalid_argument unless 0 <= ratio < 1.
void dropout_forward(cuda_kernel_context& ctx, const shape4& s, const dropout_params& p,
                     std::uint64_t seed, const float* x, float* y, float* mask,
                     std::int64_t first = 0);

/// dx = dy * mask (accumulate: dx += it). dx may equal dy.
void dropout_backward(cuda_kernel_context& ctx, const shape4& s, const float* mask, const float* dy,
                      float* dx, bool accumulate);

}  // namespace memweave::kernels::cuda
