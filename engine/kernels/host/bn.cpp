// Host batch normalization.
//
// Invariants: one task per channel; every per-channel sum runs over images then positions
// in ascending order, in double; element-wise results are fixed expressions of the saved
// float statistics. Thread safety: none of its own; concurrent calls must not share
// outputs.
#include "engine/kernels/host/bn.hpp"

#include <cmath>

#include "engine/kernels/host/parallel.hpp"
#include "engine/kernels/kernel_checks.hpp"

namespace memweave::kernels::host {

using std::int64_t;

void bn_forward_training(const kernel_context& ctx, const shape4& in, const bn_params& p,
                         const float* x, const float* gamma, const float* beta, float* y,
                         float* saved_mean, float* saved_invstd) {
  const char* kernel = "bn_forward_training";
  checks::check_bn_forward_training(kernel, in, p, x, gamma, beta, y, saved_mean, saved_invstd);
  const int64_t C = in.c, HW = in.h * in.w, m = in.n * HW;
  detail::parallel_for(ctx, C, detail::grain_for(3 * m), [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      double sum = 0.0;
      for (int64_t n = 0; n < in.n; ++n) {
        const float* xp = x + (n * C + c) * HW;
        for (int64_t j = 0; j < HW; ++j) sum += xp[j];
      }
      const double mean = sum / static_cast<double>(m);
      double sq = 0.0;
      for (int64_t n = 0; n < in.n; ++n) {
        const float* xp = x + (n * C + c) * HW;
        for (int64_t j = 0; j < HW; ++j) {
          const double d = xp[j] - mean;
          sq += d * d;
        }
      }
      const double var = sq / static_cast<double>(m);
      const float mean_f = static_cast<float>(mean);
      const float invstd_f = static_cast<float>(1.0 / std::sqrt(var + p.epsilon));
      saved_mean[c] = mean_f;
      saved_invstd[c] = invstd_f;
      const float gc = gamma[c], bc = beta[c];
      for (int64_t n = 0; n < in.n; ++n) {
        const float* __restrict xp = x + (n * C + c) * HW;
        float* __restrict yp = y + (n * C + c) * HW;
        for (int64_t j = 0; j < HW; ++j) yp[j] = gc * ((xp[j] - mean_f) * invstd_f) + bc;
      }
    }
  });
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

void bn_backward(const kernel_context& ctx, const shape4& in, const bn_params& p, const float* x,
                 const float* saved_mean, const float* saved_invstd, const float* gamma,
                 const float* dy, float* dx, float* dgamma, float* dbeta, bool accumulate) {
  const char* kernel = "bn_backward";
  checks::check_bn_backward(kernel, in, p, x, saved_mean, saved_invstd, gamma, dy, dgamma, dbeta);
  const int64_t C = in.c, HW = in.h * in.w, m = in.n * HW;
  detail::parallel_for(ctx, C, detail::grain_for(3 * m), [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const float mean = saved_mean[c], invstd = saved_invstd[c];
      double sdy = 0.0, sdy_xhat = 0.0;
      for (int64_t n = 0; n < in.n; ++n) {
        const float* xp = x + (n * C + c) * HW;
        const float* dyp = dy + (n * C + c) * HW;
        for (int64_t j = 0; j < HW; ++j) {
          const float xhat = (xp[j] - mean) * invstd;
          sdy += dyp[j];
          sdy_xhat += static_cast<double>(dyp[j]) * xhat;
        }
      }
      dbeta[c] = static_cast<float>(sdy);
      dgamma[c] = static_cast<float>(sdy_xhat);
      if (dx == nullptr) continue;
      // dx = gamma * invstd / m * (m * dy - sum(dy) - x_hat * sum(dy * x_hat)), in double.
      const double md = static_cast<double>(m);
      const double scale = static_cast<double>(gamma[c]) * invstd / md;
      for (int64_t n = 0; n < in.n; ++n) {
        const float* __restrict xp = x + (n * C + c) * HW;
        const float* __restrict dyp = dy + (n * C + c) * HW;
        float* __restrict dxp = dx + (n * C + c) * HW;
        for (int64_t j = 0; j < HW; ++j) {
          const float xhat = (xp[j] - mean) * invstd;
          const float g = static_cast<float>(
              scale * (md * dyp[j] - sdy - static_cast<double>(xhat) * sdy_xhat));
          dxp[j] = accumulate ? dxp[j] + g : g;
        }
      }
    }
  });
}

}  // namespace memweave::kernels::host
