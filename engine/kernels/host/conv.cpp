// Host convolution: direct loops, im2col + GEMM per image, im2col + GEMM per chunk.
//
// Invariants (determinism, see kernel_context.cpp):
//   - direct: each output element is summed by one task in a fixed order (forward: bias,
//     then (c, r, s); backward data: (k, r, s); backward filter: per output column lane over
//     (image, row), then the lanes in double);
//   - im2col/col2im only copy, or gather a fixed (r, s) order into one element;
//   - GEMMs go through detail::gemm, whose tiling depends only on the matrix shapes;
//     backward filter sums images in order (beta = 1 after the first image or chunk).
// So each algorithm is bit-reproducible for a given chunk; algorithms differ in rounding.
// Thread safety: none of its own; concurrent calls must not share outputs or workspace.
#include "engine/kernels/host/conv.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/kernels/host/gemm.hpp"
#include "engine/kernels/host/parallel.hpp"
#include "engine/kernels/kernel_checks.hpp"

namespace memweave::kernels::host {

using detail::parallel_for;
using detail::valid_outputs;
using std::int64_t;

namespace {

// The shape arithmetic of one convolution, checked once.
struct geom {
  int64_t n, c, h, w;      // input
  int64_t k, oh, ow;       // output channels and extent
  int64_t groups, cg, kg;  // groups; input and output channels per group
  int64_t r, s, sh, sw, ph, pw, dh, dw;
  bool bias;
  int64_t hw() const { return h * w; }
  int64_t p() const { return oh * ow; }
  int64_t crs() const { return cg * r * s; }
  // A 1x1, stride-1, unpadded convolution: the input image is its own im2col matrix.
  bool identity() const { return r == 1 && s == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }
};

geom make_geom(const char* kernel, const shape4& in, const conv_params& p) {
  const shape4 out = checks::conv_output(kernel, in, p);
  geom g{};
  g.n = in.n, g.c = in.c, g.h = in.h, g.w = in.w;
  g.k = p.out_channels;
  g.oh = out.h;
  g.ow = out.w;
  g.groups = p.groups, g.cg = in.c / p.groups, g.kg = p.out_channels / p.groups;
  g.r = p.kernel_h, g.s = p.kernel_w, g.sh = p.stride_h, g.sw = p.stride_w;
  g.ph = p.pad_h, g.pw = p.pad_w, g.dh = p.dilation_h, g.dw = p.dilation_w;
  g.bias = p.bias;
  return g;
}

int64_t resolve_chunk(const geom& g, int64_t chunk) {
  return chunk <= 0 || chunk > g.n ? g.n : chunk;
}

std::size_t workspace_floats(conv_algo algo, conv_pass pass, const geom& g, int64_t chunk) {
  switch (algo) {
    case conv_algo::direct:
      return 0;
    case conv_algo::im2col_image:
      if (g.identity() && pass != conv_pass::backward_data) return 0;
      return static_cast<std::size_t>(g.crs() * g.p());
    case conv_algo::im2col_batch:
      return static_cast<std::size_t>((g.crs() + g.kg) * resolve_chunk(g, chunk) * g.p());
  }
  return 0;
}

// The caller's workspace as floats, checked against what the algorithm needs.
float* take_workspace(const char* kernel, const conv_config& cfg, conv_pass pass, const geom& g) {
  const std::size_t need = workspace_floats(cfg.algo, pass, g, cfg.chunk) * sizeof(float);
  if (need == 0) return nullptr;
  MEMWEAVE_EXPECTS(cfg.workspace != nullptr && cfg.workspace_bytes >= need,
                   std::string(kernel) + " (" + to_string(cfg.algo) + "): workspace of " +
                       std::to_string(cfg.workspace_bytes) + " bytes at " +
                       (cfg.workspace ? "a buffer" : "null") + "; expected at least " +
                       std::to_string(need) + " bytes (conv_workspace_bytes)");
  MEMWEAVE_EXPECTS(reinterpret_cast<std::uintptr_t>(cfg.workspace) % alignof(float) == 0,
                   std::string(kernel) +
                       ": workspace is not aligned for float; expected an "
                       "address that is a multiple of 4");
  return static_cast<float*>(cfg.workspace);
}

// im2col of `images` consecutive images of one group: image i's channels start at
// x_group + i*c*h*w; row (c, r, s) of the result holds, at columns [i*P, (i+1)*P), the input
// values each output position reads (0 in the padding). Row stride `ld`.
void im2col(const kernel_context& ctx, const geom& g, const float* x_group, int64_t images,
            float* col, int64_t ld) {
  const int64_t rs = g.r * g.s, P = g.p();
  parallel_for(ctx, g.crs() * images, detail::grain_for(P), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t row = t / images, i = t % images;
      const int64_t c = row / rs, r = (row % rs) / g.s, s = row % g.s;
      const float* __restrict xc = x_group + (i * g.c + c) * g.hw();
      float* __restrict out = col + row * ld + i * P;
      const int64_t hoff = r * g.dh - g.ph, woff = s * g.dw - g.pw;
      const auto wr = valid_outputs(woff, g.sw, g.w, g.ow);
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        float* __restrict o = out + oh * g.ow;
        const int64_t ih = oh * g.sh + hoff;
        if (ih < 0 || ih >= g.h || wr.hi <= wr.lo) {
          std::fill_n(o, g.ow, 0.0f);
          continue;
        }
        const float* __restrict xrow = xc + ih * g.w;
        std::fill_n(o, wr.lo, 0.0f);
        for (int64_t ow = wr.lo; ow < wr.hi; ++ow) o[ow] = xrow[ow * g.sw + woff];
        std::fill(o + wr.hi, o + g.ow, 0.0f);
      }
    }
  });
}

