// cuDNN convolution: descriptors, algorithm listings (heuristics cached in the context,
// measurements uncached), the workspace-bounded choice, and the four computations.
//
// Invariants: every descriptor is made from checked geometry (the host kernels' checks);
// the convolution descriptor is cross-correlation, FP32 compute, the layer's group count,
// and cuda_kernel_context::cudnn_math (FMA: no TF32); listings keep only algorithms whose
// status is success, whose math is FMA, whose workspace cuDNN can size, and (in a
// deterministic context) whose determinism cuDNN reports, each algorithm once; a
// deterministic context's fallback is deterministic too. A computation checks its workspace against
// the algorithm's need before it enqueues anything. Thread safety: none of its own (the context's
// cache is per context, one thread at a time).
#include "engine/kernels/cuda/conv.hpp"

#include <algorithm>
#include <functional>
#include <string>

#include "engine/kernels/cuda/conv_algo_cache.hpp"
#include "engine/kernels/cuda/cudnn_descriptors.hpp"
#include "engine/kernels/kernel_checks.hpp"

namespace memweave::kernels::cuda {

using detail::k_one;
using detail::k_zero;
using std::int64_t;

namespace {

// The descriptors of one convolution, from checked geometry.
struct conv_descs {
  detail::tensor_descriptor x, y, bias;
  detail::filter_descriptor w;
  detail::convolution_descriptor conv;
  shape4 out;

  conv_descs(const char* kernel, const shape4& in, const conv_params& p) {
    out = checks::conv_output(kernel, in, p, detail::check_shape);
    detail::check_shape(kernel, out);
    x.set(in);
    y.set(out);
    bias.set_channels(p.out_channels);
    MEMWEAVE_CUDNN_CHECK(
        cudnnSetFilter4dDescriptor(w.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                   detail::to_int(kernel, "out_channels", p.out_channels),
                                   detail::to_int(kernel, "channels per group", in.c / p.groups),
                                   detail::to_int(kernel, "kernel_h", p.kernel_h),
                                   detail::to_int(kernel, "kernel_w", p.kernel_w)));
    MEMWEAVE_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        conv.get(), detail::to_int(kernel, "pad_h", p.pad_h),
        detail::to_int(kernel, "pad_w", p.pad_w), detail::to_int(kernel, "stride_h", p.stride_h),
        detail::to_int(kernel, "stride_w", p.stride_w),
        detail::to_int(kernel, "dilation_h", p.dilation_h),
        detail::to_int(kernel, "dilation_w", p.dilation_w), CUDNN_CROSS_CORRELATION,
        CUDNN_DATA_FLOAT));
    MEMWEAVE_CUDNN_CHECK(
        cudnnSetConvolutionGroupCount(conv.get(), detail::to_int(kernel, "groups", p.groups)));
    MEMWEAVE_CUDNN_CHECK(cudnnSetConvolutionMathType(conv.get(), cuda_kernel_context::cudnn_math));
    // The host's output arithmetic (conv_params::output) and cuDNN's must agree, or y's
    // descriptor would describe another tensor than the engine allocated.
    int on = 0, oc = 0, oh = 0, ow = 0;
    MEMWEAVE_CUDNN_CHECK(
        cudnnGetConvolution2dForwardOutputDim(conv.get(), x.get(), w.get(), &on, &oc, &oh, &ow));
    if (shape4{on, oc, oh, ow} != out) {
      throw device_error(std::string(kernel) + ": input " + detail::shape_text(in) +
                         ": cuDNN computes output " + detail::shape_text(shape4{on, oc, oh, ow}) +
                         ", the engine " + detail::shape_text(out) +
                         "; report this convolution's parameters");
    }
  }
};

// The workspace of `algo`, or false when cuDNN does not support it here.
bool query_workspace(cuda_kernel_context& ctx, const conv_descs& d, conv_pass pass, int algo,
                     std::size_t& bytes) {
  cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
  switch (pass) {
    case conv_pass::forward:
      s = cudnnGetConvolutionForwardWorkspaceSize(
          ctx.cudnn(), d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
          static_cast<cudnnConvolutionFwdAlgo_t>(algo), &bytes);
      break;
    case conv_pass::backward_data:
      s = cudnnGetConvolutionBackwardDataWorkspaceSize(
          ctx.cudnn(), d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
          static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), &bytes);
      break;
    case conv_pass::backward_filter:
      s = cudnnGetConvolutionBackwardFilterWorkspaceSize(
          ctx.cudnn(), d.x.get(), d.y.get(), d.conv.get(), d.w.get(),
          static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), &bytes);
      break;
  }
  return s == CUDNN_STATUS_SUCCESS;
}

