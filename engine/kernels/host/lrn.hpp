// Cross-channel local response normalization on the host (AlexNet, Caffe's ACROSS_CHANNELS):
//   scale[n,c,h,w] = k + alpha/size * sum_{c' = c - (size-1)/2 .. c + size/2, in range}
//   x[n,c',h,w]^2 y = x * scale^-beta.
// Backward reads x (to recompute scale), y and dy:
//   dx[c] = dy[c] * scale[c]^-beta
//           - 2*alpha*beta/size * x[c] * sum_{c' whose window holds c} dy[c'] * y[c'] / scale[c'].
// Window sums run over c' ascending, in float: bit-reproducible.
#pragma once

#include "engine/kernels/host/kernel_context.hpp"
#include "memweave/engine/layer_params.hpp"

namespace memweave::kernels::host {

/// y = lrn(x). Throws invalid_argument for size < 1 or beta/k out of range.
void lrn_forward(const kernel_context& ctx, const shape4& in, const lrn_params& p, const float* x,
                 float* y);

/// dx from x, y, dy. accumulate: dx[i] += g[i] (g = what accumulate = false writes).
void lrn_backward(const kernel_context& ctx, const shape4& in, const lrn_params& p, const float* x,
                  const float* y, const float* dy, float* dx, bool accumulate);

}  // namespace memweave::kernels::host
