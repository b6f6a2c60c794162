// The drop-in allocator as a GPU program sees it, without a GPU: fake_cuda_probe (a plain
// CUDA program, tests/capi/fake_cudart/) runs over the test stand-in for the CUDA runtime
// (libcudart.so.<major> from fake_cudart.cpp, first in LD_LIBRARY_PATH), so memweave's
// real cuda backend, C API, PyTorch entry points and interposer run unchanged, with
// streams that are threads and device memory the host can read. Each case runs one
// scenario of the probe in a child process under a timeout (a deadlock fails, it does
// not hang) and passes when the probe found its expectations true.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "support/child_process.hpp"

namespace {

using run_result = memweave::test::child_result;

// Runs the probe's `scenario` with this environment less MEMWEAVE_*, FAKE_CUDART_* and
// LD_PRELOAD, plus the stand-in runtime's directory first in LD_LIBRARY_PATH and `extra`.
// `probe`: the program (the C API probe unless said).
run_result run_probe(const std::string& scenario, const std::vector<std::string>& extra,
                     int timeout_s = 60, const char* probe = MEMWEAVE_FAKE_CUDA_PROBE_PATH) {
  std::string library_path = std::string("LD_LIBRARY_PATH=") + MEMWEAVE_FAKE_CUDART_DIR;
  if (const char* old = std::getenv("LD_LIBRARY_PATH")) library_path += std::string(":") + old;
  auto env = memweave::test::environment_without(
      {"MEMWEAVE_", "FAKE_CUDART_", "LD_PRELOAD=", "ASAN_OPTIONS=", "LD_LIBRARY_PATH="});
  env.push_back(library_path);
  env.emplace_back("ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0");
  for (const auto& x : extra) env.push_back(x);
  return memweave::test::run_child({probe, scenario}, env, timeout_s);
}

const std::string k_preload = std::string("LD_PRELOAD=") + MEMWEAVE_PRELOAD_PATH;

void expect_passes(const run_result& r) {
  EXPECT_FALSE(r.timed_out) << "the probe hung (deadlock?) and was killed; its output:\n"
                            << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(fake_cuda, interposed_cuda_free_waits_for_kernels_still_reading_the_block) {
  expect_passes(run_probe("sync_free", {k_preload, "MEMWEAVE_POOL_BYTES=16M"}));
}

TEST(fake_cuda, stream_ordered_frees_are_reused_on_their_stream_and_elsewhere_only_after_it) {
  expect_passes(run_probe("async_streams", {k_preload, "MEMWEAVE_POOL_BYTES=4M"}));
}

TEST(fake_cuda, pytorch_entry_points_order_reuse_by_their_stream) {
  expect_passes(run_probe("torch_streams", {"MEMWEAVE_POOL_BYTES=16M"}));
}

TEST(fake_cuda, pytorch_out_of_memory_waits_for_pending_frees_then_throws_with_the_numbers) {
  expect_passes(run_probe("torch_oom", {"MEMWEAVE_POOL_BYTES=8M"}));
}

TEST(fake_cuda, the_current_device_chooses_the_pool_and_mem_get_info_answers_for_it) {
  expect_passes(
      run_probe("current_device", {k_preload, "FAKE_CUDART_DEVICES=2",
                                   "FAKE_CUDART_BYTES=256M,128M", "MEMWEAVE_POOL_FRACTION=0.5"}));
}

TEST(fake_cuda, threads_on_two_devices_get_their_devices_memory_without_sharing_a_block) {
  expect_passes(run_probe("threads_two_devices",
                          {k_preload, "FAKE_CUDART_DEVICES=2", "MEMWEAVE_POOL_BYTES=8M"}));
}

TEST(fake_cuda, memweave_init_with_the_interposer_preloaded_does_not_deadlock) {
  expect_passes(run_probe("init_deadlock", {k_preload, "MEMWEAVE_POOL_BYTES=16M"}, 20));
}

TEST(fake_cuda, pytorch_entry_with_the_interposer_preloaded_does_not_deadlock) {
  expect_passes(run_probe("torch_deadlock", {k_preload, "MEMWEAVE_POOL_BYTES=16M"}, 20));
}

TEST(fake_cuda, auto_without_a_gpu_refuses_instead_of_handing_out_host_memory) {
  expect_passes(run_probe("auto_no_device", {k_preload, "FAKE_CUDART_DEVICES=0"}));
}

TEST(fake_cuda, a_stream_of_another_device_allocates_there_and_frees_in_its_order) {
  expect_passes(run_probe("stream_of_another_device",
                          {k_preload, "FAKE_CUDART_DEVICES=2", "MEMWEAVE_POOL_BYTES=8M"}));
}

TEST(fake_cuda, a_pool_that_cannot_be_made_forwards_to_the_runtime) {
  const run_result r = run_probe("pool_cannot_be_made", {k_preload, "MEMWEAVE_POOL_BYTES=1G"});
  expect_passes(r);
  // One warning says why, naming the pool's size against the device.
  EXPECT_NE(r.output.find("memweave cannot serve this device"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("making the pool of device 0"), std::string::npos) << r.output;
}

TEST(fake_cuda, interposed_frees_of_what_is_not_live_return_invalid_value) {
  expect_passes(run_probe("bad_frees", {k_preload, "MEMWEAVE_POOL_BYTES=8M"}));
}

TEST(fake_cuda, each_device_traces_to_its_own_file) {
  const std::string path = ::testing::TempDir() + "fake_cuda_two_devices.trace";
  std::remove(path.c_str());
  std::remove((path + ".device1").c_str());
  expect_passes(run_probe(
      "traces_two_devices",
      {k_preload, "FAKE_CUDART_DEVICES=2", "MEMWEAVE_POOL_BYTES=8M", "MEMWEAVE_TRACE=" + path}));
  // Each file holds its device's events alone: 2 x 3 pairs on device 0, 3 on device 1.
  const auto events = [](const std::string& file) {
    std::ifstream in(file);
    std::string line;
    int n = 0;
    while (std::getline(in, line)) n += !line.empty() && line[0] != '#';
    return n;
  };
  EXPECT_EQ(events(path), 12) << path;
  EXPECT_EQ(events(path + ".device1"), 6) << path << ".device1";
}

TEST(fake_cuda, pytorch_device_index_outside_the_runtimes_devices_is_named) {
  expect_passes(run_probe("torch_bad_device", {"FAKE_CUDART_DEVICES=2", "MEMWEAVE_POOL_BYTES=8M"}));
}

TEST(fake_cuda, a_thread_that_never_chose_a_device_gets_no_context_on_gpu_0) {
  expect_passes(
      run_probe("no_context_restore", {"FAKE_CUDART_DEVICES=2", "MEMWEAVE_POOL_BYTES=16M"}));
}

TEST(fake_cuda, each_devices_default_stream_orders_its_own_frees) {
  expect_passes(run_probe("default_streams_of_two_devices",
                          {k_preload, "FAKE_CUDART_DEVICES=2", "MEMWEAVE_POOL_BYTES=8M"}));
}

TEST(fake_cuda, pytorch_free_on_the_default_stream_of_a_device_not_current) {
  expect_passes(run_probe("torch_default_stream_of_another_device",
                          {"FAKE_CUDART_DEVICES=2", "MEMWEAVE_POOL_BYTES=8M"}));
}

TEST(fake_cuda, pytorch_free_naming_another_device_is_ordered_on_the_blocks_own_and_warned) {
  const run_result r = run_probe("torch_free_naming_another_device",
                                 {"FAKE_CUDART_DEVICES=2", "MEMWEAVE_POOL_BYTES=8M"});
  expect_passes(r);
  EXPECT_NE(r.output.find("device 0 named, but the block is device 1's"), std::string::npos)
      << r.output;
}

TEST(fake_cuda, cuda_get_last_error_sees_interposed_failures_and_keeps_the_programs) {
  const run_result r = run_probe("last_error", {k_preload, "MEMWEAVE_POOL_BYTES=8M"});
  expect_passes(r);
  // The out-of-memory is logged with the numbers: a plain CUDA program sees no C API.
  EXPECT_NE(r.output.find("cudaMalloc failed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("largest free run"), std::string::npos) << r.output;
}

TEST(fake_cuda, a_capturing_streams_allocations_are_the_graphs_and_its_pool_frees_refused) {
  expect_passes(run_probe("stream_capture", {k_preload, "MEMWEAVE_POOL_BYTES=8M"}));
}

TEST(fake_cuda, pytorchs_global_mode_capture_is_not_invalidated_by_the_pools_event_queries) {
  expect_passes(run_probe("torch_capture_global", {"MEMWEAVE_POOL_BYTES=8M"}));
}

TEST(fake_cuda, a_cuda_free_a_global_capture_forbids_to_wait_is_refused_and_changes_nothing) {
  expect_passes(run_probe("free_during_global_capture", {k_preload, "MEMWEAVE_POOL_BYTES=8M"}));
}

TEST(fake_cuda, after_cuda_device_reset_allocations_come_from_a_new_pool) {
  // The pinned host pool loads jemalloc, which needs static TLS (README).
  expect_passes(
      run_probe("device_reset", {k_preload, "MEMWEAVE_POOL_BYTES=8M", "MEMWEAVE_HOST_POOL_BYTES=8M",
                                 "GLIBC_TUNABLES=glibc.rtld.optional_static_tls=16384"}));
}

TEST(fake_cuda, a_reset_waits_for_the_blocks_of_other_pools_freed_on_its_streams) {
  expect_passes(run_probe("reset_of_the_freeing_streams_device",
                          {k_preload, "FAKE_CUDART_DEVICES=2", "MEMWEAVE_POOL_BYTES=4M"}));
}

TEST(fake_cuda, a_reset_of_a_device_without_a_pool_still_waits_for_the_events_it_owns) {
  expect_passes(run_probe("reset_of_a_device_without_a_pool",
                          {k_preload, "FAKE_CUDART_DEVICES=2", "MEMWEAVE_POOL_BYTES=4M"}));
}

TEST(fake_cuda, a_reset_frees_its_devices_pinned_memory_and_no_other_devices) {
  expect_passes(run_probe(
      "host_pools_of_two_devices",
      {k_preload, "FAKE_CUDART_DEVICES=2", "MEMWEAVE_POOL_BYTES=4M", "MEMWEAVE_HOST_POOL_BYTES=8M",
       "GLIBC_TUNABLES=glibc.rtld.optional_static_tls=16384"}));
}

TEST(fake_cuda, a_reset_of_one_device_waits_for_threads_scanning_its_pool_from_another) {
  expect_passes(run_probe("reset_beside_another_device",
                          {k_preload, "FAKE_CUDART_DEVICES=2", "MEMWEAVE_POOL_BYTES=4M"}));
}

TEST(fake_cuda, pytorch_entry_points_in_a_child_forked_while_logging_do_not_hang) {
  expect_passes(run_probe("torch_fork_while_logging", {"MEMWEAVE_POOL_BYTES=8M"}, 120));
}

TEST(fake_cuda, a_forked_child_is_refused_instead_of_hanging) {
  expect_passes(run_probe("fork_child_refuses", {k_preload, "MEMWEAVE_POOL_BYTES=8M"}, 120));
}

TEST(fake_cuda, a_failing_call_from_a_global_destructor_fails_cleanly) {
  expect_passes(run_probe("error_at_exit", {k_preload, "MEMWEAVE_POOL_BYTES=8M"}));
}

TEST(fake_cuda, a_retired_streams_blocks_wait_for_their_events) {
  const run_result r =
      run_probe("retired_stream", {k_preload, "MEMWEAVE_POOL_BYTES=8M", "MEMWEAVE_LOG=debug"});
  expect_passes(r);
  // The interposed cudaStreamDestroy retired the stream before the runtime destroyed it.
  const std::size_t destroyed = r.output.find("destroying the stream");
  ASSERT_NE(destroyed, std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 block(s) freed on it now wait for their events", destroyed),
            std::string::npos)
      << r.output;
}

// The cost model's `auto` on a GPU: the attributes' peaks and the slower way of the link,
// timed once per device; the C++ library's cuda backend, not the C API.
TEST(fake_cuda, a_gpus_throughput_is_its_attributes_and_the_slower_way_of_a_timed_copy) {
  expect_passes(run_probe("timed_link", {"FAKE_CUDART_H2D_GBPS=25", "FAKE_CUDART_D2H_GBPS=12.34"},
                          60, MEMWEAVE_FAKE_CUDA_DEVICE_PROBE_PATH));
}

TEST(fake_cuda, without_page_locked_memory_the_link_is_untimed_and_the_error_cleared) {
  expect_passes(run_probe("untimed_link", {"FAKE_CUDART_HOST_ALLOC_FAILS=1"}, 60,
                          MEMWEAVE_FAKE_CUDA_DEVICE_PROBE_PATH));
}

TEST(fake_cuda, without_device_memory_for_the_probe_the_link_is_untimed) {
  expect_passes(run_probe("untimed_link", {"FAKE_CUDART_BYTES=32M"}, 60,
                          MEMWEAVE_FAKE_CUDA_DEVICE_PROBE_PATH));
}

TEST(fake_cuda, a_pytorch_free_on_another_devices_default_stream_leaves_the_thread_as_it_was) {
  expect_passes(run_probe("torch_free_leaves_the_thread_as_it_was",
                          {"FAKE_CUDART_DEVICES=2", "MEMWEAVE_POOL_BYTES=8M"}));
}

}  // namespace
