// fp32 <-> fp16 by bit manipulation (see the header for the rounding and overflow rules).
// Elements are loaded and stored through std::memcpy: the in-place forms alias one buffer as
// both float and uint16_t, which typed loads would not allow.
#include "memweave/swap/fp16.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

namespace memweave {

std::uint16_t fp16_from_float(float x) noexcept {
  const auto bits = std::bit_cast<std::uint32_t>(x);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t exponent = (bits >> 23) & 0xffu;
  std::uint32_t mantissa = bits & 0x7fffffu;
  if (exponent == 0xffu) {  // inf or NaN
    if (mantissa == 0) return sign | 0x7c00u;
    const auto payload = static_cast<std::uint16_t>(mantissa >> 13);
    return sign | 0x7c00u | (payload != 0 ? payload : 0x200u);
  }
  const int e = static_cast<int>(exponent) - 127 + 15;  // the fp16 biased exponent
  if (e >= 31) return sign | 0x7c00u;                   // beyond every finite fp16: inf
  // Keep 10 mantissa bits of a normal result, or fewer of a subnormal one (shift > 13), and
  // round the rest to nearest even; a carry out of the mantissa bumps the exponent (up to
  // inf from 65520 on, or from the largest subnormal to the smallest normal).
  int shift = 13;
  std::uint32_t base = 0;
  if (e <= 0) {
    if (exponent == 0) return sign;  // fp32 zero or subnormal (< 2^-126): 0
    shift = 14 - e;
    if (shift > 24) return sign;  // below 2^-25 (half the smallest subnormal): 0
    mantissa |= 0x800000u;        // the implicit 1
  } else {
    base = static_cast<std::uint32_t>(e) << 10;
  }
  const std::uint32_t kept = mantissa >> shift;
  const std::uint32_t rest = mantissa & ((1u << shift) - 1);
  const std::uint32_t half = 1u << (shift - 1);
  const std::uint32_t up = rest > half || (rest == half && (kept & 1u) != 0) ? 1u : 0u;
  return static_cast<std::uint16_t>(sign | (base + kept + up));
}

float float_from_fp16(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  std::uint32_t bits = 0;
  if (exponent == 0x1fu) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalize (every fp16 subnormal is a normal fp32)
    exponent = 113;
    while ((mantissa & 0x400u) == 0) mantissa <<= 1, --exponent;
    bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
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
