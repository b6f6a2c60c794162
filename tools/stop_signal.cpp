// The handler only stores the signal and writes one line (write(2): async-signal-safe); a
// second signal restores the default action and raises it again.
#include "stop_signal.hpp"

#include <signal.h>
#include <unistd.h>

#include <csignal>

namespace memweave {
namespace {

volatile std::sig_atomic_t g_signal = 0;
struct sigaction g_previous_int {};
struct sigaction g_previous_term {};

extern "C" void on_stop_signal(int sig) {
  if (g_signal != 0) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_signal = sig;
  static const char line[] =
      "\nmemweave: stopping after the running iteration, then printing and writing what "
      "finished (once more to quit at once)\n";
  (void)!::write(2, line, sizeof line - 1);
}

}  // namespace

stop_signal_scope::stop_signal_scope() {
  g_signal = 0;
  struct sigaction a {};
  a.sa_handler = on_stop_signal;
  sigemptyset(&a.sa_mask);
  a.sa_flags = SA_RESTART;  // a read or write under way goes on
  ::sigaction(SIGINT, &a, &g_previous_int);
  ::sigaction(SIGTERM, &a, &g_previous_term);
}

stop_signal_scope::~stop_signal_scope() {
  ::sigaction(SIGINT, &g_previous_int, nullptr);
  ::sigaction(SIGTERM, &g_previous_term, nullptr);
}

int stop_requested() noexcept {
  return g_signal;
}

std::string signal_name(int signal) {
  if (signal == SIGINT) return "SIGINT";
  if (signal == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(signal);
}

stopped_by_signal::stopped_by_signal(int signal)
    : error("stopped by " + signal_name(signal) +
            ": what finished was printed and written (the policies run, and the iterations "
            "of the one stopped: its row says how many)"),
      signal_(signal) {}

}  // namespace memweave
