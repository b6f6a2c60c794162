// Max and average pooling on the host (cuDNN's semantics).
//
// Windows start inside the padded input (floor division); max ignores the padding;
// average divides by kernel_h * kernel_w, padding included (cuDNN's
// CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING); global = average (or max) over the whole
// H x W; adaptive (pool_params::adaptive) averages each output's own window
// [adaptive_begin, adaptive_end) per axis and divides by that window's size. Backward of max
// recomputes the argmax, the first element of the window in scan order equal to y, so no index
// tensor is kept. Deterministic: each gradient element sums its contributions in output scan order.
#pragma once

#include "engine/kernels/host/kernel_context.hpp"
#include "engine/kernels/host/map_window.hpp"
#include "memweave/engine/layer_params.hpp"

namespace memweave::kernels::host {

/// y = pool(x). Throws invalid_argument for a padding not smaller than the kernel, or a
/// kernel larger than the padded input.
void pool_forward(const kernel_context& ctx, const shape4& in, const pool_params& p, const float* x,
                  float* y);

/// dx from x, y, dy. accumulate: dx[i] += g[i] (g = what accumulate = false writes).
void pool_backward(const kernel_context& ctx, const shape4& in, const pool_params& p,
                   const float* x, const float* y, const float* dy, float* dx, bool accumulate);

/// On part of the maps (map_window.hpp; tiled segments; not global): `in` is the input
/// buffer's shape, the output buffer (n, c, win.out_h, win.out_w). Each output element has
/// the bits of the whole-map call: its window holds the same elements, scanned in the same
/// order (max ignores, average counts, the positions outside the map as on the whole map).
void pool_forward_window(const kernel_context& ctx, const shape4& in, const pool_params& p,
                         const map_window& win, const float* x, float* y);

/// The contributions of this window's dy to dx (accumulate as pool_backward).
void pool_backward_window(const kernel_context& ctx, const shape4& in, const pool_params& p,
                          const map_window& win, const float* x, const float* y, const float* dy,
                          float* dx, bool accumulate);

}  // namespace memweave::kernels::host
