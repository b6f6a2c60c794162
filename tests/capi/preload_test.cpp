// libmemweave_preload.so: an unmodified CUDA program (preload_probe.c, linked with the
// shared cudart only) run with LD_PRELOAD and MEMWEAVE_DEVICE=host gets its cudaMalloc,
// cudaFree and cudaMemGetInfo from memweave's pool. Needs no GPU: pool memory on the host
// backend is host-addressable, and the runtime is reached only for foreign pointers.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "support/child_process.hpp"

namespace {

struct run_result {
  int exit_code = -1;
  std::string output;  // stdout and stderr
  std::map<std::string, std::string> values;
};

// Runs `program` with this process's environment, less MEMWEAVE_* and LD_PRELOAD, plus
// `extra` ("NAME=value"); its key=value lines in `values`.
run_result run(const std::string& program, const std::vector<std::string>& extra) {
  auto env = memweave::test::environment_without({"MEMWEAVE_", "LD_PRELOAD=", "ASAN_OPTIONS="});
  // In an ASan build the probe is instrumented too, and ASan insists on coming first in the
  // initial library list; the preloaded library (which itself needs the ASan runtime) comes
  // before it. The check is only about interception order, so turn it off for the child.
  env.emplace_back("ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0");
  for (const auto& x : extra) env.push_back(x);
  const auto child = memweave::test::run_child({program}, env, 120);
  run_result r{child.exit_code, child.output, {}};
  if (child.timed_out) r.output += "\n(the probe hung and was killed after 120 s)";
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos && line.find(' ') == std::string::npos) {
      r.values[line.substr(0, eq)] = line.substr(eq + 1);
    }
  }
  return r;
}

long value(const run_result& r, const std::string& key) {
  auto it = r.values.find(key);
  if (it == r.values.end()) {
    ADD_FAILURE() << "the probe printed no " << key << "; its output:\n" << r.output;
    return -12345;
  }
  return std::strtol(it->second.c_str(), nullptr, 10);
}

const std::vector<std::string> k_host_pool = {std::string("LD_PRELOAD=") + MEMWEAVE_PRELOAD_PATH,
                                              "MEMWEAVE_DEVICE=host", "MEMWEAVE_DEVICE_BYTES=256M",
                                              "MEMWEAVE_POOL_BYTES=64M"};

TEST(memweave_preload, cuda_calls_of_an_unmodified_program_use_the_pool) {
  const run_result r = run(MEMWEAVE_PRELOAD_PROBE_PATH, k_host_pool);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(value(r, "malloc_rc"), 0) << r.output;
  EXPECT_EQ(value(r, "malloc_ptr_null"), 0) << r.output;
  EXPECT_EQ(value(r, "owns"), 1) << "the pointer is not the pool's\n" << r.output;
  EXPECT_EQ(value(r, "memory_ok"), 1) << r.output;
  EXPECT_EQ(value(r, "meminfo_rc"), 0) << r.output;
  EXPECT_EQ(value(r, "meminfo_total"), 64l << 20) << "cudaMemGetInfo's total is not the pool's";
  EXPECT_EQ(value(r, "meminfo_free"), (64l << 20) - (3l << 20));
  EXPECT_EQ(value(r, "live_stats_found"), 1) << r.output;
  EXPECT_EQ(value(r, "live_live"), 1);
  EXPECT_EQ(value(r, "live_allocations"), 1);
  EXPECT_EQ(value(r, "live_bytes_in_use"), 3l << 20);
  EXPECT_EQ(value(r, "free_rc"), 0) << r.output;
  EXPECT_EQ(value(r, "end_live"), 0);
  EXPECT_EQ(value(r, "end_frees"), 1);
  // A second cudaFree of the same pointer is the pool's to refuse, as
  // cudaErrorInvalidValue (1, what CUDA 13's cudaFree documents), and it changes nothing.
  EXPECT_EQ(value(r, "double_free_rc"), 1);
  EXPECT_EQ(value(r, "end_invalid_frees"), 1);
}

TEST(memweave_preload, free_of_a_foreign_pointer_goes_to_the_runtime) {
  const run_result r = run(MEMWEAVE_PRELOAD_PROBE_PATH, k_host_pool);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The runtime refuses a malloc'ed host pointer (no GPU: no device; with one: invalid
  // value); what the interposed cudaFree returns must be exactly the runtime's answer.
  EXPECT_NE(value(r, "real_foreign_free_rc"), 0) << r.output;
  EXPECT_EQ(value(r, "foreign_free_rc"), value(r, "real_foreign_free_rc")) << r.output;
  // ... and the pool never saw it.
  EXPECT_EQ(value(r, "after_foreign_invalid_frees"), 0) << r.output;
  EXPECT_EQ(value(r, "after_foreign_live"), 1) << r.output;
  EXPECT_EQ(value(r, "after_foreign_frees"), 0) << r.output;
}

TEST(memweave_preload, allocations_never_reach_the_runtime) {
  const run_result r = run(MEMWEAVE_PRELOAD_PROBE_PATH, k_host_pool);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Where the runtime cannot allocate (no GPU), success proves the pool served it; where it
  // can, the pool's statistics and ownership above prove it.
  if (value(r, "real_malloc_rc") != 0) {
    EXPECT_EQ(value(r, "malloc_rc"), 0) << r.output;
  }
  EXPECT_EQ(value(r, "live_allocations"), 1) << r.output;
}

TEST(memweave_preload, without_the_interposer_the_program_reaches_the_runtime) {
  // The same probe with no LD_PRELOAD: nothing of memweave is in the process.
  const run_result r = run(MEMWEAVE_PRELOAD_PROBE_PATH, {"MEMWEAVE_DEVICE=host"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(value(r, "live_stats_found"), 0) << r.output;
  EXPECT_EQ(value(r, "owns"), -1) << r.output;
  EXPECT_EQ(value(r, "malloc_rc"), value(r, "real_malloc_rc")) << r.output;
}

TEST(memweave_preload, a_bad_setting_falls_back_to_the_runtime_with_a_warning) {
  std::vector<std::string> env = k_host_pool;
  env.emplace_back("MEMWEAVE_POOL_FRACTION=7");  // not in (0, 1]: memweave cannot initialize
  const run_result r = run(MEMWEAVE_PRELOAD_PROBE_PATH, env);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("MEMWEAVE_POOL_FRACTION"), std::string::npos) << r.output;
  EXPECT_EQ(value(r, "malloc_rc"), value(r, "real_malloc_rc")) << r.output;
  EXPECT_NE(value(r, "owns"), 1) << "(-1: no pointer, as without a GPU)\n" << r.output;
  EXPECT_NE(value(r, "live_stats_rc"), 0) << "the pool must not exist\n" << r.output;
}

}  // namespace
