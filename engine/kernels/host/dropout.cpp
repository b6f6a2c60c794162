// Host dropout. The mask is a pure function of (seed, index): no generator state, so any
// partition and any recomputation give the same mask. The hash is two rounds of the
// splitmix64 finalizer (seed first, then the index added), a well-mixed 64-bit function.
// Thread safety: none of its own; concurrent calls must not share outputs.
#include "engine/kernels/host/dropout.hpp"

#include <cmath>

#include "engine/kernels/host/parallel.hpp"
#include "engine/kernels/kernel_checks.hpp"

namespace memweave::kernels::host {

using std::int64_t;

namespace {

constexpr int64_t k_grain = 1 << 14;

constexpr std::uint64_t mix64(std::uint64_t z) noexcept {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

float dropout_uniform(std::uint64_t seed, std::int64_t index) noexcept {
  const std::uint64_t h = mix64(mix64(seed) + static_cast<std::uint64_t>(index));
  return static_cast<float>(h >> 40) * 0x1.0p-24f;
}

void dropout_forward(const kernel_context& ctx, const shape4& s, const dropout_params& p,
                     std::uint64_t seed, const float* x, float* y, float* mask,
                     std::int64_t first_index) {
  const char* kernel = "dropout_forward";
  detail::check_tensors(kernel, s, {{"x", x}, {"y", y}, {"mask", mask}});
  checks::check_dropout(kernel, p);
  const float ratio = p.ratio;
  const float keep = 1.0f / (1.0f - ratio);
  const std::uint64_t seed_hash = mix64(seed);
  detail::parallel_for(ctx, s.count(), k_grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const std::uint64_t h = mix64(seed_hash + static_cast<std::uint64_t>(first_index + i));
      const float u = static_cast<float>(h >> 40) * 0x1.0p-24f;
      const float m = u >= ratio ? keep : 0.0f;
      mask[i] = m;
      y[i] = x[i] * m;
    }
  });
}

void dropout_backward(const kernel_context& ctx, const shape4& s, const float* mask,
                      const float* dy, float* dx, bool accumulate) {
  const char* kernel = "dropout_backward";
  detail::check_tensors(kernel, s, {{"mask", mask}, {"dy", dy}, {"dx", dx}});
  detail::parallel_for(ctx, s.count(), k_grain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const float g = dy[i] * mask[i];
      dx[i] = accumulate ? dx[i] + g : g;
    }
  });
}

}  // namespace memweave::kernels::host