// The inverse gather: for each input plane of `images` images of one group, sums the
// im2col entries that read it, in (r, s) order, into dx (dx = sum, or dx += sum).
void col2im(const kernel_context& ctx, const geom& g, const float* col, int64_t ld, int64_t images,
            float* dx_group, bool accumulate) {
  const int64_t P = g.p(), HW = g.hw();
  parallel_for(ctx, images * g.cg, detail::grain_for(HW * g.r * g.s), [&](int64_t b, int64_t e) {
    std::vector<float> scratch(accumulate ? static_cast<std::size_t>(HW) : 0);
    for (int64_t t = b; t < e; ++t) {
      const int64_t i = t / g.cg, c = t % g.cg;
      float* dxp = dx_group + (i * g.c + c) * HW;
      float* __restrict tgt = accumulate ? scratch.data() : dxp;
      std::fill_n(tgt, HW, 0.0f);
      for (int64_t r = 0; r < g.r; ++r) {
        const int64_t hoff = r * g.dh - g.ph;
        const auto hr = valid_outputs(hoff, g.sh, g.h, g.oh);
        for (int64_t s = 0; s < g.s; ++s) {
          const int64_t woff = s * g.dw - g.pw;
          const auto wr = valid_outputs(woff, g.sw, g.w, g.ow);
          const float* __restrict crow = col + ((c * g.r + r) * g.s + s) * ld + i * P;
          for (int64_t oh = hr.lo; oh < hr.hi; ++oh) {
            float* __restrict trow = tgt + (oh * g.sh + hoff) * g.w;
            const float* __restrict src = crow + oh * g.ow;
            for (int64_t ow = wr.lo; ow < wr.hi; ++ow) trow[ow * g.sw + woff] += src[ow];
          }
        }
      }
      if (accumulate) {
        for (int64_t j = 0; j < HW; ++j) dxp[j] += tgt[j];
      }
    }
  });
}

// y[n, k, :] += b[k] for every image and channel (after a GEMM wrote the sums).
void add_bias(const kernel_context& ctx, const geom& g, const float* b, float* y) {
  const int64_t P = g.p();
  parallel_for(ctx, g.n * g.k, detail::grain_for(P), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const float bk = b[t % g.k];
      float* __restrict yp = y + t * P;
      for (int64_t j = 0; j < P; ++j) yp[j] += bk;
    }
  });
}

// Copies dy of images [n0, n0+m), group gi, into stage as a kg x (m*P) matrix.
void stage_dy(const kernel_context& ctx, const geom& g, const float* dy, int64_t n0, int64_t m,
              int64_t gi, float* stage) {
  const int64_t P = g.p();
  parallel_for(ctx, m * g.kg, detail::grain_for(P), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t i = t / g.kg, kk = t % g.kg;
      std::memcpy(stage + kk * m * P + i * P, dy + ((n0 + i) * g.k + gi * g.kg + kk) * P,
                  static_cast<std::size_t>(P) * sizeof(float));
    }
  });
}

