// Counter-based randomness of the engine: values are pure functions of a 64-bit key, so a
// parameter's initial value or a synthetic image does not depend on what was drawn before
// (every policy, every run, sees the same numbers).
#pragma once

#include <cstdint>

namespace memweave::detail {

/// The splitmix64 finalizer: a well-mixed 64-bit hash of `x`.
constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Uniform in [-1, 1) from `key` (53 bits of mix64(key)).
constexpr double symmetric_unit(std::uint64_t key) noexcept {
  return static_cast<double>(mix64(key) >> 11) * 0x1.0p-52 - 1.0;
}

}  // namespace memweave::detail
