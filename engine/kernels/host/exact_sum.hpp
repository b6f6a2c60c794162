// An exact sum of floats, whose value does not depend on the order of the additions: BN's
// per-channel statistics (bn.hpp) add the same values in a different order when a batch runs
// whole, in micro-batches (TSPLIT) or tile by tile over the image (tiled segments), and an
// exact sum gives all three the same bits. Squares are added exactly too (add_squares), so
// that one pass over x gives both sums of the variance, and exact_variance combines them
// without the cancellation that E[x^2] - E[x]^2 suffers in floating point.
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
#include <limits>

namespace memweave::kernels::host {

class exact_sum {
 public:
  /// The most floats a sum holds exactly (each adds less than 2^27 to a 64-bit group).
  static constexpr std::int64_t k_max_terms = std::int64_t{1} << 36;
  /// The most values add_squares takes exactly (two floats each).
  static constexpr std::int64_t k_max_squares = k_max_terms / 2;

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

  /// Adds the exact sum `other` holds (its additions counting toward k_max_terms here).
  void add(const exact_sum& other) noexcept {
    for (std::size_t g = 0; g < groups_.size(); ++g) groups_[g] += other.groups_[g];
    special_ += other.special_;
  }

  /// v^2 (exact in double: 48 bits) as two floats whose sum it is: its float rounding and the
  /// rest. Exact but where the rest falls below float's subnormals (|v| < 2^-50 or so: then a
  /// fixed rounding of the square, so a sum of them still does not depend on the order); the
  /// rest 0 where the square is beyond float's range (+infinity) or v is NaN.
  struct square_parts {
    float high = 0.0f, low = 0.0f;
    explicit square_parts(float v) noexcept {
      const auto d = static_cast<double>(v);
      const double square = d * d;
      if (square > static_cast<double>(std::numeric_limits<float>::max())) {
        high = std::numeric_limits<float>::infinity();  // (a cast would be undefined)
        return;
      }
      high = static_cast<float>(square);                                 // NaN stays NaN
      if (high - high == 0.0f) low = static_cast<float>(square - high);  // finite
    }
  };

  /// Adds value(i)^2 for i in [0, n) exactly (square_parts: two floats each, toward
  /// k_max_terms), as add_each does value(i).
  template <class ValueAt>
  void add_squares(std::int64_t n, ValueAt&& value) noexcept {
    std::array<std::int64_t, 64> other{};
    for (std::int64_t i = 0; i < n; ++i) {
      const square_parts p(value(i));
      add_to(groups_, p.high);
      add_to(other, p.low);
    }
    for (std::size_t g = 0; g < groups_.size(); ++g) groups_[g] += other[g];
  }

  /// The sum, rounded to a double.
  double value() const noexcept;

  /// (m * squares - sum^2) / m^2 where `sum` holds m values x and `squares` their squares
  /// (add_squares): the biased variance of the x, computed exactly from the two exact sums
  /// and rounded once to a double (within an ulp or so; 0 where the squares were rounded, see
  /// add_squares, below the sum's square). Any order of the additions gives the same bits.
  /// +infinity where a square overflowed float, NaN where the x were not all finite.
  static double variance(const exact_sum& sum, const exact_sum& squares, std::int64_t m) noexcept;

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
