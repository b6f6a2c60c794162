// The executor on the cuda device: a small ResNet-50 trains under liveness and under utp at
// a tight budget with losses close to the host's, the heap sees what `plan` (null) predicts
// step by step, tensors move under utp, and workspace selection chooses among cuDNN's
// algorithms. Label gpu: every test skips without a CUDA device.
#include <cmath>
#include <string>
#include <vector>

#include "engine_test_util.hpp"
#include "memweave/core/error.hpp"
#include "support/gpu_or_skip.hpp"
#include "support/static_tls_reexec.hpp"

MEMWEAVE_REEXEC_WITH_STATIC_TLS();

namespace memweave {
namespace {

using test::policy_options;

constexpr std::size_t k_ample = std::size_t{512} << 20;

struct cuda_run {
  std::vector<double> losses;
  policy_report report;  ///< of the last iteration
};

cuda_run train_on_cuda(const network& net, const executor_options& o, int iterations) {
  device_options d;
  d.kind = "cuda";
  auto dev = make_device(d);
  auto data = make_synthetic_source(net[net.data_layer()].output_shape, net.classes(), 7);
  executor ex(net, *dev, o);
  cuda_run r;
  for (int i = 0; i < iterations; ++i) r.losses.push_back(ex.run_iteration(data.get(), i));
  r.report = ex.report();
  return r;
}

policy_report plan_on_null(const network& net, const executor_options& o) {
  auto dev = test::make_test_device("null", std::size_t{1} << 40);
  executor ex(net, *dev, o);
  ex.run_iteration(nullptr, 0);
  return ex.report();
}

// cuDNN's names of the forward and backward convolution algorithms (conv_algo_name).
bool is_cudnn_algorithm(const std::string& name) {
  for (const char* n :
       {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING", "WINOGRAD",
        "WINOGRAD_NONFUSED", "ALGO_0", "ALGO_1", "ALGO_3"}) {
    if (name == n) return true;
  }
  return false;
}

// The smallest budget utp runs `net` in without workspaces (planned on null).
std::size_t tight_utp_budget(const network& net) {
  return test::smallest_budget(net, policy_options("utp", 0, "none"));
}

TEST(cuda_executor_test, trains_under_liveness_and_tight_utp_with_losses_close_to_the_host) {
  MEMWEAVE_GPU_OR_SKIP("nothing to train on");
  const network net = test::small_zoo("resnet50");
  const auto host = test::train(net, policy_options("liveness", k_ample, "none"), 2);
  for (const auto& [policy, budget] : std::vector<std::pair<std::string, std::size_t>>{
           {"liveness", k_ample}, {"utp", tight_utp_budget(net)}}) {
    SCOPED_TRACE(policy + " budget " + std::to_string(budget));
    const cuda_run got = train_on_cuda(net, policy_options(policy, budget, "none"), 2);
    ASSERT_EQ(got.losses.size(), host.losses.size());
    for (std::size_t i = 0; i < got.losses.size(); ++i) {
      EXPECT_TRUE(std::isfinite(got.losses[i])) << "iteration " << i;
      // FP32 in other summation orders: close, not bit-identical.
      EXPECT_NEAR(got.losses[i], host.losses[i], 2e-3 * std::max(1.0, std::abs(host.losses[i])))
          << "iteration " << i;
    }
  }
}

// The evaluation pass on cuda (cuDNN's BN inference, dropout with ratio 0) from the host's
// trained weights: close to the host's evaluation of them.
TEST(cuda_executor_test, evaluation_from_the_host_weights_is_close_to_the_host) {
  MEMWEAVE_GPU_OR_SKIP("nothing to evaluate on");
  const network net = test::tiny_trainable_net();
  const executor_options o = policy_options("liveness", k_ample, "none");
  auto host_dev = test::make_test_device("host");
  auto data = make_synthetic_source(net[net.data_layer()].output_shape, net.classes(), 7);
  executor host(net, *host_dev, o);
  for (int i = 0; i < 5; ++i) host.run_iteration(data.get(), i);
  const evaluation_result expected = host.evaluate(data.get(), 100, 4);
  device_options d;
  d.kind = "cuda";
  auto dev = make_device(d);
  executor ex(net, *dev, o);
  const std::vector<std::string> names = host.persistent_names();
  const auto values = host.read_persistent();
  for (std::size_t i = 0; i < names.size(); ++i) ex.write(names[i], values[i]);
  const evaluation_result got = ex.evaluate(data.get(), 100, 4);
  EXPECT_NEAR(got.loss, expected.loss, 2e-3 * std::max(1.0, std::abs(expected.loss)));
  EXPECT_NEAR(got.accuracy, expected.accuracy, 0.0625);  // one image in 16 may flip
  EXPECT_EQ(ex.read_persistent(), values);               // nothing updated
}

TEST(cuda_executor_test, plan_and_cuda_agree_on_every_step_and_utp_moves_bytes_when_tight) {
  MEMWEAVE_GPU_OR_SKIP("nothing to compare");
  const network net = test::small_zoo("resnet50");
  for (const auto& [policy, budget] : std::vector<std::pair<std::string, std::size_t>>{
           {"liveness", k_ample}, {"utp", tight_utp_budget(net)}}) {
    SCOPED_TRACE(policy + " budget " + std::to_string(budget));
    // No workspace on either backend: the heap then sees the same sequence.
    const executor_options o = policy_options(policy, budget, "none");
    const policy_report planned = plan_on_null(net, o);
    const policy_report trained = train_on_cuda(net, o, 1).report;
    ASSERT_EQ(trained.steps.size(), planned.steps.size());
    for (std::size_t s = 0; s < trained.steps.size(); ++s) {
      EXPECT_EQ(trained.steps[s].heap_bytes, planned.steps[s].heap_bytes) << "step " << s;
      EXPECT_EQ(trained.steps[s].bytes_live, planned.steps[s].bytes_live) << "step " << s;
      EXPECT_EQ(trained.steps[s].tensors_live, planned.steps[s].tensors_live) << "step " << s;
      EXPECT_EQ(trained.steps[s].workspace_bytes, 0u) << "step " << s;
    }
    EXPECT_EQ(trained.bytes_offloaded, planned.bytes_offloaded);
    EXPECT_EQ(trained.bytes_prefetched, planned.bytes_prefetched);
    EXPECT_EQ(trained.evictions, planned.evictions);
    if (policy == "utp") {
      EXPECT_GT(trained.bytes_offloaded, 0u);
    }
  }
}

TEST(cuda_executor_test, convolutions_run_cudnn_algorithms_chosen_within_the_free_memory) {
  MEMWEAVE_GPU_OR_SKIP("nothing to choose on");
  const network net = test::small_zoo("resnet50");
  const cuda_run got = train_on_cuda(net, policy_options("liveness", k_ample, "dynamic"), 2);
  int conv_steps = 0;
  for (const step_record& s : got.report.steps) {
    if (s.algorithm.empty()) continue;
    ++conv_steps;
    const auto slash = s.algorithm.find('/');
    EXPECT_TRUE(is_cudnn_algorithm(s.algorithm.substr(0, slash))) << s.layer << " " << s.algorithm;
    if (slash != std::string::npos) {
      EXPECT_TRUE(is_cudnn_algorithm(s.algorithm.substr(slash + 1)))
          << s.layer << " " << s.algorithm;
    }
  }
  EXPECT_GT(conv_steps, 0);
  for (double loss : got.losses) EXPECT_TRUE(std::isfinite(loss));
}

TEST(cuda_executor_test, a_fixed_host_algorithm_is_rejected_with_cudnns_candidates) {
  MEMWEAVE_GPU_OR_SKIP("nothing to reject on");
  const network net = test::small_zoo("resnet50");
  try {
    (void)train_on_cuda(net, policy_options("liveness", k_ample, "fixed:im2col_image"), 1);
    ADD_FAILURE() << "fixed:im2col_image ran on cuda";
  } catch (const invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("im2col_image"), std::string::npos) << what;
    EXPECT_NE(what.find("cuda|"), std::string::npos) << what;  // a cuDNN candidate list
  }
}

}  // namespace
}  // namespace memweave
