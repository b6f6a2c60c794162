// exact_sum: the same bits for any order of the additions, exact where float or double sums
// lose digits, signs, extremes and non-finite values.
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
  std::vector<double> mean(2);
  EXPECT_NO_THROW(bn_mean(2, exact_sum::k_max_terms, sums.data(), mean.data()));
  try {
    bn_mean(2, exact_sum::k_max_terms + 1, sums.data(), mean.data());
    ADD_FAILURE() << "accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("68719476737 values per channel"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace memweave::kernels::host