// ---- direct ------------------------------------------------------------------------------

void forward_direct(const kernel_context& ctx, const geom& g, const float* x, const float* w,
                    const float* b, float* y) {
  const int64_t P = g.p(), rs = g.r * g.s;
  parallel_for(ctx, g.n * g.k, detail::grain_for(P * g.crs()), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t n = t / g.k, k = t % g.k, gi = k / g.kg;
      float* __restrict yp = y + t * P;
      std::fill_n(yp, P, g.bias ? b[k] : 0.0f);
      for (int64_t c = 0; c < g.cg; ++c) {
        const float* xc = x + (n * g.c + gi * g.cg + c) * g.hw();
        const float* wk = w + (k * g.cg + c) * rs;
        for (int64_t r = 0; r < g.r; ++r) {
          const int64_t hoff = r * g.dh - g.ph;
          const auto hr = valid_outputs(hoff, g.sh, g.h, g.oh);
          for (int64_t s = 0; s < g.s; ++s) {
            const int64_t woff = s * g.dw - g.pw;
            const auto wr = valid_outputs(woff, g.sw, g.w, g.ow);
            const float wv = wk[r * g.s + s];
            for (int64_t oh = hr.lo; oh < hr.hi; ++oh) {
              const float* __restrict xrow = xc + (oh * g.sh + hoff) * g.w;
              float* __restrict yrow = yp + oh * g.ow;
              for (int64_t ow = wr.lo; ow < wr.hi; ++ow) yrow[ow] += wv * xrow[ow * g.sw + woff];
            }
          }
        }
      }
    }
  });
}

// extend: no scratch and no zeroing: the (k, r, s) terms continue the sum in dx, so a call
// over output channels [0, a) then an extend over [a, b) give one call's bits over [0, b).
void backward_data_direct(const kernel_context& ctx, const geom& g, const float* w, const float* dy,
                          float* dx, bool accumulate, bool extend = false) {
  const int64_t P = g.p(), HW = g.hw(), rs = g.r * g.s;
  if (extend) accumulate = false;
  parallel_for(ctx, g.n * g.c, detail::grain_for(P * g.kg * rs), [&](int64_t lo, int64_t hi) {
    std::vector<float> scratch(accumulate ? static_cast<std::size_t>(HW) : 0);
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t n = t / g.c, cin = t % g.c, gi = cin / g.cg, c = cin % g.cg;
      float* dxp = dx + t * HW;
      float* __restrict tgt = accumulate ? scratch.data() : dxp;
      if (!extend) std::fill_n(tgt, HW, 0.0f);
      for (int64_t kk = 0; kk < g.kg; ++kk) {
        const int64_t k = gi * g.kg + kk;
        const float* dyp = dy + (n * g.k + k) * P;
        const float* wk = w + (k * g.cg + c) * rs;
        for (int64_t r = 0; r < g.r; ++r) {
          const int64_t hoff = r * g.dh - g.ph;
          const auto hr = valid_outputs(hoff, g.sh, g.h, g.oh);
          for (int64_t s = 0; s < g.s; ++s) {
            const int64_t woff = s * g.dw - g.pw;
            const auto wr = valid_outputs(woff, g.sw, g.w, g.ow);
            const float wv = wk[r * g.s + s];
            for (int64_t oh = hr.lo; oh < hr.hi; ++oh) {
              float* __restrict trow = tgt + (oh * g.sh + hoff) * g.w;
              const float* __restrict dyrow = dyp + oh * g.ow;
              for (int64_t ow = wr.lo; ow < wr.hi; ++ow) trow[ow * g.sw + woff] += wv * dyrow[ow];
            }
          }
        }
      }
      if (accumulate) {
        for (int64_t j = 0; j < HW; ++j) dxp[j] += tgt[j];
      }
    }
  });
}

