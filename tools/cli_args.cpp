// Parsing of command-line options. Single-threaded (the CLI's main thread).
#include "cli_args.hpp"

#include <string_view>
#include <utility>

#include "memweave/core/config.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"

namespace memweave {

void override_variables_given(int argc, const char* const* argv, int first) {
  // Each option and the variable that sets the same thing where the option is absent.
  static constexpr std::pair<std::string_view, std::string_view> k_overrides[] = {
      {"device", "MEMWEAVE_DEVICE"},
      {"policy", "MEMWEAVE_POLICY"},
      {"conv-ws", "MEMWEAVE_CONV_WS"},
      {"fit", "MEMWEAVE_FIT"},
      {"recompute", "MEMWEAVE_RECOMPUTE"},
      {"cost-model", "MEMWEAVE_COST_MODEL"},
      {"threads", "MEMWEAVE_THREADS"},
      {"host-pool", "MEMWEAVE_HOST_POOL_BYTES"},
      {"prefetch-distance", "MEMWEAVE_PREFETCH_DISTANCE"},
      {"net-gbps", "MEMWEAVE_NET_GBPS"},
  };
  for (int i = first; i < argc; ++i) {
    std::string_view arg(argv[i]);
    if (!arg.starts_with("--")) continue;
    arg.remove_prefix(2);
    arg = arg.substr(0, arg.find('='));
    for (const auto& [option, variable] : k_overrides) {
      if (arg == option) override_option(variable);
    }
  }
}

cli_args::cli_args(int argc, const char* const* argv, int first, std::set<std::string> flags)
    : flags_(std::move(flags)) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (!arg.starts_with("--") || arg.size() == 2) {
      throw invalid_argument("unexpected argument '" + arg +
                             "': options are written --name value; see `memweave help`");
    }
    std::string name = arg.substr(2);
    std::string value;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      if (flags_.contains(name)) {
        throw invalid_argument("option --" + name + " takes no value; write --" + name + " alone");
      }
    } else if (!flags_.contains(name)) {
      if (i + 1 >= argc) {
        throw invalid_argument("option --" + name +
                               " needs a value, or is not an option of this command (a flag "
                               "of another command?); see `memweave help`");
      }
      value = argv[++i];
      if (value.starts_with("--") && value.size() > 2) {
        throw invalid_argument("option --" + name + " needs a value, but is followed by " + value +
                               "; give the value after --" + name + " (or write --" + name +
                               "=VALUE), or --" + name +
                               " is not an option of this command (a flag of another "
                               "command?); see `memweave help`");
      }
    }
    if (values_.contains(name)) {
      throw invalid_argument("option --" + name + " is given twice; give it once");
    }
    values_[name] = value;
  }
}

std::optional<std::string> cli_args::get(const std::string& name) {
  used_.insert(name);
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string cli_args::get_or(const std::string& name, const std::string& fallback) {
  return get(name).value_or(fallback);
}

std::string cli_args::get_path(const std::string& name) {
  auto v = get(name);
  if (v && v->empty()) {
    throw invalid_argument("--" + name + " '' is an empty path: expected a file path; leave --" +
                           name + " out to have none");
  }
  return v.value_or("");
}

std::optional<std::size_t> cli_args::get_bytes(const std::string& name, std::size_t minimum,
                                               std::size_t maximum) {
  auto v = get(name);
  if (!v) return std::nullopt;
  return parse_bytes(*v, "--" + name, minimum, maximum);
}

std::optional<std::int64_t> cli_args::get_int(const std::string& name, std::int64_t minimum,
                                              std::int64_t maximum) {
  auto v = get(name);
  if (!v) return std::nullopt;
  return parse_int(*v, "--" + name, minimum, maximum);
}

std::optional<double> cli_args::get_double(const std::string& name, double minimum,
                                           double maximum) {
  auto v = get(name);
  if (!v) return std::nullopt;
  return parse_double(*v, "--" + name, minimum, maximum);
}

std::int64_t cli_args::get_int_or_variable(const std::string& name, std::string_view variable) {
  if (auto v = get(name)) return parse_option_int(variable, *v, "--" + name);
  return option_int(variable).value_or(0);
}

std::optional<std::size_t> cli_args::get_bytes_of_variable(const std::string& name,
                                                           std::string_view variable) {
  auto v = get(name);
  if (!v) return std::nullopt;
  return parse_option_bytes(variable, *v, "--" + name);
}

bool cli_args::flag(const std::string& name) {
  used_.insert(name);
  return values_.contains(name);
}

void cli_args::reject_unused() const {
  std::string unknown;
  for (const auto& [name, _] : values_) {
    if (!used_.contains(name)) unknown += (unknown.empty() ? "--" : ", --") + name;
  }
  if (!unknown.empty()) {
    throw invalid_argument("unknown option(s) " + unknown +
                           " for this command; see `memweave help`");
  }
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto comma = text.find(',', start);
    std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<std::string> split_list(const std::string& text, const std::string& knob) {
  if (!text.empty() &&
      (text.front() == ',' || text.back() == ',' || text.find(",,") != std::string::npos)) {
    throw invalid_argument(knob_value(knob, text) +
                           " has an empty item: expected names separated by single commas");
  }
  return split_list(text);
}

}  // namespace memweave
