// The probes' expectations: CHECK prints "FAIL: ..." with where and why and counts it; a
// probe exits 1 when probe_failures() is not 0, so the test that runs it shows the lines.
#pragma once

#include <cstdio>

inline int& probe_failures() {
  static int failures = 0;
  return failures;
}

#define CHECK(cond, ...)                                           \
  do {                                                             \
    if (!(cond)) {                                                 \
      std::printf("FAIL: %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::printf(__VA_ARGS__);                                    \
      std::printf("\n");                                           \
      ++probe_failures();                                          \
    }                                                              \
  } while (0)
