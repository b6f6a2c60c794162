// The LD_PRELOAD interposer on a real GPU (label gpu): cuda_dropin_probe, a plain CUDA
// program over the real runtime, run with libmemweave_preload.so preloaded, one scenario a
// child process under a timeout. fake_cuda_test checks the same contracts over the stand-in
// runtime on every machine; this is where the runtime itself answers (graph instantiation
// and launch, what cudaDeviceReset really frees). Skips without a device.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "support/child_process.hpp"
#include "support/gpu_or_skip.hpp"

namespace {

// The build's file, or else one of that name beside this program (a packed copy on a GPU
// machine: scripts/gpu_pack.sh).
std::string beside_or_built(const char* built) {
  if (std::filesystem::exists(built)) return built;
  const auto self = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  return (self / std::filesystem::path(built).filename()).string();
}

// `preloaded` false: the probe over the runtime alone (a control).
void expect_scenario_passes(const std::string& scenario, bool preloaded = true) {
  MEMWEAVE_GPU_OR_SKIP("the interposer on the real CUDA runtime");
  auto env = memweave::test::environment_without(
      {"MEMWEAVE_", "LD_PRELOAD=", "ASAN_OPTIONS=", "GLIBC_TUNABLES="});
  // As the other preloading tests: ASan's check of the library order is off for the child.
  env.emplace_back("ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0");
  if (preloaded) env.push_back("LD_PRELOAD=" + beside_or_built(MEMWEAVE_PRELOAD_PATH));
  env.emplace_back("MEMWEAVE_POOL_BYTES=64M");
  env.emplace_back("MEMWEAVE_HOST_POOL_BYTES=8M");
  // The page-locked host pool loads jemalloc, which needs static TLS (README).
  env.emplace_back("GLIBC_TUNABLES=glibc.rtld.optional_static_tls=16384");
  const auto r = memweave::test::run_child(
      {beside_or_built(MEMWEAVE_CUDA_DROPIN_PROBE_PATH), scenario}, env, 120);
  EXPECT_FALSE(r.timed_out) << "the probe hung and was killed; its output:\n" << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(cuda_dropin, the_runtime_alone_captures_allocates_in_and_launches_the_graph) {
  expect_scenario_passes("stream_capture_runtime", false);
}

TEST(cuda_dropin, a_captured_graph_allocates_its_own_and_runs_while_the_pool_serves_around_it) {
  expect_scenario_passes("stream_capture");
}

TEST(cuda_dropin, pytorchs_global_mode_capture_over_the_entry_points_ends_and_launches) {
  expect_scenario_passes("torch_capture_global");
}

TEST(cuda_dropin, a_cuda_free_a_global_capture_forbids_to_wait_is_refused_and_changes_nothing) {
  expect_scenario_passes("free_during_global_capture");
}

TEST(cuda_dropin, after_cuda_device_reset_the_pools_are_new_and_usable) {
  expect_scenario_passes("device_reset");
}

}  // namespace
