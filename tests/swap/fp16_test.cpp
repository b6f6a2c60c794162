// The fp32 <-> fp16 conversions of compressed swaps: IEEE binary16 round to nearest even,
// overflow to inf, subnormals, NaN; every fp16 value survives fp16 -> fp32 -> fp16; the
// round trip of an fp32 value is within half an fp16 ulp; in-place forms equal the others;
// and, where the compiler has _Float16, the same bits as its conversions.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "memweave/swap/fp16.hpp"

namespace memweave {
namespace {

TEST(fp16, known_values_round_to_nearest_even) {
  EXPECT_EQ(fp16_from_float(1.0f), 0x3c00);
  EXPECT_EQ(fp16_from_float(-2.0f), 0xc000);
  EXPECT_EQ(fp16_from_float(0.0f), 0x0000);
  EXPECT_EQ(fp16_from_float(-0.0f), 0x8000);
  EXPECT_EQ(fp16_from_float(65504.0f), 0x7bff) << "the largest finite fp16";
  EXPECT_EQ(fp16_from_float(65519.0f), 0x7bff) << "below the midpoint to 65536: rounds down";
  EXPECT_EQ(fp16_from_float(65520.0f), 0x7c00) << "the midpoint ties to even: inf";
  EXPECT_EQ(fp16_from_float(1e9f), 0x7c00);
  EXPECT_EQ(fp16_from_float(1.0f + 0x1p-11f), 0x3c00) << "a tie rounds to the even mantissa";
  EXPECT_EQ(fp16_from_float(1.0f + 3 * 0x1p-11f), 0x3c02) << "a tie rounds to the even mantissa";
  EXPECT_EQ(fp16_from_float(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01) << "above the tie: up";
  EXPECT_EQ(fp16_from_float(0x1p-14f), 0x0400) << "the smallest normal";
  EXPECT_EQ(fp16_from_float(0x1p-24f), 0x0001) << "the smallest subnormal";
  EXPECT_EQ(fp16_from_float(0x1p-25f), 0x0000) << "half the smallest subnormal ties to 0";
  EXPECT_EQ(fp16_from_float(0x1.8p-25f), 0x0001);
  EXPECT_EQ(fp16_from_float(0x1.ffcp-15f), 0x0400) << "the largest subnormal's carry: normal";
  EXPECT_EQ(fp16_from_float(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(fp16_from_float(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(fp16_from_float(-std::numeric_limits<float>::infinity()), 0xfc00);
  const std::uint16_t nan = fp16_from_float(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0) << "NaN stays NaN";
  // A NaN whose payload lies only in the bits fp16 drops still converts to a NaN.
  EXPECT_NE(fp16_from_float(std::bit_cast<float>(0x7f800001u)) & 0x03ff, 0);
}

TEST(fp16, every_fp16_value_survives_fp32_and_back) {
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    const float x = float_from_fp16(static_cast<std::uint16_t>(h));
    ASSERT_EQ(fp16_from_float(x), h) << "fp16 bits " << h;
  }
  EXPECT_EQ(float_from_fp16(0x0001), 0x1p-24f);
  EXPECT_EQ(float_from_fp16(0x03ff), 0x1.ff8p-15f);
  EXPECT_EQ(float_from_fp16(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(float_from_fp16(0xfc00)));
}

TEST(fp16, a_round_trip_is_within_half_an_ulp_and_the_encode_measures_it) {
  std::vector<float> values;
  std::uint32_t x = 12345;
  for (int i = 0; i < 200000; ++i) {
    x = x * 1664525u + 1013904223u;
    const float m = 1.0f + static_cast<float>(x >> 9) / static_cast<float>(1u << 23);
    values.push_back(std::ldexp((x & 1u) ? -m : m, static_cast<int>((x >> 3) % 49) - 34));
  }
  std::vector<std::uint16_t> half(values.size());
  const double measured = fp16_encode(half.data(), values.data(), values.size());
  double worst = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float v = values[i], back = float_from_fp16(half[i]);
    const double e = std::fabs(v - back) / std::max(std::fabs(v), fp16_error_floor);
    ASSERT_LE(e, fp16_max_relative_error) << v << " -> " << back;
    worst = std::max(worst, e);
  }
  EXPECT_EQ(measured, worst);
  EXPECT_GT(measured, fp16_max_relative_error / 2) << "200k random values come near the bound";
  const float big[] = {1.0f, 70000.0f};
  std::uint16_t out[2];
  EXPECT_TRUE(std::isinf(fp16_encode(out, big, 2))) << "an overflow is reported as inf";
}

TEST(fp16, in_place_conversions_equal_out_of_place_ones) {
  std::vector<float> values(1001);
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = static_cast<float>(i) * 0.37f - 150.0f;
  }
  std::vector<std::uint16_t> half(values.size());
  fp16_encode(half.data(), values.data(), values.size());
  std::vector<float> buffer = values;  // encode in place, then decode in place
  fp16_encode(reinterpret_cast<std::uint16_t*>(buffer.data()), buffer.data(), buffer.size());
  EXPECT_EQ(std::memcmp(buffer.data(), half.data(), half.size() * 2), 0);
  fp16_decode(buffer.data(), reinterpret_cast<const std::uint16_t*>(buffer.data()), buffer.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(buffer[i], float_from_fp16(half[i])) << i;
  }
}

#if defined(__FLT16_MAX__)
TEST(fp16, matches_the_compilers_float16_on_sampled_fp32_bits) {
  // A stride prime to 2^32 samples every exponent, both signs, NaN and inf patterns.
  for (std::uint64_t b = 0; b < (std::uint64_t{1} << 32); b += 4093) {
    const float x = std::bit_cast<float>(static_cast<std::uint32_t>(b));
    const std::uint16_t ours = fp16_from_float(x);
    const auto theirs = std::bit_cast<std::uint16_t>(static_cast<_Float16>(x));
    if (std::isnan(x)) {
      ASSERT_TRUE((ours & 0x7c00) == 0x7c00 && (ours & 0x3ff) != 0) << "bits " << b;
      continue;
    }
    ASSERT_EQ(ours, theirs) << "fp32 bits " << b << " (" << x << ")";
  }
}
#endif

}  // namespace
}  // namespace memweave
