// The verify-mode checksum: four independent 64-bit lanes over 32-byte stripes, then the
// tail word by word and byte by byte, then a final avalanche. Each lane step
// (lane + word * k2, rotated, times k1) is a bijection of the word for a fixed lane, and
// every later step is a bijection of the lane, so a change confined to one aligned 8-byte
// word always changes the result; other changes collide with probability about 2^-64.
// Pure function, thread-safe; runs on stream workers and the watcher thread.
#include <bit>
#include <cstdint>
#include <cstring>

#include "memweave/swap/transfer_engine.hpp"

namespace memweave {
namespace {

constexpr std::uint64_t k1 = 0x9E3779B185EBCA87ull;  // odd: multiplication is invertible
constexpr std::uint64_t k2 = 0xC2B2AE3D27D4EB4Full;
constexpr std::uint64_t k3 = 0x165667B19E3779F9ull;

inline std::uint64_t load64(const unsigned char* p) noexcept {
  std::uint64_t w;
  std::memcpy(&w, p, sizeof w);  // unaligned-safe; compiles to one load
  return w;
}

inline std::uint64_t step(std::uint64_t lane, std::uint64_t word) noexcept {
  return std::rotl(lane + word * k2, 31) * k1;
}

}  // namespace

std::uint64_t transfer_checksum(const void* data, std::size_t bytes) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t a = k1 + k2, b = k2, c = 0, d = 0 - k1;
  std::size_t i = 0;
  for (; i + 32 <= bytes; i += 32) {
    a = step(a, load64(p + i));
    b = step(b, load64(p + i + 8));
    c = step(c, load64(p + i + 16));
    d = step(d, load64(p + i + 24));
  }
  std::uint64_t h = std::rotl(a, 1) + std::rotl(b, 7) + std::rotl(c, 12) + std::rotl(d, 18);
  h += static_cast<std::uint64_t>(bytes);
  for (; i + 8 <= bytes; i += 8) h = std::rotl(h ^ step(0, load64(p + i)), 27) * k1 + k3;
  for (; i < bytes; ++i) h = std::rotl(h ^ (p[i] * k3), 11) * k1;
  h ^= h >> 33;
  h *= k2;
  h ^= h >> 29;
  h *= k3;
  h ^= h >> 32;
  return h;
}

}  // namespace memweave
