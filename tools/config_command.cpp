// `memweave config`: the table of MEMWEAVE_* variables with their current values and the
// values each takes.
#include "cli_args.hpp"
#include "commands.hpp"
#include "memweave/conv_workspace/conv_workspace_selector.hpp"
#include "memweave/core/config.hpp"
#include "memweave/core/error.hpp"
#include "memweave/engine/executor.hpp"
#include "network_run.hpp"

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
  // The two values whose form is the engine's (core checks them as text): checked as a
  // command that reads them would, so that config does not list a bad one as if it were good.
  if (const auto policies = option_raw("MEMWEAVE_POLICY")) {
    const std::vector<std::string> names = split_list(*policies, "MEMWEAVE_POLICY");
    MEMWEAVE_EXPECTS(!names.empty(),
                     "MEMWEAVE_POLICY is empty: set a policy or a "
                     "comma-separated list, or unset it");
    for (const std::string& p : names) {
      (void)from_knob("MEMWEAVE_POLICY", [&] { return executor_policy::parse(p); });
    }
  }
  if (option_raw("MEMWEAVE_CONV_WS")) (void)conv_ws_options::from_environment();
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
