// Test support: make a test binary able to dlopen jemalloc (see
// include/memweave/alloc/static_tls.hpp). A test binary that uses the pinned host pool
// includes this header in exactly one source file and writes
// MEMWEAVE_REEXEC_WITH_STATIC_TLS(); before main, the binary re-executes itself once with the
// tunable (so it also works when run by hand, not only under CTest). MEMWEAVE_NO_REEXEC=1
// turns this off (a test uses that to check the pool's error message without the tunable).
#pragma once

#include "memweave/alloc/static_tls.hpp"

/// Defines the start-up hook; glibc passes (argc, argv, envp) to the executable's
/// constructors.
#define MEMWEAVE_REEXEC_WITH_STATIC_TLS()                                        \
  __attribute__((constructor)) static void memweave_reexec_with_static_tls_hook( \
      int /*argc*/, char** argv, char** /*envp*/) {                              \
    ::memweave::reexec_with_static_tls(argv);                                    \
  }                                                                              \
  static_assert(true, "")
