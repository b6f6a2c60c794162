// `memweave config`: the table of MEMWEAVE_* variables with their current values and the
// values each takes.
#include "cli_args.hpp"
#include "commands.hpp"
#include "memweave/conv_workspace/conv_workspace_selector.hpp"
#include "memweave/core/config.hpp"
#include "memweave/core/error.hpp"
#include "memweave/engine/executor.hpp"
#include "network_run.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace memweave {

int config_command(int argc, const char* const* argv, std::ostream& out) {
  cli_args args(argc, argv, 2, {"markdown"});
  const bool markdown = args.flag("markdown");
  args.reject_unused();
  if (markdown) {
    out << option_table_markdown();
    return 0;
  }
  // Every row is listed, a refused value with why (one bad variable made it list nothing);
  // then the command fails, as a command that reads them would.
  std::vector<std::string> refused;
  auto why = [&](const option_info& o) -> std::string {
    std::string e = option_error(o.name);
    if (!e.empty() || !option_raw(o.name)) return e;
    // The two values whose form is the engine's (core checks them as text): checked as a
    // command that reads them would, so that config does not list a bad one as if it were good.
    try {
      if (std::string_view(o.name) == "MEMWEAVE_POLICY") {
        const std::vector<std::string> names = split_list(*option_raw(o.name), std::string(o.name));
        MEMWEAVE_EXPECTS(!names.empty(),
                         "MEMWEAVE_POLICY is empty: set a policy or a "
                         "comma-separated list, or unset it");
        for (const std::string& p : names) {
          (void)from_knob("MEMWEAVE_POLICY", [&] { return executor_policy::parse(p); });
        }
      } else if (std::string_view(o.name) == "MEMWEAVE_CONV_WS") {
        (void)conv_ws_options::from_environment();
      }
    } catch (const invalid_argument& error) {
      return error.what();
    }
    return {};
  };
  for (const auto& o : option_table()) {
    const auto raw = option_raw(o.name);
    out << o.name << " = "
        << (raw ? *raw : std::string(o.default_value.empty() ? "(unset)" : o.default_value))
        << (raw ? "" : "  [default]") << "\n    " << o.meaning << "\n    takes " << describe_form(o)
        << "\n";
    if (std::string e = why(o); !e.empty()) {
      out << "    REFUSED: " << e << "\n";
      refused.push_back(std::move(e));
    }
  }
  if (!refused.empty()) {
    throw invalid_argument(refused.front() +
                           (refused.size() > 1
                                ? " (and " + std::to_string(refused.size() - 1) + " more, above)"
                                : std::string()));
  }
  validate_environment();  // the warning about unknown MEMWEAVE_* names
  return 0;
}

}  // namespace memweave
