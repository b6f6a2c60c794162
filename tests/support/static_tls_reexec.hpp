// Test support: make a test binary able to dlopen jemalloc.
//
// jemalloc's library uses initial-exec TLS (about 2.6 KB), more than glibc keeps spare for
// libraries loaded after start-up, so dlopen("libjemalloc.so.2") fails with "cannot allocate
// memory in static TLS block" unless the process started with a larger
// glibc.rtld.optional_static_tls. A test binary that uses the pinned host pool includes this
// header in exactly one source file and writes MEMWEAVE_REEXEC_WITH_STATIC_TLS(); before
// main, the binary re-executes itself once with the tunable added to GLIBC_TUNABLES (so it
// also works when run by hand, not only under CTest). MEMWEAVE_TEST_NO_REEXEC=1 turns this
// off (a test uses that to check the pool's error message without the tunable).
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "memweave/alloc/pinned_host_pool.hpp"

namespace memweave::test {

/// Whether GLIBC_TUNABLES already sets the optional static TLS size.
inline bool static_tls_tunable_set() {
  const char* t = std::getenv("GLIBC_TUNABLES");
  return t != nullptr && std::strstr(t, "glibc.rtld.optional_static_tls=") != nullptr;
}

/// Re-executes /proc/self/exe with the tunable unless it is set or MEMWEAVE_TEST_NO_REEXEC is;
/// returns (and the tests needing jemalloc skip with the reason) when exec fails.
inline void reexec_with_static_tls(char** argv) {
  if (static_tls_tunable_set() || std::getenv("MEMWEAVE_TEST_NO_REEXEC") != nullptr) return;
  const char* old = std::getenv("GLIBC_TUNABLES");
  std::string value = pinned_host_pool::static_tls_tunable;
  if (old != nullptr && *old != '\0') value = std::string(old) + ":" + value;
  if (::setenv("GLIBC_TUNABLES", value.c_str(), 1) != 0) return;
  ::execv("/proc/self/exe", argv);
}

}  // namespace memweave::test

/// Defines the start-up hook; glibc passes (argc, argv, envp) to the executable's
/// constructors.
#define MEMWEAVE_REEXEC_WITH_STATIC_TLS()                                        \
  __attribute__((constructor)) static void memweave_reexec_with_static_tls_hook( \
      int /*argc*/, char** argv, char** /*envp*/) {                              \
    ::memweave::test::reexec_with_static_tls(argv);                              \
  }                                                                              \
  static_assert(true, "")