// Appends the usable entries of a cuDNN perf array (any of the three perf structs).
// `deterministic_only`: drop entries cuDNN does not report deterministic for this shape.
template <class Perf>
void collect(const Perf* perf, int returned, bool measured, std::size_t workspace_limit,
             bool deterministic_only, std::vector<conv_algo_perf>& out,
             const std::function<bool(int, std::size_t&)>& workspace_of) {
  for (int i = 0; i < returned; ++i) {
    const Perf& r = perf[i];
    // Only entries run with the descriptors' FMA math: DEFAULT_MATH may use TF32 on Ampere
    // and later, which rounds differently from the host kernels.
    if (r.status != CUDNN_STATUS_SUCCESS || r.mathType != cuda_kernel_context::cudnn_math) continue;
    if (deterministic_only && r.determinism != CUDNN_DETERMINISTIC) continue;
    const int algo = static_cast<int>(r.algo);
    if (std::any_of(out.begin(), out.end(),
                    [&](const conv_algo_perf& e) { return e.algo == algo; }))
      continue;
    conv_algo_perf e;
    e.algo = algo;
    e.deterministic = r.determinism == CUDNN_DETERMINISTIC;
    if (measured) {
      e.time_ms = r.time;
      e.workspace_bytes = r.memory;
      if (e.workspace_bytes > workspace_limit) continue;
    } else if (!workspace_of(algo, e.workspace_bytes)) {
      continue;
    }
    out.push_back(e);
  }
}

std::vector<conv_algo_perf> heuristics(cuda_kernel_context& ctx, const conv_descs& d,
                                       conv_pass pass) {
  std::vector<conv_algo_perf> out;
  const auto workspace_of = [&](int algo, std::size_t& bytes) {
    return query_workspace(ctx, d, pass, algo, bytes);
  };
  int count = 0, returned = 0;
  switch (pass) {
    case conv_pass::forward: {
      MEMWEAVE_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(ctx.cudnn(), &count));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<std::size_t>(count));
      MEMWEAVE_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(ctx.cudnn(), d.x.get(), d.w.get(),
                                                                  d.conv.get(), d.y.get(), count,
                                                                  &returned, perf.data()));
      collect(perf.data(), returned, false, 0, ctx.deterministic(), out, workspace_of);
      break;
    }
    case conv_pass::backward_data: {
      MEMWEAVE_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(ctx.cudnn(), &count));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<std::size_t>(count));
      MEMWEAVE_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
          ctx.cudnn(), d.w.get(), d.y.get(), d.conv.get(), d.x.get(), count, &returned,
          perf.data()));
      collect(perf.data(), returned, false, 0, ctx.deterministic(), out, workspace_of);
      break;
    }
    case conv_pass::backward_filter: {
      MEMWEAVE_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(ctx.cudnn(), &count));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<std::size_t>(count));
      MEMWEAVE_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
          ctx.cudnn(), d.x.get(), d.y.get(), d.conv.get(), d.w.get(), count, &returned,
          perf.data()));
      collect(perf.data(), returned, false, 0, ctx.deterministic(), out, workspace_of);
      break;
    }
  }
  return out;
}

// The workspace `algo` needs: from the context's cached listing when it holds the
// algorithm, else asked of cuDNN (invalid_argument when unsupported here).
std::size_t needed_workspace(cuda_kernel_context& ctx, const conv_descs& d, conv_pass pass,
                             int algo, const shape4& in, const conv_params& p, const char* kernel) {
  if (const auto* list = ctx.conv_cache().find(detail::conv_algo_cache::make_key(pass, in, p))) {
    for (const conv_algo_perf& e : *list) {
      if (e.algo == algo) return e.workspace_bytes;
    }
  }
  std::size_t bytes = 0;
  MEMWEAVE_EXPECTS(query_workspace(ctx, d, pass, algo, bytes),
                   std::string(kernel) + ": cuDNN does not support algorithm " +
                       conv_algo_name(pass, algo) + " for input " + detail::shape_text(in) +
                       "; choose one listed by conv_algorithms");
  return bytes;
}

