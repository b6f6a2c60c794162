// The subcommands of the `memweave` program. Each parses its own options from argv
// (after the command word), prints progress and a summary to `out`, and returns the
// process exit code; bad input throws memweave::error (main prints it and exits 2).
#pragma once

#include <ostream>

namespace memweave {

int train_command(int argc, const char* const* argv, std::ostream& out);
int eval_command(int argc, const char* const* argv, std::ostream& out);
int plan_command(int argc, const char* const* argv, std::ostream& out);
int replay_command(int argc, const char* const* argv, std::ostream& out);
int config_command(int argc, const char* const* argv, std::ostream& out);

}  // namespace memweave
