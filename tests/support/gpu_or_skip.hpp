// The guard of every GPU test (label gpu): skips with the reason no CUDA device can be
// used, or, with MEMWEAVE_REQUIRE_GPU=1 (a GPU machine's CI), fails with it, so that a GPU
// run cannot pass by skipping. Use at the top of a test body or a fixture's SetUp.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "memweave/core/config.hpp"
#include "memweave/device/device.hpp"

#define MEMWEAVE_GPU_OR_SKIP(what)                                                \
  do {                                                                            \
    const std::string memweave_no_gpu_ = ::memweave::cuda_unavailable_reason();   \
    if (!memweave_no_gpu_.empty()) {                                              \
      if (::memweave::option_bool("MEMWEAVE_REQUIRE_GPU")) {                      \
        GTEST_FAIL() << "MEMWEAVE_REQUIRE_GPU=1 but no CUDA device can be used: " \
                     << memweave_no_gpu_ << " (" << (what) << ")";                \
      }                                                                           \
      GTEST_SKIP() << "no CUDA device: " << memweave_no_gpu_ << " (" << (what)    \
                   << "; set MEMWEAVE_REQUIRE_GPU=1 to make this a failure)";     \
    }                                                                             \
  } while (0)
