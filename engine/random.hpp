// Counter-based randomness of the engine: values are pure functions of a 64-bit key, so a
// parameter's initial value or a synthetic image does not depend on what was drawn before
// (every policy, every run, sees the same numbers).
#pragma once

#include <cstdint>
#include <string_view>

namespace memweave::detail {

/// The splitmix64 finalizer: a well-mixed 64-bit hash of `x`.
constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// A key for a name (FNV-1a, the same on every platform): what a tensor's initial values
/// and a layer's dropout mask are keyed by, so that they survive renumbering (a network
/// with its layers fused into tiled segments keeps their names, not their ids).
constexpr std::uint64_t name_key(std::string_view name) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

/// Uniform in [-1, 1) from `key` (53 bits of mix64(key)).
constexpr double symmetric_unit(std::uint64_t key) noexcept {
  return static_cast<double>(mix64(key) >> 11) * 0x1.0p-52 - 1.0;
}

}  // namespace memweave::detail
