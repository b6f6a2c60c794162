// Test support: make a test binary able to dlopen jemalloc (see
// include/memweave/alloc/static_tls.hpp). A test binary that uses the pinned host pool
// includes this header in its source files and writes
// MEMWEAVE_REEXEC_WITH_STATIC_TLS(); before main, the binary re-executes itself once with the
// tunable (so it also works when run by hand, not only under CTest). MEMWEAVE_NO_REEXEC=1
// turns this off (a test uses that to check the pool's error message without the tunable).
#pragma once

#include "memweave/alloc/static_tls.hpp"

/// Defines the start-up hook; glibc passes (argc, argv, envp) to the executable's
/// constructors. Named by __COUNTER__: a unity build puts several test files that each write it
/// into one translation unit (the first hook re-executes; in the new process both return).
#define MEMWEAVE_REEXEC_WITH_STATIC_TLS() MEMWEAVE_REEXEC_HOOK_NAMED(__COUNTER__)
#define MEMWEAVE_REEXEC_HOOK_NAMED(n) MEMWEAVE_REEXEC_HOOK_DEFINE(n)
#define MEMWEAVE_REEXEC_HOOK_DEFINE(n)                                               \
  __attribute__((constructor)) static void memweave_reexec_with_static_tls_hook_##n( \
      int /*argc*/, char** argv, char** /*envp*/) {                                  \
    ::memweave::reexec_with_static_tls(argv);                                        \
  }                                                                                  \
  static_assert(true, "")