void check_workspace(const char* kernel, conv_pass pass, int algo, std::size_t need,
                     const void* workspace, std::size_t workspace_bytes) {
  if (need == 0) return;
  MEMWEAVE_EXPECTS(workspace != nullptr && workspace_bytes >= need,
                   std::string(kernel) + " (" + conv_algo_name(pass, algo) + "): workspace of " +
                       std::to_string(workspace_bytes) + " bytes at " +
                       (workspace != nullptr ? "a buffer" : "null") + "; expected at least " +
                       std::to_string(need) + " bytes (conv_workspace_bytes)");
}

}  // namespace

const char* to_string(conv_pass pass) noexcept {
  switch (pass) {
    case conv_pass::forward:
      return "forward";
    case conv_pass::backward_data:
      return "backward_data";
    case conv_pass::backward_filter:
      return "backward_filter";
  }
  return "?";
}

const char* conv_algo_name(conv_pass pass, int algo) noexcept {
  static const char* const fwd[] = {
      "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
      "WINOGRAD",      "WINOGRAD_NONFUSED"};
  static const char* const bwd_data[] = {"ALGO_0",     "ALGO_1",   "FFT",
                                         "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static const char* const bwd_filter[] = {
      "ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
  switch (pass) {
    case conv_pass::forward:
      return algo >= 0 && algo < 8 ? fwd[algo] : "?";
    case conv_pass::backward_data:
      return algo >= 0 && algo < 6 ? bwd_data[algo] : "?";
    case conv_pass::backward_filter:
      return algo >= 0 && algo < 7 ? bwd_filter[algo] : "?";
  }
  return "?";
}

int conv_fallback_algorithm(conv_pass pass, bool deterministic) noexcept {
  switch (pass) {
    case conv_pass::forward:
      return CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    case conv_pass::backward_data:
      return deterministic ? CUDNN_CONVOLUTION_BWD_DATA_ALGO_1 : CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
    case conv_pass::backward_filter:
      return deterministic ? CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1
                           : CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0;
  }
  return 0;
}

bool conv_algo_documented_deterministic(conv_pass pass, int algo) noexcept {
  switch (pass) {
    case conv_pass::forward:
      return true;
    case conv_pass::backward_data:
      return algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
    case conv_pass::backward_filter:
      return algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 &&
             algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
  }
  return false;
}

const std::vector<conv_algo_perf>& conv_algorithms(cuda_kernel_context& ctx, conv_pass pass,
                                                   const shape4& in, const conv_params& p) {
  const auto key = detail::conv_algo_cache::make_key(pass, in, p);
  if (const auto* cached = ctx.conv_cache().find(key)) return *cached;
  const conv_descs d("conv_algorithms", in, p);
  return ctx.conv_cache().store(key, heuristics(ctx, d, pass));
}

std::size_t conv_workspace_bytes(cuda_kernel_context& ctx, conv_pass pass, int algo,
                                 const shape4& in, const conv_params& p) {
  const char* kernel = "conv_workspace_bytes";
  const conv_descs d(kernel, in, p);
  std::size_t bytes = 0;
  if (!query_workspace(ctx, d, pass, algo, bytes)) {
    throw device_error(std::string(kernel) + ": cuDNN does not support " + to_string(pass) +
                       " algorithm " + conv_algo_name(pass, algo) + " for input " +
                       detail::shape_text(in) + "; choose one listed by conv_algorithms");
  }
  return bytes;
}

std::vector<conv_algo_perf> measure_conv_algorithms(cuda_kernel_context& ctx, conv_pass pass,
                                                    const shape4& in, const conv_params& p,
                                                    const conv_measure_buffers& b) {
  const char* kernel = "measure_conv_algorithms";
  const conv_descs d(kernel, in, p);
  detail::check_pointer(kernel, "x", b.x);
  detail::check_pointer(kernel, "w", b.w);
  detail::check_pointer(kernel, "y", b.y);
  const std::size_t ws_bytes = b.workspace == nullptr ? 0 : b.workspace_bytes;
  std::vector<conv_algo_perf> out;
  const auto unused = [](int, std::size_t&) { return true; };
  int count = 0, returned = 0;
  switch (pass) {
    case conv_pass::forward: {
      MEMWEAVE_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(ctx.cudnn(), &count));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<std::size_t>(count));
      MEMWEAVE_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
          ctx.cudnn(), d.x.get(), b.x, d.w.get(), b.w, d.conv.get(), d.y.get(), b.y, count,
          &returned, perf.data(), b.workspace, ws_bytes));
      collect(perf.data(), returned, true, ws_bytes, ctx.deterministic(), out, unused);
      break;
    }
    case conv_pass::backward_data: {
      MEMWEAVE_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(ctx.cudnn(), &count));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<std::size_t>(count));
      MEMWEAVE_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
          ctx.cudnn(), d.w.get(), b.w, d.y.get(), b.y, d.conv.get(), d.x.get(), b.x, count,
          &returned, perf.data(), b.workspace, ws_bytes));
      collect(perf.data(), returned, true, ws_bytes, ctx.deterministic(), out, unused);
      break;
    }
    case conv_pass::backward_filter: {
      MEMWEAVE_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(ctx.cudnn(), &count));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<std::size_t>(count));
      MEMWEAVE_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
          ctx.cudnn(), d.x.get(), b.x, d.y.get(), b.y, d.conv.get(), d.w.get(), b.w, count,
          &returned, perf.data(), b.workspace, ws_bytes));
      collect(perf.data(), returned, true, ws_bytes, ctx.deterministic(), out, unused);
      break;
    }
  }
  // cuDNN returns them fastest first; keep that order stable for equal times.
  std::stable_sort(out.begin(), out.end(), [](const conv_algo_perf& a, const conv_algo_perf& b) {
    return a.time_ms < b.time_ms;
  });
  return out;
}

