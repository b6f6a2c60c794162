// Convolution on the host: forward, backward data, backward filter (+ bias), each with
// three algorithms that trade workspace for speed. The caller owns the workspace.
//
// Layouts: x (n, c, h, w); w (out_channels, c/groups, kernel_h, kernel_w); b
// (out_channels); y (n, out_channels, oh, ow) with (oh, ow) from conv_params::output.
// Deterministic for a given (algo, chunk): bit-identical for any thread count and any
// addresses. Different algorithms (or chunks) round differently; they agree to ~1e-5.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/kernels/host/kernel_context.hpp"
#include "engine/kernels/host/map_window.hpp"
#include "memweave/engine/layer_params.hpp"

namespace memweave::kernels::host {

/// The convolution algorithms, slowest and smallest first.
enum class conv_algo {
  direct,        ///< loops over the tensors; no workspace
  im2col_image,  ///< per image and group: im2col into (c/groups*kh*kw) x (oh*ow) + GEMM
  im2col_batch,  ///< per chunk of images and group: one im2col and one larger GEMM
};

/// "direct", "im2col_image", "im2col_batch".
const char* to_string(conv_algo a) noexcept;

/// Which of the three computations a workspace is asked for.
enum class conv_pass { forward, backward_data, backward_filter };

/// How one convolution call runs.
struct conv_config {
  conv_algo algo = conv_algo::direct;
  /// im2col_batch: images per GEMM; 0 (or more than the batch) = the whole batch.
  std::int64_t chunk = 0;
  /// Scratch of at least conv_workspace_bytes(algo, pass, ...) bytes, aligned for float;
  /// may be null when that is 0. Its contents on entry do not matter.
  void* workspace = nullptr;
  /// The size of `workspace` in bytes.
  std::size_t workspace_bytes = 0;
};

/// The workspace, in bytes, that `algo` needs for `pass` on input `in`:
///   direct: 0;
///   im2col_image: 4 * (c/groups*kh*kw) * (oh*ow); 0 for forward and backward_filter of a
///     1x1, stride-1, unpadded convolution (the input is its own im2col matrix);
///   im2col_batch: 4 * (c/groups*kh*kw + out_channels/groups) * chunk * (oh*ow).
/// Throws invalid_argument for a shape the kernels reject.
std::size_t conv_workspace_bytes(conv_algo algo, conv_pass pass, const shape4& in,
                                 const conv_params& p, std::int64_t chunk = 0);

/// The largest chunk (<= in.n) whose im2col_batch workspace fits in `bytes`; 0 when not
/// even one image fits.
std::int64_t conv_batch_chunk_for(const shape4& in, const conv_params& p, std::size_t bytes);

/// y = conv(x, w) + b. `b` is read only when p.bias (and must then be non-null).
/// Throws invalid_argument for a bad shape, a null tensor or a too small workspace.
void conv_forward(const kernel_context& ctx, const conv_config& cfg, const shape4& in,
                  const conv_params& p, const float* x, const float* w, const float* b, float* y);

/// dx = d(loss)/dx from dy and w. accumulate: dx += that gradient (each element gets
/// dx[i] + g[i], g[i] being what accumulate = false writes); otherwise dx = it.
void conv_backward_data(const kernel_context& ctx, const conv_config& cfg, const shape4& in,
                        const conv_params& p, const float* w, const float* dy, float* dx,
                        bool accumulate);

/// dx += the gradient through the p.out_channels output channels of w and dy (a channel
/// group of a split step, groups 1). direct: each element continues the (k, r, s) sum that
/// a call over the channels before these left in dx, so conv_backward_data over [0, a)
/// then this over [a, b) gives the bits of conv_backward_data over [0, b). im2col_image and
/// im2col_batch: dx + this group's gradient, which rounds differently (their GEMMs sum the
/// channels inside BLAS, in an order that depends on the matrix sizes).
void conv_backward_data_extend(const kernel_context& ctx, const conv_config& cfg, const shape4& in,
                               const conv_params& p, const float* w, const float* dy, float* dx);

/// dw = d(loss)/dw from x and dy; when `db` is non-null also the bias gradient db (the
/// same bits for every algorithm). Every algorithm adds each image's contribution to dw in
/// image order (float), the first image overwriting unless `accumulate`: so running the
/// batch in micro-batches, each after the first with accumulate, gives the same bits.
void conv_backward_filter(const kernel_context& ctx, const conv_config& cfg, const shape4& in,
                          const conv_params& p, const float* x, const float* dy, float* dw,
                          float* db, bool accumulate = false);

/// db[k] += per image, in image order, the image's sum over positions of dy[n, k, ., .]
/// (double, then added in float); the first image overwrites unless `accumulate`. `in` is
/// the convolution's input shape.
void conv_backward_bias(const kernel_context& ctx, const shape4& in, const conv_params& p,
                        const float* dy, float* db, bool accumulate = false);

// On part of the maps (map_window.hpp; tiled segments): `in` is the input buffer's shape
// (n, c, its rows, its columns); the output buffer is (n, out_channels, win.out_h,
// win.out_w). With direct, each output element of conv_forward_window has the bits of the
// whole-map call (the same products in the same order); the im2col algorithms agree to
// rounding (their GEMM tiling depends on the extents). The backward calls give this
// window's dy's contributions to dx and dw (accumulate as above).

void conv_forward_window(const kernel_context& ctx, const conv_config& cfg, const shape4& in,
                         const conv_params& p, const map_window& win, const float* x,
                         const float* w, const float* b, float* y);
void conv_backward_data_window(const kernel_context& ctx, const conv_config& cfg, const shape4& in,
                               const conv_params& p, const map_window& win, const float* w,
                               const float* dy, float* dx, bool accumulate);
void conv_backward_filter_window(const kernel_context& ctx, const conv_config& cfg,
                                 const shape4& in, const conv_params& p, const map_window& win,
                                 const float* x, const float* dy, float* dw, float* db,
                                 bool accumulate);

}  // namespace memweave::kernels::host
