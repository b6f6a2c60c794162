// Command-line arguments of `memweave <command> --key value --flag ...`: parsed once,
// then read by name; every option the command does not read is reported as unknown, so
// that a typo is an error rather than silently ignored.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace memweave {

class cli_args {
 public:
  /// Parses argv[first..argc). `flags` are the options that take no value.
  cli_args(int argc, const char* const* argv, int first, std::set<std::string> flags);

  /// The value of --name, or nullopt. Marks the option as used.
  std::optional<std::string> get(const std::string& name);
  std::string get_or(const std::string& name, const std::string& fallback);
  /// A byte size (8GiB); invalid_argument naming --name when malformed.
  std::optional<std::size_t> get_bytes(const std::string& name);
  /// A positive integer; invalid_argument naming --name when malformed or < minimum.
  std::optional<long long> get_int(const std::string& name, long long minimum = 1);
  bool flag(const std::string& name);
  /// Throws invalid_argument listing options given but never read.
  void reject_unused() const;

 private:
  std::map<std::string, std::string> values_;  ///< --name -> value ("" for flags)
  std::set<std::string> flags_;                ///< names that take no value
  std::set<std::string> used_;                 ///< names read so far
};

/// Splits "a,b,c" into {"a","b","c"} (empty items dropped).
std::vector<std::string> split_list(const std::string& text);

}  // namespace memweave