int choose_conv_algorithm(cuda_kernel_context& ctx, conv_pass pass, const shape4& in,
                          const conv_params& p, std::size_t workspace_bytes) {
  const std::vector<conv_algo_perf>& list = conv_algorithms(ctx, pass, in, p);
  for (const conv_algo_perf& e : list) {
    if (e.workspace_bytes <= workspace_bytes) return e.algo;
  }
  // The heuristics offered nothing that fits: the fixed fallback (no workspace, or a
  // deterministic one in a deterministic context), when cuDNN supports it for this shape.
  const char* kernel = "choose_conv_algorithm";
  const conv_descs d(kernel, in, p);
  const int fallback = conv_fallback_algorithm(pass, ctx.deterministic());
  std::size_t need = 0;
  const bool fallback_ok = query_workspace(ctx, d, pass, fallback, need);
  if (fallback_ok && need <= workspace_bytes) return fallback;
  if (!fallback_ok && list.empty()) {
    throw device_error(std::string(kernel) + ": cuDNN supports no " +
                       (ctx.deterministic() ? "deterministic " : "") + to_string(pass) +
                       " algorithm in FP32 FMA math for input " + detail::shape_text(in) +
                       " and this convolution; change the layer's parameters" +
                       (ctx.deterministic() ? " or unset MEMWEAVE_CUDNN_DETERMINISTIC" : ""));
  }
  std::size_t smallest = fallback_ok ? need : list.front().workspace_bytes;
  for (const conv_algo_perf& e : list) smallest = std::min(smallest, e.workspace_bytes);
  throw device_error(std::string(kernel) + ": no cuDNN " + to_string(pass) +
                     " algorithm for input " + detail::shape_text(in) + " fits in " +
                     std::to_string(workspace_bytes) + " bytes of workspace (" +
                     std::to_string(list.size()) + " listed); give the step at least " +
                     std::to_string(smallest) + " bytes");
}

conv_algos choose_conv_algorithms(cuda_kernel_context& ctx, const shape4& in, const conv_params& p,
                                  std::size_t forward_workspace_bytes,
                                  std::size_t backward_workspace_bytes) {
  conv_algos a;
  a.forward = static_cast<cudnnConvolutionFwdAlgo_t>(
      choose_conv_algorithm(ctx, conv_pass::forward, in, p, forward_workspace_bytes));
  a.backward_data = static_cast<cudnnConvolutionBwdDataAlgo_t>(
      choose_conv_algorithm(ctx, conv_pass::backward_data, in, p, backward_workspace_bytes));
  a.backward_filter = static_cast<cudnnConvolutionBwdFilterAlgo_t>(
      choose_conv_algorithm(ctx, conv_pass::backward_filter, in, p, backward_workspace_bytes));
  return a;
}

