// Ctrl-C (SIGINT) and a job scheduler's SIGTERM during a run: the policies that finished,
// and the iterations of the one running, are finished work. While a stop_signal_scope lives,
// the first such signal only asks the run to stop (stop_requested); the run stops at the next
// iteration, prints and writes what it has, and main exits 128 + the signal, as the signal
// would have. A second signal ends the process at once, as without the scope.
#pragma once

#include <ostream>
#include <string>

#include "memweave/core/error.hpp"

namespace memweave {

/// Handles SIGINT and SIGTERM as above from construction to destruction (which restores the
/// handlers before it). Not for data-parallel runs: every rank must stop at one iteration.
class stop_signal_scope {
 public:
  stop_signal_scope();
  ~stop_signal_scope();
  stop_signal_scope(const stop_signal_scope&) = delete;
  stop_signal_scope& operator=(const stop_signal_scope&) = delete;
};

/// The signal that asked the run to stop (SIGINT, SIGTERM), or 0.
int stop_requested() noexcept;

/// "SIGINT", "SIGTERM", or "signal N".
std::string signal_name(int signal);

/// Thrown once the run wrote what it had: main exits 128 + signal().
class stopped_by_signal : public error {
 public:
  explicit stopped_by_signal(int signal);
  /// `finished`: what was printed and written, as the message says it ("the answers found
  /// were printed").
  stopped_by_signal(int signal, const std::string& finished);
  int signal() const noexcept { return signal_; }

 private:
  int signal_;
};

/// A search's probe asks this after each plan: a stop asked before or while it ran (which may
/// have cut `all`'s weighing short) leaves the probe without an answer, thrown as
/// stopped_by_signal for the search to say so; nothing while no stop was asked.
void throw_if_stop_requested();

/// What a search prints for `what` (a policy, "split") that a stop ended without its answer,
/// then the stop to throw once the answers found were written.
stopped_by_signal search_stopped(std::ostream& out, const std::string& what);

}  // namespace memweave
