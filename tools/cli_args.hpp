// Command-line arguments of `memweave <command> --key value --flag ...`: parsed once,
// then read by name; every option the command does not read is reported as unknown, so
// that a typo is an error rather than silently ignored. Every number is read here, to its
// real type and range (core/units.hpp, or the option table's row of the variable the
// option overrides), and every error names the option as the user wrote it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace memweave {

/// The MEMWEAVE_* variables that options in argv[first..argc) override (--device,
/// --host-pool, --threads, ...) read as unset from now on (override_option): a variable
/// overridden on the command line is not read, not even checked, so a bad one left in the
/// environment does not stop a run whose command line says otherwise.
void override_variables_given(int argc, const char* const* argv, int first);

class cli_args {
 public:
  /// Parses argv[first..argc). `flags` are the options that take no value. Throws
  /// invalid_argument for a bare word, a repeated option, a flag given a value, or an
  /// option whose value is missing (the next word is another option).
  cli_args(int argc, const char* const* argv, int first, std::set<std::string> flags);

  /// The value of --name, or nullopt. Marks the option as used.
  std::optional<std::string> get(const std::string& name);
  std::string get_or(const std::string& name, const std::string& fallback);
  /// A file path, or "" when --name is absent; --name given empty ('') is invalid_argument
  /// (an empty path would otherwise mean "no file" and silently write or read nothing).
  std::string get_path(const std::string& name);
  /// A byte size (8GiB) in [minimum, maximum]; invalid_argument naming --name otherwise.
  std::optional<std::size_t> get_bytes(const std::string& name, std::size_t minimum = 0,
                                       std::size_t maximum = SIZE_MAX);
  /// A whole number in [minimum, maximum]; invalid_argument naming --name otherwise.
  std::optional<std::int64_t> get_int(const std::string& name, std::int64_t minimum,
                                      std::int64_t maximum);
  /// A finite number in [minimum, maximum]; invalid_argument naming --name otherwise.
  std::optional<double> get_double(const std::string& name, double minimum, double maximum);
  /// --name read with the form and range of `variable`'s row in the option table (the
  /// option overrides that variable); when absent, the variable's value (or default),
  /// read only then, so a bad variable does not fail a run that overrides it.
  std::int64_t get_int_or_variable(const std::string& name, std::string_view variable);
  /// --name read with the form and range of `variable`'s row, or nullopt when absent.
  std::optional<std::size_t> get_bytes_of_variable(const std::string& name,
                                                   std::string_view variable);
  bool flag(const std::string& name);
  /// Every option given, --name -> value ("" for a flag), read or not.
  const std::map<std::string, std::string>& given() const noexcept { return values_; }
  /// Throws invalid_argument listing options given but never read.
  void reject_unused() const;

 private:
  std::map<std::string, std::string> values_;  ///< --name -> value ("" for flags)
  std::set<std::string> flags_;                ///< names that take no value
  std::set<std::string> used_;                 ///< names read so far
};

/// Splits "a,b,c" into {"a","b","c"} (empty items dropped).
std::vector<std::string> split_list(const std::string& text);
/// The same for a list the user gave through `knob`: an empty item ("a,", ",a", "a,,b") is
/// invalid_argument naming it (a stray comma is a typo, not a shorter list); "" is {}.
std::vector<std::string> split_list(const std::string& text, const std::string& knob);

}  // namespace memweave
