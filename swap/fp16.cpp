// fp32 <-> fp16 by bit manipulation (see the header for the rounding and overflow rules).
// Elements are loaded and stored through std::memcpy: the in-place forms alias one buffer as
// both float and uint16_t, which typed loads would not allow.
#include "memweave/swap/fp16.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

namespace memweave {

// Without branches on the value (the branchy form took 5.7 ns a value, 1.4 now; the same
// bits for all 2^32 fp32 patterns, checked exhaustively against it when it was replaced).
std::uint16_t fp16_from_float(float x) noexcept {
  const auto bits = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t a = bits & 0x7fffffffu;
  // A normal result (|x| >= 2^-14): the exponent rebiased, the 13 dropped mantissa bits
  // rounded to nearest even (a carry runs into the exponent, from 65520 on up to inf), and
  // anything larger clamped to inf.
  const std::uint32_t r = a - 0x38000000u;
  const std::uint32_t normal =
      std::min<std::uint32_t>((r + 0xfffu + ((r >> 13) & 1u)) >> 13, 0x7c00u);
  // A subnormal one: |x| + 0.5 rounds |x| to a multiple of 2^-24 (the fp32 ulp at 0.5) to
  // nearest even, as the addition rounds, and that multiple is the fp16. Below 2^-25 it is 0,
  // fp32 subnormals too (with the FPU flushing them or not), and the largest subnormal's
  // carry gives the smallest normal. Default rounding is assumed, as everywhere.
  const std::uint32_t subnormal =
      std::bit_cast<std::uint32_t>(std::bit_cast<float>(a) + 0.5f) - 0x3f000000u;
  // inf, or NaN with the payload's top 10 bits (a quiet 0x200 where those are all zero).
  const std::uint32_t mantissa = a & 0x7fffffu, payload = mantissa >> 13;
  const std::uint32_t special = 0x7c00u | (mantissa == 0 ? 0u : payload != 0 ? payload : 0x200u);
  const std::uint32_t h = a >= 0x7f800000u ? special : a >= 0x38800000u ? normal : subnormal;
  return static_cast<std::uint16_t>(sign | h);
}

float float_from_fp16(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t rest = static_cast<std::uint32_t>(h & 0x7fffu) << 13;
  const std::uint32_t exponent = h & 0x7c00u;
  // Normal: the exponent rebiased in fp32's place. Subnormal: its mantissa times 2^-24, an
  // exact product and a normal fp32 (no denormal operand for an FPU that flushes them).
  // inf and NaN: fp32's all-ones exponent, the payload kept.
  const std::uint32_t normal = rest + (112u << 23);
  const std::uint32_t subnormal =
      std::bit_cast<std::uint32_t>(static_cast<float>(h & 0x3ffu) * 0x1p-24f);
  const std::uint32_t bits = exponent == 0x7c00u ? (0x7f800000u | rest)
                             : exponent == 0     ? subnormal
                                                 : normal;
  return std::bit_cast<float>(sign | bits);
}

double fp16_encode(std::uint16_t* dst, const float* src, std::size_t count) noexcept {
  auto* out = reinterpret_cast<unsigned char*>(dst);
  const auto* in = reinterpret_cast<const unsigned char*>(src);
  float worst = 0.0f;
  for (std::size_t i = 0; i < count; ++i) {
    float x;
    std::memcpy(&x, in + 4 * i, sizeof x);  // read element i before its bytes may be written
    const std::uint16_t h = fp16_from_float(x);
    std::memcpy(out + 2 * i, &h, sizeof h);
    // Branch-free: for an infinite or NaN x the error is NaN, which the comparison skips;
    // an overflow (finite x, infinite fp16) gives +inf.
    const float error =
        std::fabs(x - float_from_fp16(h)) / std::max(std::fabs(x), fp16_error_floor);
    worst = error > worst ? error : worst;
  }
  return worst;
}

void fp16_decode(float* dst, const std::uint16_t* src, std::size_t count) noexcept {
  auto* out = reinterpret_cast<unsigned char*>(dst);
  const auto* in = reinterpret_cast<const unsigned char*>(src);
  for (std::size_t i = count; i-- > 0;) {
    std::uint16_t h;
    std::memcpy(&h, in + 2 * i, sizeof h);  // read element i before its bytes may be written
    const float x = float_from_fp16(h);
    std::memcpy(out + 4 * i, &x, sizeof x);
  }
}

}  // namespace memweave
