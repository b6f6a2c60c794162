// Text read from a file, shown in a message: a name or a line of a checkpoint, a trace or a
// model may hold any bytes, and a NUL cut the message at it when printed as a C string (the
// command line prints e.what()), a newline broke its line.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace memweave {

/// `s` between single quotes, at most `max_shown` bytes of it (then "..."), each control byte
/// (below 0x20, and 0x7f) as \xNN; other bytes as they are, so a UTF-8 name reads as itself.
std::string quote_text(std::string_view s, std::size_t max_shown = 60);

}  // namespace memweave
