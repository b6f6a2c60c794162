// Dropout on the host with a counter-based mask: element i of a tensor is kept when
// uniform(seed, i) >= ratio, where uniform is a hash of (seed, i) mapped to [0, 1) with 24
// bits. The same seed always gives the same mask, whatever the thread count, so a
// recomputed forward reproduces the mask of the first one.
#pragma once

#include <cstdint>

#include "engine/kernels/host/kernel_context.hpp"
#include "memweave/engine/layer_params.hpp"

namespace memweave::kernels::host {

/// The uniform number in [0, 1) that decides element `index` for `seed` (exposed for tests).
float dropout_uniform(std::uint64_t seed, std::int64_t index) noexcept;

/// mask[i] = (dropout_uniform(seed, first + i) >= ratio) ? 1/(1 - ratio) : 0;
/// y[i] = x[i] * mask[i]. `first`: the index of element 0 in the whole batch (a data-parallel
/// rank's slice, or a TSPLIT micro-batch, draws the mask one process draws at those
/// positions). Throws invalid_argument unless 0 <= ratio < 1.
void dropout_forward(const kernel_context& ctx, const shape4& s, const dropout_params& p,
                     std::uint64_t seed, const float* x, float* y, float* mask,
                     std::int64_t first = 0);

/// dx = dy * mask. accumulate: dx[i] += g[i]. dx may equal dy.
void dropout_backward(const kernel_context& ctx, const shape4& s, const float* mask,
                      const float* dy, float* dx, bool accumulate);

}  // namespace memweave::kernels::host