void backward_filter_direct(const kernel_context& ctx, const geom& g, const float* x,
                            const float* dy, float* dw, bool accumulate) {
  const int64_t P = g.p(), rs = g.r * g.s;
  parallel_for(ctx, g.k * g.cg, detail::grain_for(g.n * P * rs), [&](int64_t lo, int64_t hi) {
    // One lane per output column: lanes[(r*S + s)*OW + ow] sums, over one image's output
    // rows, the products that output column contributes; the lanes are then summed and the
    // image's contribution added to dw in image order, so that a split of the batch at any
    // image continues the same sum (TSPLIT).
    std::vector<float> lanes(static_cast<std::size_t>(rs * g.ow));
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t k = t / g.cg, c = t % g.cg, gi = k / g.kg;
      float* dwp = dw + t * rs;
      for (int64_t n = 0; n < g.n; ++n) {
        std::fill(lanes.begin(), lanes.end(), 0.0f);
        const float* dyp = dy + (n * g.k + k) * P;
        const float* xc = x + (n * g.c + gi * g.cg + c) * g.hw();
        for (int64_t r = 0; r < g.r; ++r) {
          const int64_t hoff = r * g.dh - g.ph;
          const auto hr = valid_outputs(hoff, g.sh, g.h, g.oh);
          for (int64_t s = 0; s < g.s; ++s) {
            const int64_t woff = s * g.dw - g.pw;
            const auto wr = valid_outputs(woff, g.sw, g.w, g.ow);
            float* __restrict lane = lanes.data() + (r * g.s + s) * g.ow;
            for (int64_t oh = hr.lo; oh < hr.hi; ++oh) {
              const float* __restrict xrow = xc + (oh * g.sh + hoff) * g.w;
              const float* __restrict dyrow = dyp + oh * g.ow;
              for (int64_t ow = wr.lo; ow < wr.hi; ++ow) {
                lane[ow] += dyrow[ow] * xrow[ow * g.sw + woff];
              }
            }
          }
        }
        const bool add = accumulate || n > 0;
        for (int64_t j = 0; j < rs; ++j) {
          double sum = 0.0;
          const float* lane = lanes.data() + j * g.ow;
          for (int64_t ow = 0; ow < g.ow; ++ow) sum += lane[ow];
          const float v = static_cast<float>(sum);
          dwp[j] = add ? dwp[j] + v : v;
        }
      }
    }
  });
}

// ---- im2col + GEMM -----------------------------------------------------------------------

detail::gemm_args forward_gemm(const geom& g, const float* w, int64_t gi, const float* col,
                               int64_t ld, float* out, int64_t ldc, int64_t cols) {
  detail::gemm_args a;
  a.m = g.kg, a.n = cols, a.k = g.crs();
  a.a = w + gi * g.kg * g.crs(), a.lda = g.crs();
  a.b = col, a.ldb = ld;
  a.c = out, a.ldc = ldc;
  return a;
}

void forward_gemm_image(const kernel_context& ctx, const geom& g, const float* x, const float* w,
                        const float* b, float* y, float* ws) {
  const int64_t P = g.p();
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      const float* xg = x + (n * g.c + gi * g.cg) * g.hw();
      const float* col = xg;
      if (!g.identity()) {
        im2col(ctx, g, xg, 1, ws, P);
        col = ws;
      }
      detail::gemm(ctx, forward_gemm(g, w, gi, col, P, y + (n * g.k + gi * g.kg) * P, P, P), 0.0f);
    }
  }
  if (g.bias) add_bias(ctx, g, b, y);
}

void forward_gemm_batch(const kernel_context& ctx, const geom& g, int64_t chunk, const float* x,
                        const float* w, const float* b, float* y, float* ws) {
  const int64_t P = g.p();
  for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
    const int64_t m = std::min(chunk, g.n - n0), cols = m * P;
    float* col = ws;
    float* stage = ws + g.crs() * cols;
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      im2col(ctx, g, x + (n0 * g.c + gi * g.cg) * g.hw(), m, col, cols);
      detail::gemm(ctx, forward_gemm(g, w, gi, col, cols, stage, cols, cols), 0.0f);
      // Scatter the kg x (m*P) result into NCHW, adding the bias as add_bias does.
      parallel_for(ctx, m * g.kg, detail::grain_for(P), [&](int64_t lo, int64_t hi) {
        for (int64_t t = lo; t < hi; ++t) {
          const int64_t i = t / g.kg, kk = t % g.kg, k = gi * g.kg + kk;
          const float* __restrict src = stage + kk * cols + i * P;
          float* __restrict dst = y + ((n0 + i) * g.k + k) * P;
          if (g.bias) {
            const float bk = b[k];
            for (int64_t j = 0; j < P; ++j) dst[j] = src[j] + bk;
          } else {
            std::memcpy(dst, src, static_cast<std::size_t>(P) * sizeof(float));
          }
        }
      });
    }
  }
}

