// Fully connected layer on the host: y = x * W^T + b, each image flattened.
//
// Layouts: x (n, in) with in = in_shape.per_image(); W (out_features, in); b
// (out_features); y (n, out_features) (an (n, out, 1, 1) tensor). Fixed-order loops rather than
// BLAS (fc.cpp): bit-identical for any thread count, addresses, and split of the batch or of the
// output features.
#pragma once

#include "engine/kernels/host/kernel_context.hpp"
#include "memweave/engine/layer_params.hpp"

namespace memweave::kernels::host {

/// y = x * W^T (+ b when p.bias; b must then be non-null).
void fc_forward(const kernel_context& ctx, const shape4& in, const fc_params& p, const float* x,
                const float* w, const float* b, float* y);

/// dx = dy * W. accumulate: dx[i] += g[i] (g = what accumulate = false writes).
void fc_backward_data(const kernel_context& ctx, const shape4& in, const fc_params& p,
                      const float* w, const float* dy, float* dx, bool accumulate);

/// dx += dy * W for the output features p.out_features of W and dy (a channel group of a
/// split step): each element continues, feature by feature, the sum a call over the
/// features before these left in dx, so fc_backward_data over features [0, a) then this
/// over [a, b) gives the bits of fc_backward_data over [0, b).
void fc_backward_data_extend(const kernel_context& ctx, const shape4& in, const fc_params& p,
                             const float* w, const float* dy, float* dx);

/// dW = dy^T * x and db = column sums of dy (when `db` is non-null), each added one image at
/// a time in image order (float); overwritten unless `accumulate`, which adds to them (a
/// micro-batch after the first: the same bits as the whole batch).
void fc_backward_weights(const kernel_context& ctx, const shape4& in, const fc_params& p,
                         const float* x, const float* dy, float* dw, float* db,
                         bool accumulate = false);

}  // namespace memweave::kernels::host
