#include "memweave/core/quoted.hpp"

#include <cstdio>

namespace memweave {

std::string quote_text(std::string_view s, std::size_t max_shown) {
  std::string out = "'";
  for (const char c : s.substr(0, max_shown)) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u != 0x7f) {
      out += c;
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", u);
      out += hex;
    }
  }
  if (s.size() > max_shown) out += "...";
  return out + "'";
}

}  // namespace memweave
