// Parsing and printing of byte sizes and other option values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace memweave {

/// `s` without the white space (isspace) at either end: how every option value is read, so
/// that `MEMWEAVE_LOG=' debug '` and `MEMWEAVE_THREADS=' 2'` are taken alike.
std::string_view trim(std::string_view s) noexcept;

/// Parses a byte size: a number with an optional suffix K, M, G, T (powers of 1024), also
/// written KB/KiB, MB/MiB, ... ("8GiB", "512M", "1.5G", "4096"). Throws invalid_argument
/// naming `what` (e.g. the variable) and the value when it is malformed.
std::size_t parse_bytes(std::string_view text, std::string_view what);
/// As parse_bytes, a size in [min, max]: one out of it (16 EiB and more too) is "out of
/// range", naming the range.
std::size_t parse_bytes(std::string_view text, std::string_view what, std::size_t min,
                        std::size_t max);
/// As parse_bytes, but a size of 16 EiB or more (no std::size_t holds it) is nullopt: for a
/// caller that checks its own range and calls such a size out of it.
std::optional<std::size_t> parse_bytes_unbounded(std::string_view text, std::string_view what);

/// Parses a finite floating-point number; throws invalid_argument naming `what`.
double parse_double(std::string_view text, std::string_view what);
/// As parse_double, but a number written whole that a double cannot hold is +-infinity past
/// its range and 0 below its least subnormal (strtod's rounding), and "inf" is infinity: for a
/// caller that checks its own range and calls such a value out of it. NaN and malformed text
/// throw.
double parse_double_unbounded(std::string_view text, std::string_view what);

/// Parses a non-negative integer; throws invalid_argument naming `what`.
std::uint64_t parse_uint(std::string_view text, std::string_view what);

/// Parses a whole number in [min, max] (digits with an optional leading '-'; no fraction,
/// exponent or suffix). Throws invalid_argument naming `what`, the text and the range, so
/// that a value never reaches a narrower type out of range.
std::int64_t parse_int(std::string_view text, std::string_view what, std::int64_t min,
                       std::int64_t max);

/// Parses a finite number in [min, max]; throws invalid_argument naming `what`, the text
/// and the range.
double parse_double(std::string_view text, std::string_view what, double min, double max);

/// `what` and its value as a message starts: "--batch 0" for a command-line option (a name
/// starting with "--"), "MEMWEAVE_THREADS='x'" for a variable.
std::string knob_value(std::string_view what, std::string_view text);

/// What a message tells the user to do with a bad `what`: "fix or unset it" for a variable,
/// "change it" for an option.
std::string_view knob_remedy(std::string_view what);

/// Parses 0/1/true/false/on/off/yes/no; throws invalid_argument naming `what`.
bool parse_bool(std::string_view text, std::string_view what);

/// "1.50 GiB", "512.00 KiB", "17 B".
std::string format_bytes(std::size_t bytes);
/// `a` and `b` as format_bytes writes them, each followed by its exact byte count where the
/// two would read the same ("113.00 KiB (115711 bytes)" against "113.00 KiB (115712 bytes)"):
/// a budget just under a minimum is not shown as equal to it.
std::pair<std::string, std::string> format_bytes_apart(std::size_t a, std::size_t b);

/// A number as messages print it: up to six significant digits ("0.5", "4096", "1e+06").
std::string format_number(double v);

}  // namespace memweave