// dcol (crs x cols) = W_g^T (crs x kg) * dy_g (kg x cols).
detail::gemm_args data_gemm(const geom& g, const float* w, int64_t gi, const float* dyg,
                            int64_t lddy, float* col, int64_t cols) {
  detail::gemm_args a;
  a.trans_a = true;
  a.m = g.crs(), a.n = cols, a.k = g.kg;
  a.a = w + gi * g.kg * g.crs(), a.lda = g.crs();
  a.b = dyg, a.ldb = lddy;
  a.c = col, a.ldc = cols;
  return a;
}

void backward_data_gemm_image(const kernel_context& ctx, const geom& g, const float* w,
                              const float* dy, float* dx, bool accumulate, float* ws) {
  const int64_t P = g.p();
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      detail::gemm(ctx, data_gemm(g, w, gi, dy + (n * g.k + gi * g.kg) * P, P, ws, P), 0.0f);
      col2im(ctx, g, ws, P, 1, dx + (n * g.c + gi * g.cg) * g.hw(), accumulate);
    }
  }
}

void backward_data_gemm_batch(const kernel_context& ctx, const geom& g, int64_t chunk,
                              const float* w, const float* dy, float* dx, bool accumulate,
                              float* ws) {
  const int64_t P = g.p();
  for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
    const int64_t m = std::min(chunk, g.n - n0), cols = m * P;
    float* col = ws;
    float* stage = ws + g.crs() * cols;
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      stage_dy(ctx, g, dy, n0, m, gi, stage);
      detail::gemm(ctx, data_gemm(g, w, gi, stage, cols, col, cols), 0.0f);
      col2im(ctx, g, col, cols, m, dx + (n0 * g.c + gi * g.cg) * g.hw(), accumulate);
    }
  }
}

// dW_g (kg x crs) (+)= dy_g (kg x cols) * col^T (cols x crs).
detail::gemm_args filter_gemm(const geom& g, const float* dyg, const float* col, int64_t cols,
                              float* dw, int64_t gi) {
  detail::gemm_args a;
  a.trans_b = true;
  a.m = g.kg, a.n = g.crs(), a.k = cols;
  a.a = dyg, a.lda = cols;
  a.b = col, a.ldb = cols;
  a.c = dw + gi * g.kg * g.crs(), a.ldc = g.crs();
  return a;
}

void backward_filter_gemm_image(const kernel_context& ctx, const geom& g, const float* x,
                                const float* dy, float* dw, bool accumulate, float* ws) {
  const int64_t P = g.p();
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      const float* xg = x + (n * g.c + gi * g.cg) * g.hw();
      const float* col = xg;
      if (!g.identity()) {
        im2col(ctx, g, xg, 1, ws, P);
        col = ws;
      }
      detail::gemm(ctx, filter_gemm(g, dy + (n * g.k + gi * g.kg) * P, col, P, dw, gi),
                   n == 0 && !accumulate ? 0.0f : 1.0f);
    }
  }
}

// The batch's im2col, then one GEMM per image added in image order (as the image variant):
// one GEMM over the chunk would sum images inside BLAS, and a split of the batch at an
// image that is not a chunk boundary would change that sum (TSPLIT).
void backward_filter_gemm_batch(const kernel_context& ctx, const geom& g, int64_t chunk,
                                const float* x, const float* dy, float* dw, bool accumulate,
                                float* ws) {
  const int64_t P = g.p();
  for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
    const int64_t m = std::min(chunk, g.n - n0), cols = m * P;
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      im2col(ctx, g, x + (n0 * g.c + gi * g.cg) * g.hw(), m, ws, cols);
      for (int64_t i = 0; i < m; ++i) {
        const int64_t n = n0 + i;
        detail::gemm_args a = filter_gemm(g, dy + (n * g.k + gi * g.kg) * P, ws + i * P, P, dw, gi);
        a.ldb = cols;  // image i's columns of the chunk's im2col
        detail::gemm(ctx, a, n == 0 && !accumulate ? 0.0f : 1.0f);
      }
    }
  }
}

}  // namespace

