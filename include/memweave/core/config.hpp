// The one table of MEMWEAVE_* environment variables, and typed access to their values.
//
// Every variable is declared once in core/config.cpp (name, default, form, meaning); the
// README's table is checked against it by a test, and `memweave config` prints it. Values
// are read from the environment when asked for; settings made in code (the option structs
// of each module, the CLI) override the environment. An invalid value is an
// invalid_argument naming the variable, the value and the expected form.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace memweave {

/// How a variable's value is parsed.
enum class option_form {
  bytes,     ///< a size with optional K/M/G/T suffix ("8GiB")
  fraction,  ///< a number in (0, 1]
  number,    ///< a number within the row's range
  integer,   ///< a whole number within the row's range
  boolean,   ///< 0/1/true/false/on/off/yes/no
  choice,    ///< one of the '|'-separated words in `choices`
  text,      ///< any text (a path, a list)
};

/// The values a bytes, number or integer row accepts: [min, max], and also 0 when
/// `zero_allowed` (a row whose 0 means "off" or "automatic" beside a range that excludes
/// small values, e.g. a link speed below 1 MB/s).
struct option_range {
  double min = 0;
  double max = 1.8e19;
  bool zero_allowed = false;
  bool power_of_two = false;  ///< bytes: a power of two only (a block size)
};

/// One row of the table.
struct option_info {
  std::string_view name;           ///< "MEMWEAVE_POOL_BYTES"
  std::string_view default_value;  ///< the value used when unset; empty = unset
  option_form form;                ///< how the value is parsed
  std::string_view choices;        ///< for option_form::choice: "auto|cuda|host|null"
  std::string_view meaning;        ///< one line for the README
  option_range range = {};         ///< bytes, number, integer: the accepted values
};

/// Every MEMWEAVE_* variable memweave reads.
std::span<const option_info> option_table() noexcept;

/// The row of `name`, or nullptr.
const option_info* find_option(std::string_view name) noexcept;

/// The raw value of `name` from the environment, or nullopt when unset, empty or overridden.
/// Throws std::logic_error when `name` is not in the table (a programming error).
std::optional<std::string> option_raw(std::string_view name);

/// Why the environment's value of `name` is refused (the message validate_environment would
/// throw), or "" when it is unset or good. Throws std::logic_error when `name` is not in the
/// table.
std::string option_error(std::string_view name);

/// From now on `name` reads as unset (its default applies where read at all) and
/// validate_environment skips it: the command line gave the option that sets what it sets,
/// and a variable so overridden is not read, not even checked (README). Call before any
/// thread reads options. Throws std::logic_error when `name` is not in the table.
void override_option(std::string_view name);
/// Every variable read again (tests).
void reset_option_overrides() noexcept;

/// Typed values: the environment's when set, else the table's default. Each throws
/// invalid_argument naming the variable when the value does not parse; option_bytes and
/// option_double return nullopt when the variable is unset and has no default.
std::optional<std::size_t> option_bytes(std::string_view name);
std::optional<double> option_double(std::string_view name);
std::optional<std::int64_t> option_int(std::string_view name);
bool option_bool(std::string_view name);
std::string option_string(std::string_view name);

/// Parse `text` with the form and range of variable `name`'s row, naming `knob` (the
/// command-line option the user gave, "--threads") in errors: how an option that sets what
/// a variable sets is read, so both accept exactly the same values.
std::int64_t parse_option_int(std::string_view name, std::string_view text, std::string_view knob);
double parse_option_double(std::string_view name, std::string_view text, std::string_view knob);
std::size_t parse_option_bytes(std::string_view name, std::string_view text, std::string_view knob);

/// Parses and checks every MEMWEAVE_* variable that is set; throws on the first invalid
/// one and warns once (log) about names not in the table, which are usually typos.
void validate_environment();

/// The table as a Markdown table (| variable | default | meaning |), for the README.
std::string option_table_markdown();

/// The expected form of a row, for messages ("a size such as 8GiB").
std::string describe_form(const option_info& info);

}  // namespace memweave
