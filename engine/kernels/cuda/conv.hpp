// Convolution on the GPU through cuDNN: forward, backward data, backward filter, bias
// gradient, with the algorithm chosen by the caller from cuDNN's enums and a caller-owned
// workspace; plus the algorithm listings (heuristics and measurements) that a caller uses
// to choose.
//
// Layouts as the host kernels (engine/kernels/host/conv.hpp): x (n, c, h, w); w
// (out_channels, c/groups, kernel_h, kernel_w); b (out_channels); y (n, out_channels, oh, ow).
// Cross-correlation (no kernel flip), groups, dilation, stride and zero padding; FP32 in
// cuda_kernel_context::cudnn_math (no TF32). Results agree with the host kernels to float
// rounding (~1e-5 relative); some cuDNN algorithms (backward data ALGO_0, backward filter
// ALGO_0 and ALGO_3: they sum with atomic adds) are not deterministic, see
// conv_algo_perf::deterministic; a context made with cuda_kernel_options::deterministic lists
// and chooses none of them.
#pragma once

#include <cstddef>
#include <vector>

#include <cudnn.h>

#include "engine/kernels/cuda/cuda_kernel_context.hpp"
#include "memweave/engine/layer_params.hpp"

namespace memweave::kernels::cuda {

/// Which of the three computations an algorithm or workspace is for.
enum class conv_pass { forward, backward_data, backward_filter };

/// "forward", "backward_data", "backward_filter".
const char* to_string(conv_pass pass) noexcept;

/// One cuDNN algorithm for one pass, as listed or measured.
struct conv_algo_perf {
  int algo = 0;  ///< the cudnnConvolutionFwdAlgo_t / BwdDataAlgo_t / BwdFilterAlgo_t value
  std::size_t workspace_bytes = 0;  ///< what it needs (cudnnGetConvolution*WorkspaceSize)
  float time_ms = -1.0f;            ///< measured time; -1 when from the heuristics
  bool deterministic = false;       ///< same bits on every run
};

/// The algorithms of the three passes of one convolution.
struct conv_algos {
  cudnnConvolutionFwdAlgo_t forward = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdDataAlgo_t backward_data = CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
  cudnnConvolutionBwdFilterAlgo_t backward_filter = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0;
};

/// cuDNN's name of algorithm `algo` of `pass` ("IMPLICIT_GEMM", "WINOGRAD_NONFUSED", "1", ...).
const char* conv_algo_name(conv_pass pass, int algo) noexcept;

/// The algorithm chosen for `pass` when no listed one fits the workspace: forward
/// IMPLICIT_GEMM; backward data and filter ALGO_0, or with `deterministic` their ALGO_1
/// (ALGO_0 sums with atomic adds, ALGO_1 is cuDNN's deterministic matrix-product variant).
int conv_fallback_algorithm(conv_pass pass, bool deterministic) noexcept;

/// Whether cuDNN documents `algo` of `pass` as deterministic for every shape: every forward
/// algorithm; backward data all but ALGO_0; backward filter all but ALGO_0 and ALGO_3.
/// Listings go by what cuDNN reports per shape (conv_algo_perf::deterministic); this is
/// the documented table, for the fixed fallbacks and for checks.
bool conv_algo_documented_deterministic(conv_pass pass, int algo) noexcept;

/// The algorithms cuDNN's heuristics (cudnnGetConvolution*Algorithm_v7) offer for `pass`, in
/// their order of expected speed (fastest first), keeping only those cuDNN supports for
/// this shape in FP32 FMA math, each with its workspace size, and when ctx.deterministic()
/// only those cuDNN reports CUDNN_DETERMINISTIC. Cached in `ctx` per (pass, shape,
/// parameters). Throws invalid_argument for a bad shape or parameters.
const std::vector<conv_algo_perf>& conv_algorithms(cuda_kernel_context& ctx, conv_pass pass,
                                                   const shape4& in, const conv_params& p);

/// The workspace `algo` needs for `pass`. Throws device_error when cuDNN does not support
/// it for this shape.
std::size_t conv_workspace_bytes(cuda_kernel_context& ctx, conv_pass pass, int algo,
                                 const shape4& in, const conv_params& p);

/// Device buffers for measure_conv_algorithms, of the convolution's shapes. Their contents
/// on entry do not matter and are overwritten: forward writes y; backward_data writes x
/// (as dx); backward_filter writes w (as dw). y is the output (or output gradient) shape.
struct conv_measure_buffers {
  float* x = nullptr;
  float* w = nullptr;
  float* y = nullptr;
  void* workspace = nullptr;  ///< may be null when workspace_bytes is 0
  std::size_t workspace_bytes = 0;
};

/// Runs every algorithm of `pass` that fits the given workspace (cudnnFind*AlgorithmEx,
/// which synchronizes the stream) and returns those that succeeded, fastest first, with
/// their measured times (only deterministic ones when ctx.deterministic()). Throws invalid_argument
/// for a bad shape or a null buffer.
std::vector<conv_algo_perf> measure_conv_algorithms(cuda_kernel_context& ctx, conv_pass pass,
                                                    const shape4& in, const conv_params& p,
                                                    const conv_measure_buffers& buffers);

/// The fastest heuristic algorithm of `pass` (conv_algorithms order) whose workspace fits in
/// `workspace_bytes`; when none fits, conv_fallback_algorithm(pass, ctx.deterministic()) if
/// cuDNN supports it here within the bytes. Throws device_error naming the smallest
/// workspace that would do when nothing fits.
int choose_conv_algorithm(cuda_kernel_context& ctx, conv_pass pass, const shape4& in,
                          const conv_params& p, std::size_t workspace_bytes);

/// choose_conv_algorithm for the three passes (the backward ones sharing one workspace).
conv_algos choose_conv_algorithms(cuda_kernel_context& ctx, const shape4& in, const conv_params& p,
                                  std::size_t forward_workspace_bytes,
                                  std::size_t backward_workspace_bytes);

/// y = conv(x, w) + b, with `algo` and a workspace of `workspace_bytes` bytes (at least
/// conv_workspace_bytes(forward, algo); may be null when that is 0). `b` is read only when
/// p.bias. Throws invalid_argument for a bad shape, a null tensor or a too small workspace.
void conv_forward(cuda_kernel_context& ctx, cudnnConvolutionFwdAlgo_t algo, void* workspace,
                  std::size_t workspace_bytes, const shape4& in, const conv_params& p,
                  const float* x, const float* w, const float* b, float* y);

/// dx = d(loss)/dx from dy and w (accumulate: dx += it, through cuDNN's beta = 1).
void conv_backward_data(cuda_kernel_context& ctx, cudnnConvolutionBwdDataAlgo_t algo,
                        void* workspace, std::size_t workspace_bytes, const shape4& in,
                        const conv_params& p, const float* w, const float* dy, float* dx,
                        bool accumulate);

/// dw = d(loss)/dw from x and dy (overwritten; accumulate: dw += it, cuDNN's beta = 1, as
/// a split step's micro-batches after the first); when `db` is non-null also the bias
/// gradient (conv_backward_bias, likewise).
void conv_backward_filter(cuda_kernel_context& ctx, cudnnConvolutionBwdFilterAlgo_t algo,
                          void* workspace, std::size_t workspace_bytes, const shape4& in,
                          const conv_params& p, const float* x, const float* dy, float* dw,
                          float* db, bool accumulate = false);

/// db[k] = sum over images and positions of dy[., k, ., .] (overwritten;
/// cudnnConvolutionBackwardBias; accumulate: db += it). `in` is the convolution's input shape.
void conv_backward_bias(cuda_kernel_context& ctx, const shape4& in, const conv_params& p,
                        const float* dy, float* db, bool accumulate = false);

}  // namespace memweave::kernels::cuda
