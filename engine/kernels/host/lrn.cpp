// Host cross-channel LRN.
//
// Invariants: one task per (image, channel) plane; the scale of a plane is recomputed from
// x by the same function wherever it is needed (forward and backward), with the window
// summed over channels ascending, so forward and backward agree bit for bit. Thread
// safety: none of its own; concurrent calls must not share outputs.
#include "engine/kernels/host/lrn.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/kernels/host/parallel.hpp"

namespace memweave::kernels::host {

using std::int64_t;

namespace {

struct geom {
  int64_t n, c, hw, pre, post;  // window of channel c: [c - pre, c + post]
  float alpha_over_size, beta, k;
};

geom make_geom(const char* kernel, const shape4& in, const lrn_params& p) {
  detail::check_shape(kernel, in);
  MEMWEAVE_EXPECTS(p.size >= 1 && p.k > 0.0f && p.alpha >= 0.0f && p.beta >= 0.0f,
                   std::string(kernel) + ": size=" + std::to_string(p.size) +
                       " alpha=" + std::to_string(p.alpha) + " beta=" + std::to_string(p.beta) +
                       " k=" + std::to_string(p.k) +
                       ": expected size >= 1, k > 0, alpha >= 0, beta >= 0 (AlexNet: 5, 1e-4, "
                       "0.75, 2)");
  geom g{};
  g.n = in.n, g.c = in.c, g.hw = in.h * in.w;
  g.pre = (p.size - 1) / 2;
  g.post = p.size - 1 - g.pre;
  g.alpha_over_size = p.alpha / static_cast<float>(p.size);
  g.beta = p.beta, g.k = p.k;
  return g;
}

// scale of channel c of image n into out[0, hw).
void compute_scale(const geom& g, const float* x, int64_t n, int64_t c, float* __restrict out) {
  std::fill_n(out, g.hw, 0.0f);
  const int64_t c0 = std::max<int64_t>(0, c - g.pre), c1 = std::min(g.c - 1, c + g.post);
  for (int64_t cc = c0; cc <= c1; ++cc) {
    const float* __restrict xp = x + (n * g.c + cc) * g.hw;
    for (int64_t j = 0; j < g.hw; ++j) out[j] += xp[j] * xp[j];
  }
  for (int64_t j = 0; j < g.hw; ++j) out[j] = g.k + g.alpha_over_size * out[j];
}

}  // namespace

void lrn_forward(const kernel_context& ctx, const shape4& in, const lrn_params& p, const float* x,
                 float* y) {
  const char* kernel = "lrn_forward";
  const geom g = make_geom(kernel, in, p);
  detail::check_pointer(kernel, "x", x);
  detail::check_pointer(kernel, "y", y);
  detail::parallel_for(ctx, g.n * g.c, detail::grain_for(g.hw * (p.size + 8)),
                       [&](int64_t lo, int64_t hi) {
                         std::vector<float> scale(static_cast<std::size_t>(g.hw));
                         for (int64_t t = lo; t < hi; ++t) {
                           compute_scale(g, x, t / g.c, t % g.c, scale.data());
                           const float* xp = x + t * g.hw;
                           float* yp = y + t * g.hw;
                           for (int64_t j = 0; j < g.hw; ++j)
                             yp[j] = xp[j] * std::pow(scale[j], -g.beta);
                         }
                       });
}

void lrn_backward(const kernel_context& ctx, const shape4& in, const lrn_params& p, const float* x,
                  const float* y, const float* dy, float* dx, bool accumulate) {
  const char* kernel = "lrn_backward";
  const geom g = make_geom(kernel, in, p);
  detail::check_pointer(kernel, "x", x);
  detail::check_pointer(kernel, "y", y);
  detail::check_pointer(kernel, "dy", dy);
  detail::check_pointer(kernel, "dx", dx);
  const float coeff = 2.0f * g.alpha_over_size * g.beta;
  detail::parallel_for(
      ctx, g.n * g.c, detail::grain_for(g.hw * (p.size + 2) * (p.size + 1)),
      [&](int64_t lo, int64_t hi) {
        std::vector<float> scale(static_cast<std::size_t>(g.hw)), acc(scale.size());
        for (int64_t t = lo; t < hi; ++t) {
          const int64_t n = t / g.c, c = t % g.c;
          // acc = sum over the channels c' whose window holds c (c' in [c - post, c + pre]),
          // ascending, of dy[c'] * y[c'] / scale[c'].
          std::fill(acc.begin(), acc.end(), 0.0f);
          const int64_t c0 = std::max<int64_t>(0, c - g.post), c1 = std::min(g.c - 1, c + g.pre);
          for (int64_t cc = c0; cc <= c1; ++cc) {
            compute_scale(g, x, n, cc, scale.data());
            const float* __restrict yp = y + (n * g.c + cc) * g.hw;
            const float* __restrict dyp = dy + (n * g.c + cc) * g.hw;
            for (int64_t j = 0; j < g.hw; ++j) acc[j] += dyp[j] * yp[j] / scale[j];
          }
          compute_scale(g, x, n, c, scale.data());
          const float* xp = x + t * g.hw;
          const float* dyp = dy + t * g.hw;
          float* dxp = dx + t * g.hw;
          for (int64_t j = 0; j < g.hw; ++j) {
            const float gv = dyp[j] * std::pow(scale[j], -g.beta) - coeff * xp[j] * acc[j];
            dxp[j] = accumulate ? dxp[j] + gv : gv;
          }
        }
      });
}

}  // namespace memweave::kernels::host
