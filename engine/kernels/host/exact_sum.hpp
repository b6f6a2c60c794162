// An exact sum of floats, whose value does not depend on the order of the additions: BN's
// per-channel statistics (bn.hpp) add the same values in a different order when a batch runs
// whole, in micro-batches (TSPLIT) or tile by tile over the image (tiled segments), and an
// exact sum gives all three the same bits. Squares are summed exactly too (exact_square_sum),
// so that one pass over x gives both sums of the variance, and exact_sum::variance combines
// them without the cancellation that E[x^2] - E[x]^2 suffers in floating point.
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

class exact_square_sum;

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

  /// Adds the exact sum `other` holds (its additions counting toward k_max_terms here).
  void add(const exact_sum& other) noexcept {
    for (std::size_t g = 0; g < groups_.size(); ++g) groups_[g] += other.groups_[g];
    special_ += other.special_;
  }

  /// The sum, rounded to a double.
  double value() const noexcept;

  /// (m * squares - sum^2) / m^2 where `sum` holds m values x and `squares` their squares:
  /// the biased variance of the x, computed exactly from the two exact sums (integers) and
  /// rounded once to a double (within an ulp or so). Any order of the additions gives the
  /// same bits. NaN where the x were not all finite.
  static double variance(const exact_sum& sum, const exact_square_sum& squares,
                         std::int64_t m) noexcept;

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

/// An exact sum of the squares of floats, for the variance beside an exact_sum of the floats
/// (exact_sum::variance): one pass over the values gives both. The square of a float m 2^(e -
/// 150) (m its 24-bit integer, e its biased exponent, 1 for subnormals) is m^2 2^(2e - 300);
/// the sum keeps one unsigned 128-bit integer per group of four exponents of the float, to
/// which each square adds m^2 << 2 (e mod 4) (< 2^54): integer additions, exact and order-free
/// for far more values than an exact_sum holds, over the squares' whole range (2^-298 to
/// 2^256: no square overflows or underflows). Not thread-safe, as exact_sum.
class exact_square_sum {
 public:
  /// Adds v^2 exactly (an infinity or NaN as a double, apart).
  void add(float v) noexcept {
    std::uint32_t group = 0;
    if (const std::uint64_t term = term_of(v, group); term != 0) groups_[group] += term;
  }

  /// Adds value(i)^2 for i in [0, n) exactly. Faster than add() one by one: the terms go to
  /// 64-bit groups first, two sets taking turns (consecutive values of one exponent do not
  /// wait on each other), folded into the 128-bit ones every k_block values, before a
  /// 64-bit group could overflow (k_block / 2 terms of < 2^54 each).
  template <class ValueAt>
  void add_each(std::int64_t n, ValueAt&& value) noexcept {
    std::array<std::array<std::uint64_t, 64>, 2> part{};
    const auto put = [&](std::size_t set, float v) {
      std::uint32_t group = 0;
      part[set][group] += term_of(v, group);
    };
    for (std::int64_t b = 0; b < n; b += k_block) {
      const std::int64_t e = n - b < k_block ? n : b + k_block;
      std::int64_t i = b;
      for (; i + 1 < e; i += 2) {
        put(0, value(i));
        put(1, value(i + 1));
      }
      if (i < e) put(0, value(i));
      for (auto& set : part) {
        for (std::size_t g = 0; g < groups_.size(); ++g) groups_[g] += set[g];
        set.fill(0);
      }
    }
  }

  /// Adds the exact sum `other` holds.
  void add(const exact_square_sum& other) noexcept {
    for (std::size_t g = 0; g < groups_.size(); ++g) groups_[g] += other.groups_[g];
    special_ += other.special_;
  }

 private:
  friend class exact_sum;  // variance() reads the groups
  static constexpr std::int64_t k_block = 2048;

  /// v^2's term and its group; 0 (and v^2 added to special_) for an infinity or NaN.
  std::uint64_t term_of(float v, std::uint32_t& group) noexcept {
    const auto bits = std::bit_cast<std::uint32_t>(v);
    const std::uint32_t biased = (bits >> 23) & 0xffu;
    if (biased == 0xffu) {
      special_ += static_cast<double>(v) * static_cast<double>(v);  // +infinity or NaN
      return 0;
    }
    const std::uint32_t fraction = bits & 0x7fffffu;
    const std::uint32_t e = biased == 0 ? 1 : biased;
    const std::uint64_t m = biased == 0 ? fraction : fraction | 0x800000u;
    group = e >> 2;
    return (m * m) << (2 * (e & 3u));
  }

  std::array<unsigned __int128, 64> groups_{};  ///< group g weighs 2^(8g - 300)
  double special_ = 0.0;
};

}  // namespace memweave::kernels::host
