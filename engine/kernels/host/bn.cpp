// Host batch normalization.
//
// Invariants: one task per channel for every per-channel sum, which continues the
// accumulator it is given: exactly in forward (so a batch run in any parts, TSPLIT's
// micro-batches or a tiled segment's tiles, gets the same statistics), in double over
// images then positions in backward (so micro-batches in image order sum in the same
// order); element-wise results are fixed expressions of the saved float statistics. Thread safety:
// none of its own; concurrent calls must not share outputs.
#include "engine/kernels/host/bn.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "engine/kernels/host/act.hpp"
#include "engine/kernels/host/parallel.hpp"
#include "engine/kernels/kernel_checks.hpp"

namespace memweave::kernels::host {

using std::int64_t;

namespace {
// Values per block of bn_sum_moments: 8 KiB of floats, well within an L1 data cache.
constexpr std::size_t k_moments_block = 2048;
}  // namespace

void bn_sum_moments(const kernel_context& ctx, const shape4& in, const float* x, exact_sum* sum,
                    exact_square_sum* squares) {
  const int64_t C = in.c, HW = in.h * in.w;
  detail::parallel_for(ctx, C, detail::grain_for(in.n * HW), [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      // Both sums in one pass over x, a block at a time: the block's values, gathered from
      // the channel's planes (a plane may hold only 49), are still in the L1 cache for the
      // squares. Each sum's loop alone runs about twice as fast as one loop feeding both
      // (fewer live registers, no stores of one sum waiting on the other's).
      std::array<float, k_moments_block> block;
      std::size_t used = 0;
      const auto take = [&] {
        const auto at = [&](int64_t j) { return block[static_cast<std::size_t>(j)]; };
        sum[c].add_each(static_cast<int64_t>(used), at);
        squares[c].add_each(static_cast<int64_t>(used), at);
        used = 0;
      };
      for (int64_t n = 0; n < in.n; ++n) {
        const float* xp = x + (n * C + c) * HW;
        for (int64_t j = 0; j < HW;) {
          const auto count = std::min(static_cast<std::size_t>(HW - j), block.size() - used);
          std::copy_n(xp + j, count, block.begin() + static_cast<std::ptrdiff_t>(used));
          used += count;
          j += static_cast<int64_t>(count);
          if (used == block.size()) take();
        }
      }
      if (used != 0) take();
    }
  });
}

void bn_finish_statistics(std::int64_t channels, std::int64_t m, const bn_params& p,
                          const exact_sum* sum, const exact_square_sum* squares, float* saved_mean,
                          float* saved_invstd) {
  MEMWEAVE_EXPECTS(m <= exact_sum::k_max_terms,
                   "bn: " + std::to_string(m) +
                       " values per channel (images x height x width); "
                       "expected at most 2^36, what BN's exact statistics hold; use a smaller "
                       "batch or image");
  const auto md = static_cast<double>(m);
  for (int64_t c = 0; c < channels; ++c) {
    const double var = exact_sum::variance(sum[c], squares[c], m);
    saved_mean[c] = static_cast<float>(sum[c].value() / md);
    saved_invstd[c] = static_cast<float>(1.0 / std::sqrt(var + p.epsilon));
  }
}

namespace {

// Writes out[j] = f(bn_value(x[j])) over every (image, channel) plane, one task per plane
// run, with the plane's saved statistics and parameters.
template <class F>
void normalize_planes(const kernel_context& ctx, const shape4& in, const float* x,
                      const float* gamma, const float* beta, const float* saved_mean,
                      const float* saved_invstd, float* out, F f) {
  const int64_t C = in.c, HW = in.h * in.w;
  detail::parallel_for(ctx, in.n * C, detail::grain_for(HW), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t c = t % C;
      const float mean_f = saved_mean[c], invstd_f = saved_invstd[c];
      const float gc = gamma[c], bc = beta[c];
      const float* __restrict xp = x + t * HW;
      float* __restrict op = out + t * HW;
      for (int64_t j = 0; j < HW; ++j) op[j] = f(bn_value(xp[j], mean_f, invstd_f, gc, bc));
    }
  });
}

}  // namespace

