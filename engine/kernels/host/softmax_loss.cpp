// Host softmax + cross-entropy.
//
// Invariants: one task per image; per-image sums in double over classes ascending; the
// per-image losses are kept and summed afterwards in image order on the calling thread.
// Thread safety: none of its own; concurrent calls must not share outputs.
#include "engine/kernels/host/softmax_loss.hpp"

#include <cmath>
#include <vector>

#include "engine/kernels/host/parallel.hpp"

namespace memweave::kernels::host {

using std::int64_t;

namespace {

// Checks every label; returns them as indices.
std::vector<int64_t> check_labels(const char* kernel, const shape4& in, const float* labels) {
  const int64_t classes = in.per_image();
  std::vector<int64_t> out(static_cast<std::size_t>(in.n));
  for (int64_t i = 0; i < in.n; ++i) {
    const float l = labels[i];
    MEMWEAVE_EXPECTS(
        std::isfinite(l) && std::floor(l) == l && l >= 0.0f && l < static_cast<float>(classes),
        std::string(kernel) + ": label of image " + std::to_string(i) + " is " + std::to_string(l) +
            "; expected a whole class index in [0, " + std::to_string(classes) + ")");
    out[static_cast<std::size_t>(i)] = static_cast<int64_t>(l);
  }
  return out;
}

}  // namespace

double softmax_loss_forward(const kernel_context& ctx, const shape4& in, const float* x,
                            const float* labels, float* y) {
  double total = 0.0;
  softmax_loss_add(ctx, in, x, labels, y, total);
  return total / static_cast<double>(in.n);
}

void softmax_loss_add(const kernel_context& ctx, const shape4& in, const float* x,
                      const float* labels, float* y, double& total) {
  const char* kernel = "softmax_loss_forward";
  detail::check_tensors(kernel, in, {{"x", x}, {"labels", labels}, {"y", y}});
  const std::vector<int64_t> label = check_labels(kernel, in, labels);
  const int64_t classes = in.per_image();
  std::vector<double> loss(static_cast<std::size_t>(in.n));
  detail::parallel_for(ctx, in.n, detail::grain_for(4 * classes), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const float* xp = x + i * classes;
      float* yp = y + i * classes;
      float mx = xp[0];
      for (int64_t j = 1; j < classes; ++j) mx = xp[j] > mx ? xp[j] : mx;
      double sum = 0.0;
      for (int64_t j = 0; j < classes; ++j) {
        yp[j] = std::exp(xp[j] - mx);
        sum += yp[j];
      }
      for (int64_t j = 0; j < classes; ++j) yp[j] = static_cast<float>(yp[j] / sum);
      const double lse = static_cast<double>(mx) + std::log(sum);
      loss[static_cast<std::size_t>(i)] = lse - xp[label[static_cast<std::size_t>(i)]];
    }
  });
  for (double l : loss) total += l;
}

void softmax_loss_backward(const kernel_context& ctx, const shape4& in, const float* y,
                           const float* labels, float* dx, bool accumulate, std::int64_t batch) {
  const char* kernel = "softmax_loss_backward";
  detail::check_tensors(kernel, in, {{"y", y}, {"labels", labels}, {"dx", dx}});
  const std::vector<int64_t> label = check_labels(kernel, in, labels);
  const int64_t classes = in.per_image();
  const float n = static_cast<float>(batch > 0 ? batch : in.n);
  detail::parallel_for(ctx, in.n, detail::grain_for(classes), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t l = label[static_cast<std::size_t>(i)];
      const float* yp = y + i * classes;
      float* dxp = dx + i * classes;
      for (int64_t j = 0; j < classes; ++j) {
        const float g = (yp[j] - (j == l ? 1.0f : 0.0f)) / n;
        dxp[j] = accumulate ? dxp[j] + g : g;
      }
    }
  });
}

}  // namespace memweave::kernels::host
