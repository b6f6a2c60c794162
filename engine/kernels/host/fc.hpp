// Fully connected layer on the host: y = x * W^T + b, each image flattened.
//
// Layouts: x (n, in) with in = in_shape.per_image(); W (out_features, in); b
// (out_features); y (n, out_features) (an (n, out, 1, 1) tensor). GEMMs through CBLAS,
// tiled by shape only: bit-identical for any thread count and addresses.
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

/// dW = dy^T * x and db = column sums of dy (when `db` is non-null), each added one image at
/// a time in image order (float); overwritten unless `accumulate`, which adds to them (a
/// micro-batch after the first: the same bits as the whole batch).
void fc_backward_weights(const kernel_context& ctx, const shape4& in, const fc_params& p,
                         const float* x, const float* dy, float* dw, float* db,
                         bool accumulate = false);

}  // namespace memweave::kernels::host
