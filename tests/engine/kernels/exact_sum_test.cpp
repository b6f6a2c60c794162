// exact_sum: the same bits for any order of the additions, exact where float or double sums
// lose digits, signs, extremes and non-finite values; the variance from the sums of x and x^2
// exact where one pass in floating point cancels.
#include "engine/kernels/host/exact_sum.hpp"
#include "engine/kernels/host/bn.hpp"
#include "memweave/core/error.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace memweave::kernels::host {
namespace {

double sum_of(const std::vector<float>& v) {
  exact_sum s;
  for (const float x : v) s.add(x);
  return s.value();
}

TEST(exact_sum, any_order_gives_the_same_bits) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-40, 40);
  std::vector<float> v(5000);
  for (float& x : v) x = std::ldexp(mantissa(rng), exponent(rng));
  const double first = sum_of(v);
  double naive_min = first, naive_max = first;
  for (int i = 0; i < 5; ++i) {
    std::shuffle(v.begin(), v.end(), rng);
    EXPECT_EQ(std::bit_cast<std::uint64_t>(sum_of(v)), std::bit_cast<std::uint64_t>(first));
    double naive = 0;
    for (const float x : v) naive += x;
    naive_min = std::min(naive_min, naive);
    naive_max = std::max(naive_max, naive);
  }
  EXPECT_LT(naive_min, naive_max);  // the orders do change a double sum
}

TEST(exact_sum, keeps_what_float_and_double_sums_lose) {
  EXPECT_EQ(sum_of({1e30f, 1.0f, -1e30f}), 1.0);
  EXPECT_EQ(sum_of({std::ldexp(1.0f, 100), std::ldexp(1.0f, -100), -std::ldexp(1.0f, 100)}),
            std::ldexp(1.0, -100));
  EXPECT_EQ(sum_of({-3.0f, 1.0f}), -2.0);
  EXPECT_EQ(sum_of({-0.5f, -0.25f, 0.125f}), -0.625);
  EXPECT_EQ(sum_of({}), 0.0);
  EXPECT_EQ(sum_of({-0.0f, 0.0f}), 0.0);
  const float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(sum_of({tiny, tiny, tiny}), 3.0 * tiny);
  EXPECT_EQ(sum_of({std::numeric_limits<float>::min(), -tiny}),
            static_cast<double>(std::numeric_limits<float>::min()) - tiny);
  const float big = std::numeric_limits<float>::max();
  EXPECT_EQ(sum_of({big, big, -big}), static_cast<double>(big));
  EXPECT_EQ(sum_of({big, big}), 2.0 * big);  // beyond float, not beyond the sum
  // Many additions of the largest mantissa: a group's integer grows past 2^32.
  exact_sum s;
  const float almost_two = std::nextafter(2.0f, 0.0f);
  for (int i = 0; i < 100000; ++i) s.add(almost_two);
  EXPECT_EQ(s.value(), static_cast<double>(almost_two) * 100000);
}

TEST(exact_sum, non_finite_values_sum_as_doubles) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(sum_of({1.0f, inf, 2.0f}), std::numeric_limits<double>::infinity());
  EXPECT_EQ(sum_of({-inf, 1.0f}), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(sum_of({inf, -inf})));
  EXPECT_TRUE(std::isnan(sum_of({1.0f, std::nanf("")})));
}

TEST(exact_sum, bn_refuses_more_values_per_channel_than_the_sums_hold) {
  const std::vector<exact_sum> sums(2);
  const std::vector<exact_square_sum> squares(2);
  std::vector<float> mean(2), invstd(2);
  const bn_params p;
  EXPECT_NO_THROW(bn_finish_statistics(2, exact_sum::k_max_terms, p, sums.data(), squares.data(),
                                       mean.data(), invstd.data()));
  try {
    bn_finish_statistics(2, exact_sum::k_max_terms + 1, p, sums.data(), squares.data(), mean.data(),
                         invstd.data());
    ADD_FAILURE() << "accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("68719476737 values per channel"), std::string::npos)
        << e.what();
  }
}

// The biased variance of v from one pass of the two sums.
double variance_of(const std::vector<float>& v) {
  exact_sum sum;
  exact_square_sum squares;
  sum.add_each(static_cast<std::int64_t>(v.size()), [&](std::int64_t i) { return v[i]; });
  squares.add_each(static_cast<std::int64_t>(v.size()), [&](std::int64_t i) { return v[i]; });
  return exact_sum::variance(sum, squares, static_cast<std::int64_t>(v.size()));
}