void conv_forward(cuda_kernel_context& ctx, cudnnConvolutionFwdAlgo_t algo, void* workspace,
                  std::size_t workspace_bytes, const shape4& in, const conv_params& p,
                  const float* x, const float* w, const float* b, float* y) {
  const char* kernel = "conv_forward";
  const conv_descs d(kernel, in, p);
  detail::check_pointer(kernel, "x", x);
  detail::check_pointer(kernel, "w", w);
  detail::check_pointer(kernel, "y", y);
  if (p.bias) detail::check_pointer(kernel, "b", b);
  const int a = static_cast<int>(algo);
  check_workspace(kernel, conv_pass::forward, a,
                  needed_workspace(ctx, d, conv_pass::forward, a, in, p, kernel), workspace,
                  workspace_bytes);
  MEMWEAVE_CUDNN_CHECK(cudnnConvolutionForward(ctx.cudnn(), &k_one, d.x.get(), x, d.w.get(), w,
                                               d.conv.get(), algo, workspace, workspace_bytes,
                                               &k_zero, d.y.get(), y));
  if (p.bias) {
    MEMWEAVE_CUDNN_CHECK(
        cudnnAddTensor(ctx.cudnn(), &k_one, d.bias.get(), b, &k_one, d.y.get(), y));
  }
}

void conv_backward_data(cuda_kernel_context& ctx, cudnnConvolutionBwdDataAlgo_t algo,
                        void* workspace, std::size_t workspace_bytes, const shape4& in,
                        const conv_params& p, const float* w, const float* dy, float* dx,
                        bool accumulate) {
  const char* kernel = "conv_backward_data";
  const conv_descs d(kernel, in, p);
  detail::check_pointer(kernel, "w", w);
  detail::check_pointer(kernel, "dy", dy);
  detail::check_pointer(kernel, "dx", dx);
  const int a = static_cast<int>(algo);
  check_workspace(kernel, conv_pass::backward_data, a,
                  needed_workspace(ctx, d, conv_pass::backward_data, a, in, p, kernel), workspace,
                  workspace_bytes);
  MEMWEAVE_CUDNN_CHECK(cudnnConvolutionBackwardData(
      ctx.cudnn(), &k_one, d.w.get(), w, d.y.get(), dy, d.conv.get(), algo, workspace,
      workspace_bytes, detail::beta_for(accumulate), d.x.get(), dx));
}

void conv_backward_filter(cuda_kernel_context& ctx, cudnnConvolutionBwdFilterAlgo_t algo,
                          void* workspace, std::size_t workspace_bytes, const shape4& in,
                          const conv_params& p, const float* x, const float* dy, float* dw,
                          float* db, bool accumulate) {
  const char* kernel = "conv_backward_filter";
  const conv_descs d(kernel, in, p);
  detail::check_pointer(kernel, "x", x);
  detail::check_pointer(kernel, "dy", dy);
  detail::check_pointer(kernel, "dw", dw);
  const int a = static_cast<int>(algo);
  check_workspace(kernel, conv_pass::backward_filter, a,
                  needed_workspace(ctx, d, conv_pass::backward_filter, a, in, p, kernel), workspace,
                  workspace_bytes);
  MEMWEAVE_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
      ctx.cudnn(), &k_one, d.x.get(), x, d.y.get(), dy, d.conv.get(), algo, workspace,
      workspace_bytes, detail::beta_for(accumulate), d.w.get(), dw));
  if (db != nullptr) {
    MEMWEAVE_CUDNN_CHECK(cudnnConvolutionBackwardBias(
        ctx.cudnn(), &k_one, d.y.get(), dy, detail::beta_for(accumulate), d.bias.get(), db));
  }
}

void conv_backward_bias(cuda_kernel_context& ctx, const shape4& in, const conv_params& p,
                        const float* dy, float* db, bool accumulate) {
  const char* kernel = "conv_backward_bias";
  const conv_descs d(kernel, in, p);
  detail::check_pointer(kernel, "dy", dy);
  detail::check_pointer(kernel, "db", db);
  MEMWEAVE_CUDNN_CHECK(cudnnConvolutionBackwardBias(
      ctx.cudnn(), &k_one, d.y.get(), dy, detail::beta_for(accumulate), d.bias.get(), db));
}

}  // namespace memweave::kernels::cuda