void bn_normalize(const kernel_context& ctx, const shape4& in, const float* x, const float* gamma,
                  const float* beta, const float* saved_mean, const float* saved_invstd, float* y) {
  normalize_planes(ctx, in, x, gamma, beta, saved_mean, saved_invstd, y, [](float v) { return v; });
}

void bn_act_normalize(const kernel_context& ctx, const shape4& in, const bn_params& p,
                      const float* x, const float* gamma, const float* beta,
                      const float* saved_mean, const float* saved_invstd, const act_params& act,
                      float* z) {
  const char* kernel = "bn_act_normalize";
  checks::check_bn(kernel, in, p,
                   {{"x", x},
                    {"gamma", gamma},
                    {"beta", beta},
                    {"saved_mean", saved_mean},
                    {"saved_invstd", saved_invstd},
                    {"z", z}});
  auto run = [&](auto f) {
    normalize_planes(ctx, in, x, gamma, beta, saved_mean, saved_invstd, z, f);
  };
  switch (act.mode) {
    case act_mode::relu:
      return run([](float v) { return relu_value(v); });
    case act_mode::tanh:
      return run([](float v) { return tanh_value(v); });
    case act_mode::sigmoid:
      return run([](float v) { return sigmoid_value(v); });
  }
}

void bn_forward_training(const kernel_context& ctx, const shape4& in, const bn_params& p,
                         const float* x, const float* gamma, const float* beta, float* y,
                         float* saved_mean, float* saved_invstd) {
  const char* kernel = "bn_forward_training";
  checks::check_bn_forward_training(kernel, in, p, x, gamma, beta, y, saved_mean, saved_invstd);
  const auto C = static_cast<std::size_t>(in.c);
  const int64_t m = in.n * in.h * in.w;
  std::vector<exact_sum> sum(C);
  std::vector<exact_square_sum> squares(C);
  bn_sum_moments(ctx, in, x, sum.data(), squares.data());
  bn_finish_statistics(in.c, m, p, sum.data(), squares.data(), saved_mean, saved_invstd);
  bn_normalize(ctx, in, x, gamma, beta, saved_mean, saved_invstd, y);
}

void bn_update_running(const shape4& in, const bn_params& p, const float* saved_mean,
                       const float* saved_invstd, float* running_mean, float* running_var) {
  const char* kernel = "bn_update_running";
  checks::check_bn(kernel, in, p,
                   {{"saved_mean", saved_mean},
                    {"saved_invstd", saved_invstd},
                    {"running_mean", running_mean},
                    {"running_var", running_var}});
  const double m = static_cast<double>(in.n * in.h * in.w);
  const double mom = p.momentum;
  for (int64_t c = 0; c < in.c; ++c) {
    const double invstd = saved_invstd[c];
    double var = 1.0 / (invstd * invstd) - p.epsilon;
    if (var < 0.0) var = 0.0;
    if (m > 1.0) var *= m / (m - 1.0);
    running_mean[c] = static_cast<float>((1.0 - mom) * running_mean[c] + mom * saved_mean[c]);
    running_var[c] = static_cast<float>((1.0 - mom) * running_var[c] + mom * var);
  }
}

void bn_forward_inference(const kernel_context& ctx, const shape4& in, const bn_params& p,
                          const float* x, const float* gamma, const float* beta,
                          const float* running_mean, const float* running_var, float* y) {
  const char* kernel = "bn_forward_inference";
  checks::check_bn_forward_inference(kernel, in, p, x, gamma, beta, running_mean, running_var, y);
  const int64_t C = in.c, HW = in.h * in.w;
  detail::parallel_for(ctx, in.n * C, detail::grain_for(HW), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t c = t % C;
      const float mean = running_mean[c];
      const float invstd =
          static_cast<float>(1.0 / std::sqrt(static_cast<double>(running_var[c]) + p.epsilon));
      const float gc = gamma[c], bc = beta[c];
      const float* __restrict xp = x + t * HW;
      float* __restrict yp = y + t * HW;
      for (int64_t j = 0; j < HW; ++j) yp[j] = gc * ((xp[j] - mean) * invstd) + bc;
    }
  });
}