TEST(exact_sum, variance_is_exact_where_one_pass_in_double_cancels) {
  // 2^20 + {-1, 0, 1, 2}: mean 2^20 + 1/2, variance 5/4 exactly. E[x^2] - E[x]^2 in double
  // loses it: the squares are 2^40, their sum's last bit 2^-12 of the variance's scale away.
  const float big = std::ldexp(1.0f, 20);
  const std::vector<float> v = {big - 1, big, big + 1, big + 2};
  EXPECT_EQ(variance_of(v), 1.25);
  // The same far out: 2^40 + k 2^17 (floats are exact there), variance 1.25 * 2^34.
  const float far = std::ldexp(1.0f, 40), step = std::ldexp(1.0f, 17);
  EXPECT_EQ(variance_of({far - step, far, far + step, far + 2 * step}), std::ldexp(1.25, 34));
  // Constant values: exactly 0, whatever their size.
  EXPECT_EQ(variance_of(std::vector<float>(1000, 3.1f)), 0.0);
  EXPECT_EQ(variance_of(std::vector<float>(7, -1e15f)), 0.0);
  EXPECT_EQ(variance_of(std::vector<float>(7, 1e30f)), 0.0);
  EXPECT_EQ(variance_of({}), 0.0);
  // Negative values, tiny ones whose squares fall below float's range, the smallest
  // subnormal, huge ones whose squares exceed it: all exact.
  EXPECT_EQ(variance_of({-3.0f, -1.0f}), 1.0);
  const float small = std::ldexp(1.0f, -60);
  EXPECT_EQ(variance_of({small, -small}), std::ldexp(1.0, -120));
  const float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(variance_of({tiny, -tiny}), std::ldexp(1.0, -298));
  const float huge = 1e30f;
  EXPECT_EQ(variance_of({huge, -huge}), static_cast<double>(huge) * static_cast<double>(huge));
  EXPECT_EQ(variance_of(std::vector<float>(5, -std::numeric_limits<float>::max())), 0.0);
}

TEST(exact_sum, variance_has_the_same_bits_in_any_order_and_matches_two_passes) {
  std::mt19937 rng(7);
  std::normal_distribution<float> value(40.0f, 3.0f);
  std::vector<float> v(20000);
  for (float& x : v) x = value(rng);
  const double first = variance_of(v);
  // Two passes in long double (the deviations from the mean before squaring): the reference.
  long double mean = 0;
  for (const float x : v) mean += x;
  mean /= static_cast<long double>(v.size());
  long double sq = 0;
  for (const float x : v) sq += (x - mean) * (x - mean);
  const auto reference = static_cast<double>(sq / static_cast<long double>(v.size()));
  EXPECT_NEAR(first, reference, 1e-12 * reference);
  for (int i = 0; i < 3; ++i) {
    std::shuffle(v.begin(), v.end(), rng);
    EXPECT_EQ(std::bit_cast<std::uint64_t>(variance_of(v)), std::bit_cast<std::uint64_t>(first));
  }
  // Split anywhere into parts, each summed on its own accumulators and added in turn: the
  // same bits (what a micro-batch or a tile does).
  exact_sum sum;
  exact_square_sum squares;
  for (std::size_t b = 0; b < v.size(); b += 777) {
    const std::size_t e = std::min(v.size(), b + 777);
    sum.add_each(static_cast<std::int64_t>(e - b), [&](std::int64_t i) { return v[b + i]; });
    squares.add_each(static_cast<std::int64_t>(e - b), [&](std::int64_t i) { return v[b + i]; });
  }
  EXPECT_EQ(exact_sum::variance(sum, squares, static_cast<std::int64_t>(v.size())), first);
}

TEST(exact_sum, squares_added_in_blocks_equal_squares_added_one_by_one) {
  // add_each sums squares in 64-bit groups folded into 128-bit ones every block; the largest
  // terms there are the largest mantissa's square at the largest shift (exponent 127: 1.99..,
  // 127 mod 4 = 3). Thousands of them and a 0 (so that the variance is not 0) over several
  // blocks: a group that overflowed would lose 2^64 and change the variance.
  const float w = std::nextafter(2.0f, 0.0f);
  std::vector<float> v(10000, w);
  v.back() = 0.0f;
  exact_sum sum;
  exact_square_sum one_by_one;
  for (const float x : v) {
    sum.add(x);
    one_by_one.add(x);
  }
  const auto m = static_cast<std::int64_t>(v.size());
  const double expected = exact_sum::variance(sum, one_by_one, m);
  EXPECT_GT(expected, 0.0);
  EXPECT_EQ(variance_of(v), expected);
}

TEST(exact_sum, variance_of_non_finite_values_is_nan) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isnan(variance_of({1.0f, inf})));
  EXPECT_TRUE(std::isnan(variance_of({1.0f, -inf})));
  EXPECT_TRUE(std::isnan(variance_of({1.0f, std::nanf("")})));
}

}  // namespace
}  // namespace memweave::kernels::host
