// stderr diagnostics. The level is read from MEMWEAVE_LOG once, lazily. Each line is one
// fprintf, which holds stderr's own lock for the whole call, so lines do not interleave;
// no lock of ours: a child forked while another thread of the parent held one would wait for
// it forever at its first message (stdio's lock the C library resets in the child). Never
// throws: a bad MEMWEAVE_LOG value falls back to warn (validate_environment reports it).
#include "memweave/core/log.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "memweave/core/units.hpp"

namespace memweave {
namespace {

std::atomic<int> g_level{-1};  // -1: not read yet

int level_from_environment() noexcept {
  const char* v = std::getenv("MEMWEAVE_LOG");
  if (v == nullptr) return static_cast<int>(log_level::warn);
  // White space around it dropped, as the option table drops it (config.cpp's option_raw).
  const std::string_view level = trim(v);
  if (level == "error") return static_cast<int>(log_level::error);
  if (level == "info") return static_cast<int>(log_level::info);
  if (level == "debug") return static_cast<int>(log_level::debug);
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
  std::fprintf(stderr, "memweave: %s: %.*s\n", names[static_cast<int>(level)],
               static_cast<int>(message.size()), message.data());
}

}  // namespace memweave