const char* to_string(conv_algo a) noexcept {
  switch (a) {
    case conv_algo::direct:
      return "direct";
    case conv_algo::im2col_image:
      return "im2col_image";
    case conv_algo::im2col_batch:
      return "im2col_batch";
  }
  return "?";
}

std::size_t conv_workspace_bytes(conv_algo algo, conv_pass pass, const shape4& in,
                                 const conv_params& p, std::int64_t chunk) {
  return workspace_floats(algo, pass, make_geom("conv_workspace_bytes", in, p), chunk) *
         sizeof(float);
}

std::int64_t conv_batch_chunk_for(const shape4& in, const conv_params& p, std::size_t bytes) {
  const geom g = make_geom("conv_batch_chunk_for", in, p);
  const std::size_t per_image = static_cast<std::size_t>((g.crs() + g.kg) * g.p()) * sizeof(float);
  return std::min<std::int64_t>(g.n, static_cast<std::int64_t>(bytes / per_image));
}

namespace {

// The window's geometry: the layer checked on the whole map, then the buffers' extents and
// the padding shifted to the input buffer's origin (negative when the buffer starts above
// the first row the outputs read), so that valid_outputs skips exactly the positions
// outside the map, as on the whole map.
geom make_window_geom(const char* kernel, const shape4& in, const conv_params& p,
                      const map_window& win) {
  geom g = make_geom(kernel, {in.n, in.c, win.map_h, win.map_w}, p);
  detail::check_window(kernel, in, win, g.oh, g.ow);
  g.h = in.h, g.w = in.w;
  g.ph = p.pad_h + win.in_y0 - win.out_y0 * p.stride_h;
  g.pw = p.pad_w + win.in_x0 - win.out_x0 * p.stride_w;
  g.oh = win.out_h, g.ow = win.out_w;
  return g;
}

void run_forward(const char* kernel, const kernel_context& ctx, const conv_config& cfg,
                 const geom& g, const float* x, const float* w, const float* b, float* y) {
  detail::check_pointer(kernel, "x", x);
  detail::check_pointer(kernel, "w", w);
  detail::check_pointer(kernel, "y", y);
  if (g.bias) detail::check_pointer(kernel, "b (the layer has a bias)", b);
  float* ws = take_workspace(kernel, cfg, conv_pass::forward, g);
  switch (cfg.algo) {
    case conv_algo::direct:
      forward_direct(ctx, g, x, w, b, y);
      break;
    case conv_algo::im2col_image:
      forward_gemm_image(ctx, g, x, w, b, y, ws);
      break;
    case conv_algo::im2col_batch:
      forward_gemm_batch(ctx, g, resolve_chunk(g, cfg.chunk), x, w, b, y, ws);
      break;
  }
}

void run_backward_data(const char* kernel, const kernel_context& ctx, const conv_config& cfg,
                       const geom& g, const float* w, const float* dy, float* dx, bool accumulate,
                       bool extend = false) {
  detail::check_pointer(kernel, "w", w);
  detail::check_pointer(kernel, "dy", dy);
  detail::check_pointer(kernel, "dx", dx);
  float* ws = take_workspace(kernel, cfg, conv_pass::backward_data, g);
  switch (cfg.algo) {
    case conv_algo::direct:
      backward_data_direct(ctx, g, w, dy, dx, accumulate, extend);
      break;
    case conv_algo::im2col_image:  // extend: dx + this call's gradient (not continued)
      backward_data_gemm_image(ctx, g, w, dy, dx, accumulate || extend, ws);
      break;
    case conv_algo::im2col_batch:
      backward_data_gemm_batch(ctx, g, resolve_chunk(g, cfg.chunk), w, dy, dx, accumulate || extend,
                               ws);
      break;
  }
}

void run_backward_bias(const char* kernel, const kernel_context& ctx, const geom& g,
                       const float* dy, float* db, bool accumulate) {
  detail::check_pointer(kernel, "dy", dy);
  detail::check_pointer(kernel, "db", db);
  const int64_t P = g.p();
  parallel_for(ctx, g.k, detail::grain_for(g.n * P), [&](int64_t lo, int64_t hi) {
    for (int64_t k = lo; k < hi; ++k) {
      for (int64_t n = 0; n < g.n; ++n) {
        const float* dyp = dy + (n * g.k + k) * P;
        double sum = 0.0;
        for (int64_t j = 0; j < P; ++j) sum += dyp[j];
        const float v = static_cast<float>(sum);
        db[k] = accumulate || n > 0 ? db[k] + v : v;
      }
    }
  });
}

void run_backward_filter(const char* kernel, const kernel_context& ctx, const conv_config& cfg,
                         const geom& g, const float* x, const float* dy, float* dw, float* db,
                         bool accumulate) {
  detail::check_pointer(kernel, "x", x);
  detail::check_pointer(kernel, "dy", dy);
  detail::check_pointer(kernel, "dw", dw);
  float* ws = take_workspace(kernel, cfg, conv_pass::backward_filter, g);
  switch (cfg.algo) {
    case conv_algo::direct:
      backward_filter_direct(ctx, g, x, dy, dw, accumulate);
      break;
    case conv_algo::im2col_image:
      backward_filter_gemm_image(ctx, g, x, dy, dw, accumulate, ws);
      break;
    case conv_algo::im2col_batch:
      backward_filter_gemm_batch(ctx, g, resolve_chunk(g, cfg.chunk), x, dy, dw, accumulate, ws);
      break;
  }
  if (db != nullptr) run_backward_bias(kernel, ctx, g, dy, db, accumulate);
}

}  // namespace

