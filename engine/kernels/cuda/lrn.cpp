// cuDNN cross-channel LRN. Invariants: the parameters are checked against cuDNN's bounds
// (CUDNN_LRN_MIN_N .. CUDNN_LRN_MAX_N, CUDNN_LRN_MIN_K, CUDNN_LRN_MIN_BETA) before a
// descriptor is made, so a bad layer is an invalid_argument naming them, not a cuDNN
// status. Thread safety: none of its own.
#include "engine/kernels/cuda/lrn.hpp"

#include <string>

#include "engine/kernels/cuda/cudnn_descriptors.hpp"
#include "engine/layers/cuda_limits.hpp"

namespace memweave::kernels::cuda {

// The executor refuses a network out of these bounds before it runs (check_cuda_runs).
static_assert(layers::k_cudnn_lrn_min_size == CUDNN_LRN_MIN_N &&
              layers::k_cudnn_lrn_max_size == CUDNN_LRN_MAX_N);
static_assert(layers::k_cudnn_lrn_min_k == CUDNN_LRN_MIN_K &&
              layers::k_cudnn_lrn_min_beta == CUDNN_LRN_MIN_BETA);

using detail::k_one;
using detail::k_zero;

namespace {

void set_params(const char* kernel, const shape4& in, const lrn_params& p,
                const detail::lrn_descriptor& d) {
  detail::check_shape(kernel, in);
  MEMWEAVE_EXPECTS(p.size >= CUDNN_LRN_MIN_N && p.size <= CUDNN_LRN_MAX_N &&
                       p.k >= CUDNN_LRN_MIN_K && p.beta >= CUDNN_LRN_MIN_BETA && p.alpha >= 0.0f,
                   std::string(kernel) + ": size=" + std::to_string(p.size) +
                       " alpha=" + std::to_string(p.alpha) + " beta=" + std::to_string(p.beta) +
                       " k=" + std::to_string(p.k) +
                       "; cuDNN expects 1 <= size <= 16, k >= 1e-5, beta >= 0.01, alpha >= 0");
  MEMWEAVE_CUDNN_CHECK(
      cudnnSetLRNDescriptor(d.get(), static_cast<unsigned>(p.size), static_cast<double>(p.alpha),
                            static_cast<double>(p.beta), static_cast<double>(p.k)));
}

}  // namespace

void lrn_forward(cuda_kernel_context& ctx, const shape4& in, const lrn_params& p, const float* x,
                 float* y) {
  const char* kernel = "lrn_forward";
  const detail::lrn_descriptor d;
  set_params(kernel, in, p, d);
  detail::check_pointer(kernel, "x", x);
  detail::check_pointer(kernel, "y", y);
  const detail::tensor_descriptor t(in);
  MEMWEAVE_CUDNN_CHECK(cudnnLRNCrossChannelForward(
      ctx.cudnn(), d.get(), CUDNN_LRN_CROSS_CHANNEL_DIM1, &k_one, t.get(), x, &k_zero, t.get(), y));
}

void lrn_backward(cuda_kernel_context& ctx, const shape4& in, const lrn_params& p, const float* x,
                  const float* y, const float* dy, float* dx, bool accumulate) {
  const char* kernel = "lrn_backward";
  const detail::lrn_descriptor d;
  set_params(kernel, in, p, d);
  detail::check_pointer(kernel, "x", x);
  detail::check_pointer(kernel, "y", y);
  detail::check_pointer(kernel, "dy", dy);
  detail::check_pointer(kernel, "dx", dx);
  const detail::tensor_descriptor t(in);
  MEMWEAVE_CUDNN_CHECK(cudnnLRNCrossChannelBackward(
      ctx.cudnn(), d.get(), CUDNN_LRN_CROSS_CHANNEL_DIM1, &k_one, t.get(), y, t.get(), dy, t.get(),
      x, detail::beta_for(accumulate), t.get(), dx));
}

}  // namespace memweave::kernels::cuda
