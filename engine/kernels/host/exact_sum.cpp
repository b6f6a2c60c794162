// exact_sum's rounding (exact_sum.hpp): the groups are combined into 32-bit digits, carried
// into a unique form (every digit but the top one in [0, 2^32)), and only those digits are
// read, so value() gives the same bits for any order of the additions.
#include "engine/kernels/host/exact_sum.hpp"

#include <cmath>

namespace memweave::kernels::host {

namespace {

// 64 groups of four exponents: 256 bits of weight, plus the groups' own 63 bits and room for
// the carries.
constexpr std::size_t k_digits = 12;
using digits = std::array<std::int64_t, k_digits>;

void carry(digits& d) {
  for (std::size_t k = 0; k + 1 < k_digits; ++k) {
    const std::int64_t c = d[k] >> 32;  // floor division: the remainder is >= 0
    d[k] -= c * (std::int64_t{1} << 32);
    d[k + 1] += c;
  }
}

}  // namespace

double exact_sum::value() const noexcept {
  if (special_ != 0.0) return special_;  // an infinity, or NaN
  digits d{};
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g] == 0) continue;
    // groups_[g] * 2^(4g) (< 2^91): digit g/8, the next, and the signed rest in the third.
    __int128 t = static_cast<__int128>(groups_[g]) * (__int128{1} << (4 * (g % 8)));
    const std::size_t k = g / 8;
    for (std::size_t j = k; j < k + 2; ++j) {
      const auto low = static_cast<std::int64_t>(static_cast<std::uint64_t>(t) & 0xffffffffu);
      d[j] += low;
      t = (t - low) / (__int128{1} << 32);  // exact: t - low is a multiple of 2^32
    }
    d[k + 2] += static_cast<std::int64_t>(t);
  }
  carry(d);
  // A negative sum carries to a negative top digit over digits of 2^32 - 1: take the
  // magnitude, so that the digits below the first nonzero one add only lower bits.
  const bool negative = d.back() < 0;
  if (negative) {
    for (std::int64_t& x : d) x = -x;
    carry(d);
  }
  double v = 0.0;
  for (std::size_t k = k_digits; k-- > 0;) {
    if (d[k] != 0) v += std::ldexp(static_cast<double>(d[k]), static_cast<int>(32 * k) - 150);
  }
  return negative ? -v : v;
}

}  // namespace memweave::kernels::host
