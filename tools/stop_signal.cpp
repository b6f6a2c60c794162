// The handler only stores the signal and writes one line (write(2): async-signal-safe); a
// second signal more than a second after the first restores the default action and raises
// it again.
#include "stop_signal.hpp"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <csignal>

namespace memweave {
namespace {

volatile std::sig_atomic_t g_signal = 0;
// When the first signal came (CLOCK_MONOTONIC, seconds): one within a second of it is the same
// request delivered twice (`timeout` signals the child and then its process group, a terminal's
// Ctrl-C reaches every process of the group), not the user's "once more".
volatile std::sig_atomic_t g_first_second = 0;

long monotonic_seconds() noexcept {
  struct timespec now {};
  (void)::clock_gettime(CLOCK_MONOTONIC, &now);  // async-signal-safe (POSIX)
  return static_cast<long>(now.tv_sec);
}
struct sigaction g_previous_int {};
struct sigaction g_previous_term {};

extern "C" void on_stop_signal(int sig) {
  if (g_signal != 0) {
    // Folded into the first where it came within a second of it: timeout's two deliveries
    // quit at once, writing nothing, with the exit status of a stop that writes everything
    // (session 43's hostile run).
    if (monotonic_seconds() - g_first_second <= 1) return;
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_signal = sig;
  g_first_second = static_cast<std::sig_atomic_t>(monotonic_seconds());
  static const char line[] =
      "\nmemweave: stopping after the running iteration (or planning round), then printing "
      "and writing what finished (once more to quit at once)\n";
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
    : stopped_by_signal(signal,
                        "what finished was printed and written (the policies run, and the "
                        "iterations of the one stopped: its row says how many)") {}

stopped_by_signal::stopped_by_signal(int signal, const std::string& finished)
    : error("stopped by " + signal_name(signal) + ": " + finished), signal_(signal) {}

void throw_if_stop_requested() {
  if (const int signal = stop_requested(); signal != 0) throw stopped_by_signal(signal);
}

stopped_by_signal search_stopped(std::ostream& out, const std::string& what) {
  const int signal = stop_requested();
  out << "  " << what << ": stopped by " << signal_name(signal) << " before its answer"
      << std::endl;
  return stopped_by_signal(signal,
                           "the answers found were printed and written; the searches "
                           "after them were not run");
}

}  // namespace memweave
