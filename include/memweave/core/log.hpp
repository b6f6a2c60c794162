// Diagnostics to stderr, one line each, prefixed "memweave: ". The level comes from
// MEMWEAVE_LOG (error, warn, info, debug; default warn). Thread-safe.
#pragma once

#include <string_view>

namespace memweave {

enum class log_level { error = 0, warn = 1, info = 2, debug = 3 };

/// Writes `message` when `level` is at or below the configured level.
void log(log_level level, std::string_view message) noexcept;

/// Whether a message of `level` would be written (to skip building expensive messages).
bool log_enabled(log_level level) noexcept;

/// Overrides the level read from MEMWEAVE_LOG.
void set_log_level(log_level level) noexcept;

}  // namespace memweave
