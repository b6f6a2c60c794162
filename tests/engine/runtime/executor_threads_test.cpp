// The executor's hand-offs between threads, under ThreadSanitizer (label concurrent): one
// kernel thread, so no TBB arena, which TSan cannot see; what remains is the host backend's
// stream workers and the transfer engine's threads.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>

#include "engine_test_util.hpp"
#include "memweave/core/error.hpp"
#include "support/static_tls_reexec.hpp"

MEMWEAVE_REEXEC_WITH_STATIC_TLS();  // offload: the host pool

namespace memweave {
namespace {

// A run out of memory in the middle of an iteration: the steps before the failing one left
// work on the compute stream (a worker thread on the host backend), which writes what the
// report reads. The failure reaches the caller only once that work ran, so the report read
// after it races nothing (TSan reported the kernel's write of the staged-step error against
// report() here, before run_steps waited).
TEST(executor_threads_test, a_report_after_running_out_of_memory_races_no_running_work) {
  // ResNet-50 at 3 MiB under offload, which cannot evict: out of budget at step 16.
  const network net = test::zoo_net("resnet50", 8, 64, 0.0625);
  executor_options options = test::policy_options("offload", std::size_t{3} << 20, "fixed:direct");
  options.threads = 1;
  auto dev = test::make_test_device("host", std::size_t{2} << 30);
  auto data = make_synthetic_source(net[net.data_layer()].output_shape, net.classes(), 7);
  executor ex(net, *dev, options);
  EXPECT_THROW(ex.run_iteration(data.get(), 0), out_of_memory);
  const policy_report r = ex.report();
  EXPECT_EQ(r.staged_fp16_error, 0.0);
  EXPECT_GT(ex.steps().size(), 1u) << "the failure came after some steps ran";
}

}  // namespace
}  // namespace memweave
