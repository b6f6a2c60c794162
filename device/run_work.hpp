// Running stream work without letting its exception escape: a worker thread (host) or a CUDA
// host callback (cuda) must not throw, so the stream records the failure's message instead
// and reports it from synchronize() and later events.
#pragma once

#include <exception>
#include <functional>
#include <string>

namespace memweave::detail {

/// Runs `work`; returns true when it threw, with the exception's message in `message` (left
/// empty when not even the message could be copied).
inline bool run_work(const std::function<void()>& work, std::string& message) noexcept {
  try {
    work();
    return false;
  } catch (const std::exception& e) {
    try {
      message = e.what();
    } catch (...) {
    }
  } catch (...) {
    try {
      message = "an exception not derived from std::exception";
    } catch (...) {
    }
  }
  return true;
}

}  // namespace memweave::detail
