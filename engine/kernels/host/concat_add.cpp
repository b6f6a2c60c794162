// Host CONCAT and ADD: copies and element-wise sums, each output element one fixed
// expression. Thread safety: none of its own; concurrent calls must not share outputs.
#include "engine/kernels/host/concat_add.hpp"

#include <cstring>
#include <vector>

#include "engine/kernels/host/parallel.hpp"
#include "engine/kernels/kernel_checks.hpp"

namespace memweave::kernels::host {

using std::int64_t;

namespace {

constexpr int64_t k_grain = 1 << 14;

}  // namespace

void concat_forward(const kernel_context& ctx, std::span<const shape4> in,
                    std::span<const float* const> x, float* y) {
  const char* kernel = "concat_forward";
  const std::vector<int64_t> off = checks::check_concat_forward(kernel, in, x, y);
  const int64_t k = static_cast<int64_t>(in.size()), hw = in[0].h * in[0].w, ctotal = off.back();
  detail::parallel_for(ctx, in[0].n * k, detail::grain_for(hw * 4), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t n = t / k, i = t % k;
      const int64_t count = in[static_cast<std::size_t>(i)].c * hw;
      std::memcpy(y + (n * ctotal + off[static_cast<std::size_t>(i)]) * hw,
                  x[static_cast<std::size_t>(i)] + n * count,
                  static_cast<std::size_t>(count) * sizeof(float));
    }
  });
}

void concat_backward(const kernel_context& ctx, std::span<const shape4> in, const float* dy,
                     std::span<const grad_out> dx) {
  const char* kernel = "concat_backward";
  const std::vector<int64_t> off = checks::check_concat_backward(kernel, in, dx.size(), dy);
  const int64_t k = static_cast<int64_t>(in.size()), hw = in[0].h * in[0].w, ctotal = off.back();
  detail::parallel_for(ctx, in[0].n * k, detail::grain_for(hw * 4), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t n = t / k;
      const auto i = static_cast<std::size_t>(t % k);
      if (dx[i].data == nullptr) continue;
      const int64_t count = in[i].c * hw;
      const float* src = dy + (n * ctotal + off[i]) * hw;
      float* dst = dx[i].data + n * count;
      if (dx[i].accumulate) {
        for (int64_t j = 0; j < count; ++j) dst[j] += src[j];
      } else {
        std::memcpy(dst, src, static_cast<std::size_t>(count) * sizeof(float));
      }
    }
  });
}

void add_forward(const kernel_context& ctx, const shape4& s, std::span<const float* const> x,
                 float* y) {
  const char* kernel = "add_forward";
  checks::check_add_forward(kernel, s, x, y);
  detail::parallel_for(ctx, s.count(), k_grain, [&](int64_t lo, int64_t hi) {
    for (int64_t j = lo; j < hi; ++j) {
      float v = x[0][j];
      for (std::size_t i = 1; i < x.size(); ++i) v += x[i][j];
      y[j] = v;
    }
  });
}

void add_backward(const kernel_context& ctx, const shape4& s, const float* dy,
                  std::span<const grad_out> dx) {
  const char* kernel = "add_backward";
  detail::check_tensors(kernel, s, {{"dy", dy}});
  for (const grad_out& g : dx) {
    if (g.data == nullptr) continue;
    if (g.data == dy && !g.accumulate) continue;  // the gradient is dy itself: already there
    float* d = g.data;
    const bool acc = g.accumulate;
    detail::parallel_for(ctx, s.count(), k_grain, [&](int64_t lo, int64_t hi) {
      if (acc) {
        for (int64_t j = lo; j < hi; ++j) d[j] += dy[j];
      } else {
        std::memcpy(d + lo, dy + lo, static_cast<std::size_t>(hi - lo) * sizeof(float));
      }
    });
  }
}

}  // namespace memweave::kernels::host
