// Overflow-checked arithmetic for sizes computed from user input (shapes, byte counts):
// every product or sum that a user's number reaches goes through these, so that a size
// larger than the type holds is an error naming what overflowed instead of a wrapped value.
#pragma once

#include <cstdint>
#include <optional>
#include <type_traits>

namespace memweave {

/// a * b, or nullopt when the product does not fit T.
template <class T>
constexpr std::optional<T> checked_mul(T a, T b) noexcept {
  static_assert(std::is_integral_v<T>);
  T r{};
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

/// a + b, or nullopt when the sum does not fit T.
template <class T>
constexpr std::optional<T> checked_add(T a, T b) noexcept {
  static_assert(std::is_integral_v<T>);
  T r{};
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

/// The most bytes one tensor (or one size a user asks for) may have: 2^47, the user address
/// space of x86-64 and AArch64. A larger size cannot be allocated on any device, and sums of
/// up to 2^16 of them still fit 64 bits.
inline constexpr std::uint64_t k_max_tensor_bytes = std::uint64_t{1} << 47;

}  // namespace memweave
