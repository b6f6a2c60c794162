// Host activations: element-wise, each element one fixed expression, so any partition
// gives the same bits. In-place use is safe because element i reads only element i.
// Thread safety: none of its own; concurrent calls must not share outputs.
#include "engine/kernels/host/act.hpp"

#include <cmath>

#include "engine/kernels/host/parallel.hpp"

namespace memweave::kernels::host {

using std::int64_t;

namespace {
constexpr int64_t k_grain = 1 << 14;
}

void act_forward(const kernel_context& ctx, const shape4& s, const act_params& p, const float* x,
                 float* y) {
  const char* kernel = "act_forward";
  detail::check_tensors(kernel, s, {{"x", x}, {"y", y}});
  const act_mode mode = p.mode;
  detail::parallel_for(ctx, s.count(), k_grain, [&](int64_t lo, int64_t hi) {
    if (mode == act_mode::relu) {
      for (int64_t i = lo; i < hi; ++i) y[i] = relu_value(x[i]);
    } else if (mode == act_mode::tanh) {
      for (int64_t i = lo; i < hi; ++i) y[i] = tanh_value(x[i]);
    } else {
      for (int64_t i = lo; i < hi; ++i) y[i] = sigmoid_value(x[i]);
    }
  });
}

void act_backward(const kernel_context& ctx, const shape4& s, const act_params& p, const float* y,
                  const float* dy, float* dx, bool accumulate) {
  const char* kernel = "act_backward";
  detail::check_tensors(kernel, s, {{"y", y}, {"dy", dy}, {"dx", dx}});
  const act_mode mode = p.mode;
  detail::parallel_for(ctx, s.count(), k_grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      // The cuda backward kernel computes the same expressions in the same order.
      const float g = mode == act_mode::relu   ? (y[i] > 0.0f ? dy[i] : 0.0f)
                      : mode == act_mode::tanh ? dy[i] * (1.0f - y[i] * y[i])
                                               : dy[i] * (y[i] * (1.0f - y[i]));
      dx[i] = accumulate ? dx[i] + g : g;
    }
  });
}

}  // namespace memweave::kernels::host
