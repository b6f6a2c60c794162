// JSON text for the report writers (no JSON library is needed to write these few shapes).
#pragma once

#include <string>

namespace memweave {

/// `s` as a JSON string literal, quotes included.
std::string json_string(const std::string& s);
/// `v` with 17 significant digits (round-trips a double); "null" when not finite.
std::string json_number(double v);

}  // namespace memweave
