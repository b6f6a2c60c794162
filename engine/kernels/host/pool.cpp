// Host pooling.
//
// Invariants: forward computes each output from its window in row-major scan order;
// backward works one (image, channel) plane per task and scatters into that plane in
// output scan order, so each dx element's sum has a fixed order. Thread safety: none of
// its own; concurrent calls must not share outputs.
#include "engine/kernels/host/pool.hpp"

#include <algorithm>
#include <vector>

#include "engine/kernels/host/parallel.hpp"
#include "engine/kernels/kernel_checks.hpp"

namespace memweave::kernels::host {

using std::int64_t;

namespace {

struct geom {
  int64_t planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw;
  bool max, adaptive;
};

geom make_geom(const char* kernel, const shape4& in, const pool_params& p) {
  const checks::pool_window win = checks::pool_geometry(kernel, in, p);
  geom g{};
  g.planes = in.n * in.c, g.h = in.h, g.w = in.w;
  g.max = p.mode == pool_mode::max;
  g.kh = win.kh, g.kw = win.kw, g.sh = win.sh, g.sw = win.sw, g.ph = win.ph, g.pw = win.pw;
  g.oh = win.oh, g.ow = win.ow;
  g.adaptive = win.adaptive;
  return g;
}

// The window of output (oh, ow), clipped to the input: rows [h0, h1), columns [w0, w1).
struct window {
  int64_t h0, h1, w0, w1;
};
window window_of(const geom& g, int64_t oh, int64_t ow) {
  if (g.adaptive) {
    return {adaptive_begin(oh, g.h, g.oh), adaptive_end(oh, g.h, g.oh),
            adaptive_begin(ow, g.w, g.ow), adaptive_end(ow, g.w, g.ow)};
  }
  const int64_t hs = oh * g.sh - g.ph, ws = ow * g.sw - g.pw;
  return {std::max<int64_t>(hs, 0), std::min(hs + g.kh, g.h), std::max<int64_t>(ws, 0),
          std::min(ws + g.kw, g.w)};
}

// An adaptive window's divisor: its own element count (exact in float below 2^24, far
// above any window an image gives).
float window_size(const window& win) {
  return static_cast<float>((win.h1 - win.h0) * (win.w1 - win.w0));
}

// The first maximum of the window in scan order.
int64_t argmax(const geom& g, const float* xp, const window& win) {
  int64_t best = win.h0 * g.w + win.w0;
  float v = xp[best];
  for (int64_t ih = win.h0; ih < win.h1; ++ih) {
    for (int64_t iw = win.w0; iw < win.w1; ++iw) {
      if (xp[ih * g.w + iw] > v) {
        v = xp[ih * g.w + iw];
        best = ih * g.w + iw;
      }
    }
  }
  return best;
}

// The window's geometry: the layer checked on the whole map, then the buffers' extents and
// the padding shifted to the input buffer's origin (possibly negative), so that window_of
// clips to exactly the in-map positions, as on the whole map.
geom make_window_geom(const char* kernel, const shape4& in, const pool_params& p,
                      const map_window& win) {
  MEMWEAVE_EXPECTS(
      !p.global && !p.adaptive(),
      std::string(kernel) +
          ": a global or adaptive pooling has no fixed window; expected a windowed one");
  geom g = make_geom(kernel, {in.n, in.c, win.map_h, win.map_w}, p);
  detail::check_window(kernel, in, win, g.oh, g.ow);
  g.h = in.h, g.w = in.w;
  g.ph = p.pad_h + win.in_y0 - win.out_y0 * p.stride_h;
  g.pw = p.pad_w + win.in_x0 - win.out_x0 * p.stride_w;
  g.oh = win.out_h, g.ow = win.out_w;
  return g;
}

void run_forward(const char* kernel, const kernel_context& ctx, const geom& g, const float* x,
                 float* y) {
  detail::check_pointer(kernel, "x", x);
  detail::check_pointer(kernel, "y", y);
  const float inv_count = 1.0f / static_cast<float>(g.kh * g.kw);
  const int64_t hw = g.h * g.w, ohw = g.oh * g.ow;
  detail::parallel_for(
      ctx, g.planes, detail::grain_for(ohw * g.kh * g.kw), [&](int64_t lo, int64_t hi) {
        for (int64_t t = lo; t < hi; ++t) {
          const float* xp = x + t * hw;
          float* yp = y + t * ohw;
          for (int64_t oh = 0; oh < g.oh; ++oh) {
            for (int64_t ow = 0; ow < g.ow; ++ow) {
              const window win = window_of(g, oh, ow);
              if (g.max) {
                yp[oh * g.ow + ow] = xp[argmax(g, xp, win)];
              } else {
                float sum = 0.0f;
                for (int64_t ih = win.h0; ih < win.h1; ++ih) {
                  for (int64_t iw = win.w0; iw < win.w1; ++iw) sum += xp[ih * g.w + iw];
                }
                yp[oh * g.ow + ow] = g.adaptive ? sum / window_size(win) : sum * inv_count;
              }
            }
          }
        }
      });
}

void run_backward(const char* kernel, const kernel_context& ctx, const geom& g, const float* x,
                  const float* y, const float* dy, float* dx, bool accumulate) {
  detail::check_pointer(kernel, "dy", dy);
  detail::check_pointer(kernel, "dx", dx);
  if (g.max) {
    detail::check_pointer(kernel, "x", x);
    detail::check_pointer(kernel, "y", y);
  }
  const float inv_count = 1.0f / static_cast<float>(g.kh * g.kw);
  const int64_t hw = g.h * g.w, ohw = g.oh * g.ow;
  detail::parallel_for(
      ctx, g.planes, detail::grain_for(ohw * g.kh * g.kw), [&](int64_t lo, int64_t hi) {
        std::vector<float> scratch(accumulate ? static_cast<std::size_t>(hw) : 0);
        for (int64_t t = lo; t < hi; ++t) {
          float* dxp = dx + t * hw;
          float* tgt = accumulate ? scratch.data() : dxp;
          std::fill_n(tgt, hw, 0.0f);
          const float* dyp = dy + t * ohw;
          for (int64_t oh = 0; oh < g.oh; ++oh) {
            for (int64_t ow = 0; ow < g.ow; ++ow) {
              const window win = window_of(g, oh, ow);
              const float d = dyp[oh * g.ow + ow];
              if (g.max) {
                const float* xp = x + t * hw;
                const float yv = y[t * ohw + oh * g.ow + ow];
                int64_t at = -1;  // the first element equal to y; the scan's argmax if none (NaN)
                for (int64_t ih = win.h0; ih < win.h1 && at < 0; ++ih) {
                  for (int64_t iw = win.w0; iw < win.w1; ++iw) {
                    if (xp[ih * g.w + iw] == yv) {
                      at = ih * g.w + iw;
                      break;
                    }
                  }
                }
                if (at < 0) at = argmax(g, xp, win);
                tgt[at] += d;
              } else {
                const float share = g.adaptive ? d / window_size(win) : d * inv_count;
                for (int64_t ih = win.h0; ih < win.h1; ++ih) {
                  for (int64_t iw = win.w0; iw < win.w1; ++iw) tgt[ih * g.w + iw] += share;
                }
              }
            }
          }
          if (accumulate) {
            for (int64_t j = 0; j < hw; ++j) dxp[j] += tgt[j];
          }
        }
      });
}

}  // namespace

void pool_forward(const kernel_context& ctx, const shape4& in, const pool_params& p, const float* x,
                  float* y) {
  const char* kernel = "pool_forward";
  run_forward(kernel, ctx, make_geom(kernel, in, p), x, y);
}

void pool_backward(const kernel_context& ctx, const shape4& in, const pool_params& p,
                   const float* x, const float* y, const float* dy, float* dx, bool accumulate) {
  const char* kernel = "pool_backward";
  run_backward(kernel, ctx, make_geom(kernel, in, p), x, y, dy, dx, accumulate);
}

void pool_forward_window(const kernel_context& ctx, const shape4& in, const pool_params& p,
                         const map_window& win, const float* x, float* y) {
  const char* kernel = "pool_forward_window";
  run_forward(kernel, ctx, make_window_geom(kernel, in, p, win), x, y);
}

void pool_backward_window(const kernel_context& ctx, const shape4& in, const pool_params& p,
                          const map_window& win, const float* x, const float* y, const float* dy,
                          float* dx, bool accumulate) {
  const char* kernel = "pool_backward_window";
  run_backward(kernel, ctx, make_window_geom(kernel, in, p, win), x, y, dy, dx, accumulate);
}

}  // namespace memweave::kernels::host