void conv_forward(const kernel_context& ctx, const conv_config& cfg, const shape4& in,
                  const conv_params& p, const float* x, const float* w, const float* b, float* y) {
  const char* kernel = "conv_forward";
  run_forward(kernel, ctx, cfg, make_geom(kernel, in, p), x, w, b, y);
}

void conv_backward_data(const kernel_context& ctx, const conv_config& cfg, const shape4& in,
                        const conv_params& p, const float* w, const float* dy, float* dx,
                        bool accumulate) {
  const char* kernel = "conv_backward_data";
  run_backward_data(kernel, ctx, cfg, make_geom(kernel, in, p), w, dy, dx, accumulate);
}

void conv_backward_data_extend(const kernel_context& ctx, const conv_config& cfg, const shape4& in,
                               const conv_params& p, const float* w, const float* dy, float* dx) {
  const char* kernel = "conv_backward_data_extend";
  run_backward_data(kernel, ctx, cfg, make_geom(kernel, in, p), w, dy, dx, false, true);
}

void conv_backward_filter(const kernel_context& ctx, const conv_config& cfg, const shape4& in,
                          const conv_params& p, const float* x, const float* dy, float* dw,
                          float* db, bool accumulate) {
  const char* kernel = "conv_backward_filter";
  run_backward_filter(kernel, ctx, cfg, make_geom(kernel, in, p), x, dy, dw, db, accumulate);
}

void conv_backward_bias(const kernel_context& ctx, const shape4& in, const conv_params& p,
                        const float* dy, float* db, bool accumulate) {
  const char* kernel = "conv_backward_bias";
  run_backward_bias(kernel, ctx, make_geom(kernel, in, p), dy, db, accumulate);
}

void conv_forward_window(const kernel_context& ctx, const conv_config& cfg, const shape4& in,
                         const conv_params& p, const map_window& win, const float* x,
                         const float* w, const float* b, float* y) {
  const char* kernel = "conv_forward_window";
  run_forward(kernel, ctx, cfg, make_window_geom(kernel, in, p, win), x, w, b, y);
}

void conv_backward_data_window(const kernel_context& ctx, const conv_config& cfg, const shape4& in,
                               const conv_params& p, const map_window& win, const float* w,
                               const float* dy, float* dx, bool accumulate) {
  const char* kernel = "conv_backward_data_window";
  run_backward_data(kernel, ctx, cfg, make_window_geom(kernel, in, p, win), w, dy, dx, accumulate);
}

void conv_backward_filter_window(const kernel_context& ctx, const conv_config& cfg,
                                 const shape4& in, const conv_params& p, const map_window& win,
                                 const float* x, const float* dy, float* dw, float* db,
                                 bool accumulate) {
  const char* kernel = "conv_backward_filter_window";
  run_backward_filter(kernel, ctx, cfg, make_window_geom(kernel, in, p, win), x, dy, dw, db,
                      accumulate);
}

}  // namespace memweave::kernels::host
