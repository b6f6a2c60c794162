// `memweave config`: the table of MEMWEAVE_* variables with their current values and the
// values each takes.
#include "cli_args.hpp"
#include "commands.hpp"
#include "memweave/core/config.hpp"

namespace memweave {

int config_command(int argc, const char* const* argv, std::ostream& out) {
  cli_args args(argc, argv, 2, {"markdown"});
  const bool markdown = args.flag("markdown");
  args.reject_unused();
  if (markdown) {
    out << option_table_markdown();
    return 0;
  }
  validate_environment();
  for (const auto& o : option_table()) {
    const auto raw = option_raw(o.name);
    out << o.name << " = "
        << (raw ? *raw : std::string(o.default_value.empty() ? "(unset)" : o.default_value))
        << (raw ? "" : "  [default]") << "\n    " << o.meaning << "\n    takes " << describe_form(o)
        << "\n";
  }
  return 0;
}

}  // namespace memweave
