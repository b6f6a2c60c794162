// An exact sum of floats, whose value does not depend on the order of the additions: BN's
// per-channel statistics (bn.hpp) add the same values in a different order when a batch runs
// whole, in micro-batches (TSPLIT) or tile by tile over the image (tiled segments), and an
// exact sum gives all three the same bits.
//
// A float is m * 2^(e - 150) with a 24-bit integer m and its 8-bit biased exponent e (1 for
// subnormals). The sum keeps one 64-bit integer per group of four exponents, to which each
// float adds m << (e mod 4) (< 2^27): integer additions, so exact and order-free for up to
// 2^36 floats. value() combines the groups exactly and rounds once more to a double (a
// deterministic function of the exact sum, within an ulp or so). Infinities and NaN are
// summed apart, as floats in double (their sum does not depend on the order either).
// Not thread-safe: one accumulator per thread (BN: per channel).
#pragma once

#include <array>
#include <bit>
#include <cstdint>

namespace memweave::kernels::host {

class exact_sum {
 public:
  /// The most floats a sum holds exactly (each adds less than 2^27 to a 64-bit group).
  static constexpr std::int64_t k_max_terms = std::int64_t{1} << 36;

  /// Adds v exactly.
  void add(float v) noexcept { add_to(groups_, v); }

  /// Adds value(i) for i in [0, n) exactly. Faster than add() one by one: two sets of groups
  /// take turns, so that consecutive values of one exponent do not wait on each other.
  template <class ValueAt>
  void add_each(std::int64_t n, ValueAt&& value) noexcept {
    std::array<std::int64_t, 64> other{};
    std::int64_t i = 0;
    for (; i + 1 < n; i += 2) {
      add_to(groups_, value(i));
      add_to(other, value(i + 1));
    }
    if (i < n) add_to(groups_, value(i));
    for (std::size_t g = 0; g < groups_.size(); ++g) groups_[g] += other[g];
  }

  /// The sum, rounded to a double.
  double value() const noexcept;

 private:
  void add_to(std::array<std::int64_t, 64>& groups, float v) noexcept {
    const auto bits = std::bit_cast<std::uint32_t>(v);
    const std::uint32_t biased = (bits >> 23) & 0xffu;
    if (biased == 0xffu) {  // infinity or NaN
      special_ += v;
      return;
    }
    const std::uint32_t fraction = bits & 0x7fffffu;
    // Subnormals (biased 0) share exponent 1's scale, without the implicit bit.
    const std::uint32_t e = biased == 0 ? 1 : biased;
    const auto m =
        static_cast<std::int64_t>((biased == 0 ? fraction : fraction | 0x800000u) << (e & 3u));
    groups[e >> 2] += (bits >> 31) != 0 ? -m : m;
  }

  std::array<std::int64_t, 64> groups_{};  ///< group g weighs 2^(4g - 150)
  double special_ = 0.0;
};

}  // namespace memweave::kernels::host
