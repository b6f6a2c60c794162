// stderr diagnostics. The level is read from MEMWEAVE_LOG once, lazily; a mutex keeps
// lines from interleaving. Never throws: a bad MEMWEAVE_LOG value falls back to warn
// (validate_environment reports it properly).
#include "memweave/core/log.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace memweave {
namespace {

std::atomic<int> g_level{-1};  // -1: not read yet
std::mutex g_write_mutex;      // guards: whole-line writes to stderr

int level_from_environment() noexcept {
  const char* v = std::getenv("MEMWEAVE_LOG");
  if (v == nullptr || *v == '\0') return static_cast<int>(log_level::warn);
  if (std::strcmp(v, "error") == 0) return static_cast<int>(log_level::error);
  if (std::strcmp(v, "info") == 0) return static_cast<int>(log_level::info);
  if (std::strcmp(v, "debug") == 0) return static_cast<int>(log_level::debug);
  return static_cast<int>(log_level::warn);
}

int current_level() noexcept {
  int l = g_level.load(std::memory_order_relaxed);
  if (l < 0) {
    l = level_from_environment();
    g_level.store(l, std::memory_order_relaxed);
  }
  return l;
}

}  // namespace

bool log_enabled(log_level level) noexcept {
  return static_cast<int>(level) <= current_level();
}

void set_log_level(log_level level) noexcept {
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

void log(log_level level, std::string_view message) noexcept {
  if (!log_enabled(level)) return;
  static constexpr const char* names[] = {"error", "warning", "info", "debug"};
  std::lock_guard lock(g_write_mutex);
  std::fprintf(stderr, "memweave: %s: %.*s\n", names[static_cast<int>(level)],
               static_cast<int>(message.size()), message.data());
}

}  // namespace memweave