void bn_backward_sums(const kernel_context& ctx, const shape4& in, const float* x,
                      const float* saved_mean, const float* saved_invstd, const float* dy,
                      double* sdy, double* sdy_xhat) {
  const int64_t C = in.c, HW = in.h * in.w;
  detail::parallel_for(ctx, C, detail::grain_for(2 * in.n * HW), [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const float mean = saved_mean[c], invstd = saved_invstd[c];
      double s = sdy[c], sx = sdy_xhat[c];
      for (int64_t n = 0; n < in.n; ++n) {
        const float* xp = x + (n * C + c) * HW;
        const float* dyp = dy + (n * C + c) * HW;
        for (int64_t j = 0; j < HW; ++j) {
          const float xhat = (xp[j] - mean) * invstd;
          s += dyp[j];
          sx += static_cast<double>(dyp[j]) * xhat;
        }
      }
      sdy[c] = s;
      sdy_xhat[c] = sx;
    }
  });
}

void bn_backward_data(const kernel_context& ctx, const shape4& in, std::int64_t m, const float* x,
                      const float* saved_mean, const float* saved_invstd, const float* gamma,
                      const double* sdy, const double* sdy_xhat, const float* dy, float* dx,
                      bool accumulate) {
  const int64_t C = in.c, HW = in.h * in.w;
  const double md = static_cast<double>(m);
  detail::parallel_for(ctx, in.n * C, detail::grain_for(HW), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t c = t % C;
      const float mean = saved_mean[c], invstd = saved_invstd[c];
      // dx = gamma * invstd / m * (m * dy - sum(dy) - x_hat * sum(dy * x_hat)), in double.
      const double scale = static_cast<double>(gamma[c]) * invstd / md;
      const double s = sdy[c], sx = sdy_xhat[c];
      const float* __restrict xp = x + t * HW;
      const float* __restrict dyp = dy + t * HW;
      float* __restrict dxp = dx + t * HW;
      for (int64_t j = 0; j < HW; ++j) {
        const float xhat = (xp[j] - mean) * invstd;
        const float g =
            static_cast<float>(scale * (md * dyp[j] - s - static_cast<double>(xhat) * sx));
        dxp[j] = accumulate ? dxp[j] + g : g;
      }
    }
  });
}

void bn_backward(const kernel_context& ctx, const shape4& in, const bn_params& p, const float* x,
                 const float* saved_mean, const float* saved_invstd, const float* gamma,
                 const float* dy, float* dx, float* dgamma, float* dbeta, bool accumulate) {
  const char* kernel = "bn_backward";
  checks::check_bn_backward(kernel, in, p, x, saved_mean, saved_invstd, gamma, dy, dgamma, dbeta);
  const auto C = static_cast<std::size_t>(in.c);
  std::vector<double> sdy(C, 0.0), sdy_xhat(C, 0.0);
  bn_backward_sums(ctx, in, x, saved_mean, saved_invstd, dy, sdy.data(), sdy_xhat.data());
  for (std::size_t c = 0; c < C; ++c) {
    dbeta[c] = static_cast<float>(sdy[c]);
    dgamma[c] = static_cast<float>(sdy_xhat[c]);
  }
  if (dx == nullptr) return;
  bn_backward_data(ctx, in, in.n * in.h * in.w, x, saved_mean, saved_invstd, gamma, sdy.data(),
                   sdy_xhat.data(), dy, dx, accumulate);
}

}  // namespace memweave::kernels::host
