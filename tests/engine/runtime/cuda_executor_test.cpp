// The executor on the cuda device: a small ResNet-50 trains under liveness and under utp at
// a tight budget with losses close to the host's, the heap sees what `plan` (null) predicts
// step by step, tensors move under utp, and workspace selection chooses among cuDNN's
// algorithms; compressed swaps (FP16, LDFG) convert with the host codec's bits and run as
// planned. Label gpu: every test skips without a CUDA device.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/runtime/cuda_fp16_codec.hpp"
#include "engine_test_util.hpp"
#include "memweave/core/error.hpp"
#include "memweave/engine/layer_memory.hpp"
#include "memweave/engine/route.hpp"
#include "memweave/engine/split_plan.hpp"
#include "memweave/swap/fp16.hpp"
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

std::unique_ptr<device> cuda_device() {
  device_options d;
  d.kind = "cuda";
  return make_device(d);
}

// The synthetic batches every test here trains on (seed 7, as test::train's).
std::unique_ptr<data_source> data_for(const network& net) {
  return make_synthetic_source(net[net.data_layer()].output_shape, net.classes(), 7);
}

cuda_run train_on_cuda(const network& net, const executor_options& o, int iterations) {
  auto dev = cuda_device();
  auto data = data_for(net);
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

// Every loss finite, and the first `compared` within 2e-3 (relative, above 1) of `ref`'s:
// FP32 in other summation orders, close but not bit-identical.
void expect_losses_close(const std::vector<double>& got, const std::vector<double>& ref,
                         int compared) {
  ASSERT_EQ(got.size(), ref.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(std::isfinite(got[i])) << "iteration " << i;
    if (static_cast<int>(i) >= compared) continue;
    EXPECT_NEAR(got[i], ref[i], 2e-3 * std::max(1.0, std::abs(ref[i]))) << "iteration " << i;
  }
}

// The smallest budget utp runs `net` in without workspaces (planned on null).
std::size_t tight_utp_budget(const network& net) {
  return test::smallest_budget(net, policy_options("utp", 0, "none"));
}

// Training on cuda follows the host's losses where the comparison means something. A small
// VGG-16 (no BN) trains three iterations to within FP32's other summation orders. A small
// ResNet-50's first loss (forward only) is compared, and its later ones are only required
// finite: BN over 2 values per channel (batch 2, 1x1 at res5) makes its gradients pure
// cancellation, and the host run against itself with another convolution algorithm already
// parts by 3e-3 after one update and 6% after two (measured at batch 8: its losses are
// chaotic in the last bits), so no tolerance would separate a bug from rounding there.
TEST(cuda_executor_test, trains_under_liveness_and_tight_utp_with_losses_close_to_the_host) {
  MEMWEAVE_GPU_OR_SKIP("nothing to train on");
  for (const std::string name : {"vgg16", "resnet50"}) {
    const network net = test::small_zoo(name);
    const int iterations = name == "vgg16" ? 3 : 2;
    const auto host = test::train(net, policy_options("liveness", k_ample, "none"), iterations);
    for (const auto& [policy, budget] : std::vector<std::pair<std::string, std::size_t>>{
             {"liveness", k_ample}, {"utp", tight_utp_budget(net)}}) {
      SCOPED_TRACE(name + " " + policy + " budget " + std::to_string(budget));
      const cuda_run got = train_on_cuda(net, policy_options(policy, budget, "none"), iterations);
      expect_losses_close(got.losses, host.losses, name == "resnet50" ? 1 : iterations);
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
  auto data = data_for(net);
  executor host(net, *host_dev, o);
  for (int i = 0; i < 5; ++i) host.run_iteration(data.get(), i);
  const evaluation_result expected = host.evaluate(data.get(), 100, 4);
  auto dev = cuda_device();
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

// Memory of the cuda device, given back on scope exit (a failed assertion returns early).
struct device_block {
  device& dev;
  std::size_t bytes;
  bool pinned;
  void* p;
  device_block(device& d, std::size_t b, bool host_pinned)
      : dev(d), bytes(b), pinned(host_pinned), p(pinned ? d.allocate_pinned(b) : d.allocate(b)) {}
  ~device_block() { pinned ? dev.deallocate_pinned(p, bytes) : dev.deallocate(p, bytes); }
  device_block(const device_block&) = delete;
  device_block& operator=(const device_block&) = delete;
};

std::vector<std::uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<std::uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

// Values of every kind fp16 meets, then random ones of magnitudes 2^-30 to 2^10, in all a
// chunk of the codec and more: ties, fp16 subnormals, values rounding to 0, fp32
// subnormals, and with `out_of_range` overflows, infinities and NaNs with payloads.
std::vector<float> fp16_cases(bool out_of_range) {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 3.14159265f, -2.71828182f, 1e-3f, -7.5e-6f};
  v.insert(v.end(), {1.0f + 0x1p-11f, 1.0f + 0x3p-11f});  // ties: to even, down and up
  v.insert(v.end(), {65504.0f, 65519.0f});                // the largest fp16, and just below inf
  v.insert(v.end(), {0x1p-14f, 0x1p-24f, -0x1.4p-20f});   // fp16's smallest normal, subnormals
  v.insert(v.end(), {0x1p-25f, 0x1.8p-25f, 0x1p-26f});    // to 0 (a tie), up, to 0
  v.push_back(std::numeric_limits<float>::denorm_min());  // an fp32 subnormal: 0
  if (out_of_range) {
    const float nan_payload = std::bit_cast<float>(0x7fa01234u);
    // Its payload lies below fp16's bits: the quiet bit is set.
    const float nan_low = std::bit_cast<float>(0xff800001u);
    v.insert(v.end(), {65520.0f, -1e9f, std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN(), nan_payload, nan_low});
  }
  std::mt19937 gen(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 10);
  while (v.size() < (std::size_t{1} << 20) + 4099)
    v.push_back(std::ldexp(normal(gen), exponent(gen)));
  return v;
}

// The cuda codec's fp16 bytes, largest error and expanded values are the host codec's, bit
// for bit, over more than one staging chunk.
TEST(cuda_executor_test, the_fp16_codec_gives_the_host_codecs_bits_and_largest_error) {
  MEMWEAVE_GPU_OR_SKIP("nothing to convert on");
  auto dev = cuda_device();
  auto codec = make_cuda_fp16_codec(*dev);
  stream& out = dev->get_stream(stream_role::device_to_host);
  stream& in = dev->get_stream(stream_role::host_to_device);
  for (const bool out_of_range : {false, true}) {
    SCOPED_TRACE(out_of_range ? "with overflows, infinities and NaNs" : "within fp16's range");
    const std::vector<float> values = fp16_cases(out_of_range);
    const std::size_t n = values.size();
    std::vector<std::uint16_t> expected(n);
    const double expected_error = fp16_encode(expected.data(), values.data(), n);
    std::vector<float> expected_back(n);
    fp16_decode(expected_back.data(), expected.data(), n);

    device_block src(*dev, n * sizeof(float), false), back(*dev, n * sizeof(float), false);
    device_block host(*dev, n * sizeof(std::uint16_t), true);
    out.copy_async(src.p, values.data(), n * sizeof(float), copy_kind::host_to_device);
    out.synchronize();
    std::atomic<double> error{-1.0};
    codec->encode(out, host.p, src.p, n, error);
    out.synchronize();
    std::vector<std::uint16_t> got(n);
    std::memcpy(got.data(), host.p, n * sizeof(std::uint16_t));
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(got[i], expected[i]) << "value " << i << " = " << values[i];
    }
    EXPECT_EQ(error.load(), expected_error);
    if (out_of_range) {
      EXPECT_TRUE(std::isinf(error.load())) << "an overflow shows as inf";
    } else {
      EXPECT_LE(error.load(), fp16_max_relative_error);
    }

    codec->decode(in, back.p, host.p, n);
    std::vector<float> got_back(n);
    in.copy_async(got_back.data(), back.p, n * sizeof(float), copy_kind::device_to_host);
    in.synchronize();
    EXPECT_EQ(bits_of(got_back), bits_of(expected_back));
  }
  // reserve() takes all the codec's memory (the executor's staging codec takes it at
  // construction): a fresh codec's work takes none after it (the kernels' module is loaded
  // by now, so the free bytes move only by what the codec allocates).
  auto reserved = make_cuda_fp16_codec(*dev);
  const std::size_t before = dev->memory().free_bytes;
  reserved->reserve();
  const std::size_t after_reserve = dev->memory().free_bytes;
  EXPECT_LT(after_reserve, before) << "reserve took no device memory";
  const std::vector<float> values = fp16_cases(false);
  const std::size_t n = values.size();
  device_block src(*dev, n * sizeof(float), false), back(*dev, n * sizeof(float), false);
  device_block host(*dev, n * sizeof(std::uint16_t), true);
  const std::size_t blocks_taken = dev->memory().free_bytes;
  std::atomic<double> error{-1.0};
  reserved->encode(out, host.p, src.p, n, error);
  out.synchronize();
  reserved->decode(in, back.p, host.p, n);
  in.synchronize();
  EXPECT_EQ(dev->memory().free_bytes, blocks_taken) << "encode or decode took memory";
}

// Training under `all` with FP16 compression (MEMWEAVE_SCHEDULE_COMPRESS=fp16, opt-in and
// lossy) on cuda: the swaps the plan compresses travel as fp16 (the same bytes as `plan`
// says), each value within fp16's rounding, and the losses stay close to the host's run
// with the same compression. A VGG-16 (no BN: its losses are not chaotic in the last bits,
// see above) at 3/4 of its peak, where the plan compresses six swaps.
TEST(cuda_executor_test, compressed_swaps_run_as_planned_within_fp16_rounding) {
  MEMWEAVE_GPU_OR_SKIP("nothing to train on");
  const network net = test::zoo_net("vgg16", 16, 64, 0.0625);
  const std::size_t peak = plan_on_null(net, policy_options("liveness", 0, "none")).peak_bytes;
  executor_options o = policy_options("all", peak / 4 * 3, "none");
  o.exact = false;
  o.schedule.compress = true;
  o.link_gbps = 2.0;               // planned for a slow link: halving the swaps pays
  o.replan_from_measured = false;  // the model's schedule on both devices
  constexpr int iterations = 3;
  auto null_dev = test::make_test_device("null", std::size_t{1} << 40);
  executor planner(net, *null_dev, o);
  for (int i = 0; i < iterations; ++i) planner.run_iteration(nullptr, i);
  const policy_report planned = planner.report();
  ASSERT_GT(planned.bytes_compressed, 0u) << "the plan compresses nothing";

  const cuda_run got = train_on_cuda(net, o, iterations);
  EXPECT_EQ(got.report.bytes_compressed, planned.bytes_compressed);
  EXPECT_GT(got.report.max_compression_error, 0.0);
  EXPECT_LE(got.report.max_compression_error, fp16_max_relative_error);
  const test::training_result host = test::train(net, o, iterations);
  ASSERT_EQ(got.losses.size(), host.losses.size());
  for (std::size_t i = 0; i < got.losses.size(); ++i) {
    EXPECT_TRUE(std::isfinite(got.losses[i])) << "iteration " << i;
    EXPECT_NEAR(got.losses[i], host.losses[i], 2e-3 * std::max(1.0, std::abs(host.losses[i])))
        << "iteration " << i;
  }
}

// An executor that only evaluates measures only the forward passes: a fixed algorithm named
// for the forward pass (whose name the backward passes do not have) runs its evaluation.
TEST(cuda_executor_test, an_evaluation_only_executor_takes_a_fixed_forward_algorithm) {
  MEMWEAVE_GPU_OR_SKIP("nothing to evaluate on");
  const network net = test::tiny_trainable_net();
  executor_options o = policy_options("liveness", k_ample, "fixed:IMPLICIT_GEMM");
  o.evaluation_only = true;
  auto dev = cuda_device();
  auto data = data_for(net);
  executor ex(net, *dev, o);
  const evaluation_result got = ex.evaluate(data.get(), 0, 2);
  EXPECT_TRUE(std::isfinite(got.loss));
}

// On cuda the first iteration is cold (modules loaded at first launch, cuDNN's plans built):
// `all` re-plans from the second iteration's measured times, not the first's.
TEST(cuda_executor_test, the_schedule_is_replanned_from_the_second_iteration_not_the_cold_first) {
  MEMWEAVE_GPU_OR_SKIP("nothing to measure");
  const network net = test::zoo_net("resnet50", 8, 64, 0.0625);
  const std::size_t peak = plan_on_null(net, policy_options("liveness", 0, "none")).peak_bytes;
  executor_options o = policy_options("all", peak / 2, "none");
  o.replan_from_measured = true;
  auto dev = cuda_device();
  auto data = data_for(net);
  executor ex(net, *dev, o);
  ASSERT_NE(ex.schedule(), nullptr) << "no schedule at half the peak";
  EXPECT_FALSE(ex.settled());
  ex.run_iteration(data.get(), 0);
  const replan_report after_first = ex.report().replan;
  EXPECT_EQ(after_first.measured_seconds, 0.0) << "measured the cold first iteration";
  EXPECT_TRUE(after_first.note.empty()) << after_first.note;
  EXPECT_FALSE(ex.settled());
  ex.run_iteration(data.get(), 1);
  const replan_report after_second = ex.report().replan;
  EXPECT_GT(after_second.measured_seconds, 0.0);
  EXPECT_EQ(after_second.measured_iteration, 2);
  EXPECT_GT(after_second.model_seconds, 0.0);
}

// The budget of 0.6 x `net`'s max(l_i) (at least the split floor) and the split plan that fits
// it in micro-batches alone (no channel groups: those have their own test below).
struct below_largest_layer {
  std::size_t max_layer_bytes = 0;
  std::size_t budget = 0;
  std::vector<int> parts;  ///< per route step
  std::size_t split_steps = 0;
};

below_largest_layer split_below_largest_layer(const network& net) {
  const route r(net);
  const tensor_table table(net, r);
  const layer_memory memory(table);
  const split_plan ample =
      plan_splits(net, table, memory, cost_model{}, std::size_t{1} << 40, 1024, "test", false);
  below_largest_layer b;
  b.max_layer_bytes = ample.max_layer_bytes;
  b.budget = std::max(static_cast<std::size_t>(0.6 * static_cast<double>(ample.max_layer_bytes)),
                      ample.floor_bytes);
  const split_plan plan =
      plan_splits(net, table, memory, cost_model{}, b.budget, 1024, "test", false);
  b.parts = plan.parts(table.step_count());
  b.split_steps = plan.split_count();
  return b;
}

// A staged run's first iteration on cuda step by step where `plan` (null) puts it: the heap's
// bytes and live tensors, and the bytes staged.
void expect_as_planned(const network& net, const executor_options& o) {
  const policy_report planned = plan_on_null(net, o);
  const policy_report first = train_on_cuda(net, o, 1).report;
  ASSERT_EQ(first.steps.size(), planned.steps.size());
  for (std::size_t st = 0; st < first.steps.size(); ++st) {
    EXPECT_EQ(first.steps[st].heap_bytes, planned.steps[st].heap_bytes) << "step " << st;
    EXPECT_EQ(first.steps[st].tensors_live, planned.steps[st].tensors_live) << "step " << st;
  }
  EXPECT_EQ(first.bytes_staged, planned.bytes_staged);
}

// TSPLIT on cuda: at 0.6 x max(l_i) the steps over the budget run micro-batch by micro-batch
// with the cuda kernels, their micro-tensors in page-locked host memory. The heap stays
// within the budget, below max(l_i), and step by step where `plan` (null) puts it (utp); the
// losses follow the unsplit cuda run: VGG-16's three iterations, ResNet-50's first (its BN
// statistics summed over the micro-batches; its later losses are chaotic, as above).
TEST(cuda_executor_test, trains_below_the_largest_layer_in_micro_batches) {
  MEMWEAVE_GPU_OR_SKIP("nothing to split on");
  for (const std::string name : {"vgg16", "resnet50"}) {
    const network net = test::small_zoo(name, 8);
    const below_largest_layer split = split_below_largest_layer(net);
    const std::size_t budget = split.budget;
    ASSERT_GT(split.split_steps, 0u) << name;
    const int iterations = name == "vgg16" ? 3 : 2;
    const cuda_run whole =
        train_on_cuda(net, policy_options("liveness", k_ample, "none"), iterations);
    for (const std::string policy : {"utp", "all"}) {
      SCOPED_TRACE(name + " " + policy + " budget " + std::to_string(budget));
      executor_options o = policy_options(policy, budget, "none");
      o.split_parts = split.parts;
      o.split_channel_groups = false;
      const cuda_run got = train_on_cuda(net, o, iterations);
      EXPECT_GT(got.report.staged_steps, 0u);
      EXPECT_GT(got.report.bytes_staged, 0u);
      std::size_t peak = 0;
      for (const step_record& st : got.report.steps) peak = std::max(peak, st.heap_bytes);
      EXPECT_LE(peak, budget);
      EXPECT_LT(peak, split.max_layer_bytes);
      expect_losses_close(got.losses, whole.losses, name == "resnet50" ? 1 : iterations);
      if (policy == "utp") expect_as_planned(net, o);
    }
  }
}

// MEMWEAVE_SPLIT_COMPRESS=fp16 on cuda: the micro-tensors held as fp16 cross as half the bytes,
// the bytes `plan` charges (utp decides from the budget and residency: the fp32 run's bytes,
// those of the fp16 tensors halved); each value is rounded on the device with the host codec's
// bits, the largest error reported within fp16's rounding; the first loss (the forward pass)
// stays within a few roundings of the exact cuda run's.
TEST(cuda_executor_test, fp16_micro_tensors_cross_as_half_the_bytes_within_fp16_rounding) {
  MEMWEAVE_GPU_OR_SKIP("nothing to split on");
  for (const std::string name : {"vgg16", "resnet50"}) {
    SCOPED_TRACE(name);
    const network net = test::small_zoo(name, 8);
    const below_largest_layer split = split_below_largest_layer(net);
    const std::size_t budget = split.budget;
    ASSERT_GT(split.split_steps, 0u);
    executor_options exact = policy_options("utp", budget, "none");
    exact.split_parts = split.parts;
    exact.split_channel_groups = false;
    executor_options o = exact;
    o.exact = false;
    o.split_compress = true;
    const cuda_run whole = train_on_cuda(net, exact, 1);
    const cuda_run got = train_on_cuda(net, o, 1);
    const policy_report planned = plan_on_null(net, o);
    ASSERT_GT(got.report.bytes_staged_fp16, 0u) << "no micro-tensor was held as fp16";
    EXPECT_EQ(got.report.bytes_staged_fp16, planned.bytes_staged_fp16);
    EXPECT_EQ(got.report.bytes_staged, planned.bytes_staged);
    EXPECT_EQ(got.report.bytes_staged + got.report.bytes_staged_fp16, whole.report.bytes_staged);
    EXPECT_GT(got.report.staged_fp16_error, 0.0);
    EXPECT_LE(got.report.staged_fp16_error, fp16_max_relative_error);
    ASSERT_EQ(got.losses.size(), 1u);
    EXPECT_TRUE(std::isfinite(got.losses[0]));
    EXPECT_NEAR(got.losses[0], whole.losses[0], 2e-3 * whole.losses[0]);
  }
}

// Output-channel groups on cuda: VGG-16 at batch 1, whose largest steps do not fit at one image,
// trains at 0.6 x max(l_i) with its CONV/FC steps over the budget cut into groups (their rows in
// page-locked host memory under utp and all, one group's on the device at a time); the heap
// stays within the budget and, under utp, step by step where `plan` (null) puts it; the losses
// follow the unsplit cuda run.
TEST(cuda_executor_test, trains_below_one_image_in_output_channel_groups) {
  MEMWEAVE_GPU_OR_SKIP("nothing to split on");
  const network net = test::small_zoo("vgg16", 1);
  const route r(net);
  const tensor_table table(net, r);
  const layer_memory memory(table);
  const split_plan ample =
      plan_splits(net, table, memory, cost_model{}, std::size_t{1} << 40, 1024, "test", true);
  const std::size_t budget =
      std::max(static_cast<std::size_t>(0.6 * static_cast<double>(ample.max_layer_bytes)),
               ample.floor_bytes);
  const split_plan plan = plan_splits(net, table, memory, cost_model{}, budget, 1024, "test", true);
  ASSERT_GT(plan.channel_split_count(), 0u) << "nothing cut into channel groups";
  const cuda_run whole = train_on_cuda(net, policy_options("liveness", k_ample, "none"), 3);
  for (const std::string policy : {"utp", "all"}) {
    SCOPED_TRACE(policy + " budget " + std::to_string(budget));
    executor_options o = policy_options(policy, budget, "none");
    o.split_parts = plan.parts(table.step_count());
    o.channel_parts = plan.channel_parts(table.step_count());
    const cuda_run got = train_on_cuda(net, o, 3);
    EXPECT_GT(got.report.staged_steps, 0u);
    std::size_t peak = 0;
    for (const step_record& st : got.report.steps) peak = std::max(peak, st.heap_bytes);
    EXPECT_LE(peak, budget);
    EXPECT_LT(peak, ample.max_layer_bytes);
    expect_losses_close(got.losses, whole.losses, 3);
    if (policy == "utp") expect_as_planned(net, o);
  }
}

}  // namespace
}  // namespace memweave
