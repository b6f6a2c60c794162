// exact_sum's rounding (exact_sum.hpp): the groups are combined into 32-bit digits, carried
// into a unique form (every digit but the top one in [0, 2^32)), and only those digits are
// read, so value() and variance() give the same bits for any order of the additions.
#include "engine/kernels/host/exact_sum.hpp"

#include <cmath>
#include <limits>

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

// The exact sum of `groups` as its magnitude in base-2^32 digits (each in [0, 2^32), the
// value sum d[k] 2^(32k - 150)) and its sign.
digits magnitude(const std::array<std::int64_t, 64>& groups, bool& negative) {
  digits d{};
  for (std::size_t g = 0; g < groups.size(); ++g) {
    if (groups[g] == 0) continue;
    // groups[g] * 2^(4g) (< 2^91): digit g/8, the next, and the signed rest in the third.
    __int128 t = static_cast<__int128>(groups[g]) * (__int128{1} << (4 * (g % 8)));
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
  negative = d.back() < 0;
  if (negative) {
    for (std::int64_t& x : d) x = -x;
    carry(d);
  }
  return d;
}

// sum d[k] 2^(32k + scale), rounded from the top digit down (a fixed function of the digits).
template <class Digits>
double to_double(const Digits& d, int scale) {
  double v = 0.0;
  for (std::size_t k = d.size(); k-- > 0;) {
    if (d[k] != 0) v += std::ldexp(static_cast<double>(d[k]), static_cast<int>(32 * k) + scale);
  }
  return v;
}

// Unsigned integers of up to 32 base-2^32 digits (1024 bits), enough for the square of a
// 12-digit magnitude and for the squares' sum times m: the few operations the variance needs.
constexpr std::size_t k_wide = 32;
using wide = std::array<std::uint64_t, k_wide>;  // digits in [0, 2^32), carried

wide widen(const digits& d) {
  wide w{};
  for (std::size_t k = 0; k < k_digits; ++k) w[k] = static_cast<std::uint64_t>(d[k]);
  return w;
}

// a * b, digits carried (they fit: a product of 12- and 12-digit numbers has at most 24
// digits; the squares' sum, at most 631 bits, 20, times a 2-digit m, 22).
wide multiply(const wide& a, const wide& b) {
  wide r{};
  for (std::size_t i = 0; i < k_wide; ++i) {
    if (a[i] == 0) continue;
    std::uint64_t c = 0;
    for (std::size_t j = 0; i + j < k_wide; ++j) {
      // < 2^64: (2^32 - 1)^2 + 2 (2^32 - 1).
      const std::uint64_t t = r[i + j] + a[i] * b[j] + c;
      r[i + j] = t & 0xffffffffu;
      c = t >> 32;
    }
  }
  return r;
}

// w += v * 2^bits (w's digits may exceed 2^32 until carry(w): each takes at most five
// pieces of 32 bits from each call).
void add_shifted(wide& w, unsigned __int128 v, unsigned bits) {
  const std::size_t first = bits / 32, part = bits % 32;
  for (std::size_t j = 0; j < 4 && v != 0; ++j, v >>= 32) {
    const auto limb = static_cast<std::uint64_t>(v & 0xffffffffu);
    w[first + j] += (limb << part) & 0xffffffffu;
    if (part != 0) w[first + j + 1] += limb >> (32 - part);
  }
}

void carry(wide& w) {
  for (std::size_t k = 0; k + 1 < k_wide; ++k) {
    w[k + 1] += w[k] >> 32;
    w[k] &= 0xffffffffu;
  }
}

bool less(const wide& a, const wide& b) {
  for (std::size_t k = k_wide; k-- > 0;) {
    if (a[k] != b[k]) return a[k] < b[k];
  }
  return false;
}

// a - b for a >= b.
wide subtract(const wide& a, const wide& b) {
  wide r{};
  std::uint64_t borrow = 0;
  for (std::size_t k = 0; k < k_wide; ++k) {
    const std::uint64_t sub = b[k] + borrow;
    borrow = a[k] < sub ? 1 : 0;
    r[k] = (a[k] + (borrow << 32) - sub) & 0xffffffffu;
  }
  return r;
}

}  // namespace

double exact_sum::value() const noexcept {
  if (special_ != 0.0) return special_;  // an infinity, or NaN
  bool negative = false;
  const double v = to_double(magnitude(groups_, negative), -150);
  return negative ? -v : v;
}

double exact_sum::variance(const exact_sum& sum, const exact_square_sum& squares,
                           std::int64_t m) noexcept {
  if (sum.special_ != 0.0 || squares.special_ != 0.0) {
    return std::numeric_limits<double>::quiet_NaN();  // an x was infinite or NaN
  }
  if (m <= 0) return 0.0;
  // sum = S 2^-150 and squares = Q 2^-300 with integers S, Q, so m^2 var = m Q 2^-300 - S^2
  // 2^-300 = (m Q - S^2) 2^-300: integers, exact (m Q >= S^2: Cauchy-Schwarz).
  bool negative = false;  // the sign of S does not matter: it is squared
  const wide s = widen(magnitude(sum.groups_, negative));
  wide q{};
  for (std::size_t g = 0; g < squares.groups_.size(); ++g) {
    add_shifted(q, squares.groups_[g], static_cast<unsigned>(8 * g));
  }
  carry(q);
  wide mm{};
  mm[0] = static_cast<std::uint64_t>(m) & 0xffffffffu;
  mm[1] = static_cast<std::uint64_t>(m) >> 32;
  const wide scaled = multiply(q, mm);
  const wide square = multiply(s, s);
  if (less(scaled, square)) return 0.0;  // cannot happen for exact sums of the same values
  const auto md = static_cast<double>(m);
  return to_double(subtract(scaled, square), -300) / md / md;
}

}  // namespace memweave::kernels::host
