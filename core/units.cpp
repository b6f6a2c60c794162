// Parsing of option values. Pure functions, thread-safe.
#include "memweave/core/units.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "memweave/core/error.hpp"

namespace memweave {

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

[[noreturn]] void bad(std::string_view what, std::string_view text, std::string_view expected) {
  throw invalid_argument(knob_value(what, text) + " is not " + std::string(expected) + "; " +
                         std::string(knob_remedy(what)));
}

}  // namespace

std::string knob_value(std::string_view what, std::string_view text) {
  constexpr std::size_t max_shown = 60;
  std::string shown(text.substr(0, max_shown));
  if (text.size() > max_shown) shown += "...";
  if (what.starts_with("--")) return std::string(what) + " '" + shown + "'";
  return std::string(what) + "='" + shown + "'";
}

std::string_view knob_remedy(std::string_view what) {
  return what.starts_with("--") ? "change the option" : "fix or unset it";
}

std::optional<std::size_t> parse_bytes_unbounded(std::string_view text, std::string_view what) {
  constexpr std::string_view expected =
      "a size (a number with optional suffix K, M, G, T, e.g. 8GiB)";
  std::string_view s = trim(text);
  std::size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) bad(what, text, expected);
  double number = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + i, number);
  if (ec != std::errc() || end != s.data() + i) bad(what, text, expected);
  std::string suffix = lower(trim(s.substr(i)));
  double scale = 1;
  if (suffix.empty() || suffix == "b") {
    scale = 1;
  } else {
    const char unit = suffix[0];
    const std::string rest = suffix.substr(1);
    if (rest != "" && rest != "b" && rest != "ib") bad(what, text, expected);
    switch (unit) {
      case 'k':
        scale = 1024.0;
        break;
      case 'm':
        scale = 1024.0 * 1024;
        break;
      case 'g':
        scale = 1024.0 * 1024 * 1024;
        break;
      case 't':
        scale = 1024.0 * 1024 * 1024 * 1024;
        break;
      default:
        bad(what, text, expected);
    }
  }
  // A count of bytes is whole: "1.5" would silently be 1 byte. With a unit, a fraction of it
  // is rounded down to bytes (1.3GiB).
  if (scale == 1 && number != std::floor(number)) {
    bad(what, text, "a whole number of bytes, or a size with a unit (K, M, G, T, e.g. 1.5GiB)");
  }
  const double bytes = number * scale;
  if (!std::isfinite(bytes) || bytes >= 1.8e19) return std::nullopt;
  return static_cast<std::size_t>(bytes);
}

std::size_t parse_bytes(std::string_view text, std::string_view what) {
  const std::optional<std::size_t> bytes = parse_bytes_unbounded(text, what);
  if (!bytes) {
    throw invalid_argument(knob_value(what, text) +
                           " is out of range: expected a size below 16 EiB; " +
                           std::string(knob_remedy(what)));
  }
  return *bytes;
}

std::size_t parse_bytes(std::string_view text, std::string_view what, std::size_t min,
                        std::size_t max) {
  const std::optional<std::size_t> bytes = parse_bytes_unbounded(text, what);
  if (!bytes || *bytes < min || *bytes > max) {
    throw invalid_argument(knob_value(what, text) + " is out of range: expected a size from " +
                           format_bytes(min) + " to " + format_bytes(max) + "; " +
                           std::string(knob_remedy(what)));
  }
  return *bytes;
}

double parse_double_unbounded(std::string_view text, std::string_view what) {
  const std::string_view s = trim(text);
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  const bool whole = !s.empty() && end == s.data() + s.size();
  // Read whole but past what a double holds (1e400, 1e-400): +-inf, or the least subnormal
  // of its sign (not strtod's 0, which a row of "0 or from 1e-4" took as its 0, off, while
  // it refused 1e-320; session 45's hostile run), so that the caller's range check calls it
  // out of range (it was "not a number").
  if (whole && ec == std::errc::result_out_of_range) {
    const double v = std::strtod(std::string(s).c_str(), nullptr);
    if (v != 0) return v;
    return s.front() == '-' ? -std::numeric_limits<double>::denorm_min()
                            : std::numeric_limits<double>::denorm_min();
  }
  if (!whole || ec != std::errc() || std::isnan(v)) bad(what, text, "a number");
  return v;
}

double parse_double(std::string_view text, std::string_view what) {
  const double v = parse_double_unbounded(text, what);
  if (!std::isfinite(v)) bad(what, text, "a finite number");
  return v;
}

std::uint64_t parse_uint(std::string_view text, std::string_view what) {
  std::string_view s = trim(text);
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) {
    bad(what, text, "a non-negative integer");
  }
  return v;
}

std::int64_t parse_int(std::string_view text, std::string_view what, std::int64_t min,
                       std::int64_t max) {
  const std::string range =
      "a whole number from " + std::to_string(min) + " to " + std::to_string(max);
  std::string_view s = trim(text);
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || end != s.data() + s.size() ||
      (ec != std::errc() && ec != std::errc::result_out_of_range)) {
    bad(what, text, range);
  }
  if (ec == std::errc::result_out_of_range || v < min || v > max) {
    throw invalid_argument(knob_value(what, text) + " is out of range: expected " + range + "; " +
                           std::string(knob_remedy(what)));
  }
  return v;
}

double parse_double(std::string_view text, std::string_view what, double min, double max) {
  const double v = parse_double_unbounded(text, what);
  if (!(v >= min && v <= max)) {
    throw invalid_argument(knob_value(what, text) + " is out of range: expected a number from " +
                           format_number(min) + " to " + format_number(max) + "; " +
                           std::string(knob_remedy(what)));
  }
  return v;
}

bool parse_bool(std::string_view text, std::string_view what) {
  const std::string s = lower(trim(text));
  if (s == "1" || s == "true" || s == "on" || s == "yes") return true;
  if (s == "0" || s == "false" || s == "off" || s == "no") return false;
  bad(what, text, "a boolean (1/0, true/false, on/off, yes/no)");
}

std::string format_bytes(std::size_t bytes) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%zu B", bytes);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  }
  return buf;
}

std::pair<std::string, std::string> format_bytes_apart(std::size_t a, std::size_t b) {
  std::string x = format_bytes(a), y = format_bytes(b);
  if (x == y && a != b) {
    x += " (" + std::to_string(a) + " bytes)";
    y += " (" + std::to_string(b) + " bytes)";
  }
  return {x, y};
}

std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace memweave
