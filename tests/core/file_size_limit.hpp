// A test's stand-in for a full disk: RLIMIT_FSIZE lowered for the scope (SIGXFSZ ignored,
// so a write past it fails with EFBIG instead of killing the process), both restored after.
// Process-wide: only for tests that write no other file meanwhile.
#pragma once

#include <sys/resource.h>

#include <csignal>
#include <cstddef>

namespace memweave::test {

class file_size_limit {
 public:
  explicit file_size_limit(std::size_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    rlimit lowered = saved_;
    lowered.rlim_cur = bytes;
    previous_ = std::signal(SIGXFSZ, SIG_IGN);
    ::setrlimit(RLIMIT_FSIZE, &lowered);
  }
  ~file_size_limit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, previous_);
  }
  file_size_limit(const file_size_limit&) = delete;
  file_size_limit& operator=(const file_size_limit&) = delete;

 private:
  rlimit saved_{};
  void (*previous_)(int) = SIG_DFL;
};

}  // namespace memweave::test
