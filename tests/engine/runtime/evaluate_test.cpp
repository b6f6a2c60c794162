// The evaluation pass: forward only, BN on running statistics, dropout off, no persistent
// tensor changed; bit-identical under every policy and budget; forward-only liveness frees
// each tensor after its last forward reader; a trained network beats chance.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine_test_util.hpp"
#include "memweave/device/stream_timeline.hpp"
#include "memweave/engine/layer_memory.hpp"
#include "memweave/engine/route.hpp"
#include "memweave/engine/split_plan.hpp"

namespace memweave {
namespace {

using test::policy_options;

// Batches of fixed images and labels.
class fixed_source final : public data_source {
 public:
  fixed_source(shape4 image, std::int64_t classes, std::vector<float> images,
               std::vector<float> labels)
      : image_(image), classes_(classes), images_(std::move(images)), labels_(std::move(labels)) {}
  std::string name() const override { return "fixed"; }
  shape4 image_shape() const override { return image_; }
  std::int64_t classes() const override { return classes_; }
  void fill(std::int64_t, std::int64_t, float* images, float* labels) override {
    std::copy(images_.begin(), images_.end(), images);
    std::copy(labels_.begin(), labels_.end(), labels);
  }

 private:
  shape4 image_;
  std::int64_t classes_;
  std::vector<float> images_, labels_;
};

TEST(evaluate, a_trained_network_beats_chance_and_evaluation_changes_nothing) {
  const network net = test::tiny_trainable_net();
  auto dev = test::make_test_device("host");
  auto data = make_synthetic_source(net[net.data_layer()].output_shape, net.classes(), 7);
  executor_options o = policy_options("liveness");
  o.learning_rate = 0.005f;
  executor ex(net, *dev, o);
  const evaluation_result before = ex.evaluate(data.get(), 1000, 8);
  for (int i = 0; i < 40; ++i) ex.run_iteration(data.get(), i);
  const auto trained = ex.read_persistent();
  const evaluation_result after = ex.evaluate(data.get(), 1000, 8);  // batches never trained on
  EXPECT_EQ(after.batches, 8);
  EXPECT_EQ(after.images, 32);
  EXPECT_GT(after.accuracy, 0.6) << "chance is 0.2; before training " << before.accuracy;
  EXPECT_LT(after.loss, before.loss);
  EXPECT_DOUBLE_EQ(after.accuracy, static_cast<double>(after.correct) / 32);
  EXPECT_EQ(ex.read_persistent(), trained);  // no update, running statistics untouched
  // Training goes on as if the evaluation had not happened.
  EXPECT_THROW((void)ex.evaluate(data.get(), 0, 0), invalid_argument);
  EXPECT_THROW((void)ex.evaluate(nullptr, 0, 1), invalid_argument);
}

TEST(evaluate, is_bit_identical_under_every_policy_and_budget_and_frees_after_last_forward_use) {
  const network net = test::tiny_trainable_net();
  const shape4 img = net[net.data_layer()].output_shape;
  // Weights after a few iterations (BN running statistics away from 0 and 1).
  std::vector<std::string> names;
  std::vector<std::vector<float>> weights;
  {
    auto dev = test::make_test_device("host");
    auto data = make_synthetic_source(img, net.classes(), 7);
    executor ex(net, *dev, policy_options("liveness"));
    for (int i = 0; i < 3; ++i) ex.run_iteration(data.get(), i);
    names = ex.persistent_names();
    weights = ex.read_persistent();
  }
  auto run = [&](const executor_options& o) {
    auto dev = test::make_test_device("host");
    auto data = make_synthetic_source(img, net.classes(), 7);
    executor ex(net, *dev, o);
    for (std::size_t i = 0; i < names.size(); ++i) ex.write(names[i], weights[i]);
    const evaluation_result r = ex.evaluate(data.get(), 50, 3);
    // Nothing changed (an evaluation-only executor keeps the tensors but the momenta).
    for (const std::string& n : ex.persistent_names()) {
      const auto at = std::find(names.begin(), names.end(), n) - names.begin();
      EXPECT_EQ(ex.read(n), weights[static_cast<std::size_t>(at)]) << o.policy.name << " " << n;
    }
    return std::make_pair(r, ex.report());
  };
  const auto [reference, live] = run(policy_options("liveness"));
  // Forward-only liveness: less than training's peak (nothing stashed for backward).
  auto null_dev = test::make_test_device("null");
  executor planned(net, *null_dev, policy_options("liveness"));
  planned.run_iteration(nullptr, 0);
  const std::size_t training_peak = planned.report().peak_bytes;
  (void)planned.evaluate(nullptr, 0, 1);
  EXPECT_EQ(planned.report().peak_bytes, live.peak_bytes);  // plan and eval agree
  EXPECT_LT(live.peak_bytes, training_peak);
  EXPECT_EQ(live.steps.size(), net.size());  // forward steps only
  auto same = [&](const evaluation_result& r, const std::string& what) {
    EXPECT_EQ(r.loss, reference.loss) << what;
    EXPECT_EQ(r.correct, reference.correct) << what;
  };
  for (const std::string policy : {"baseline", "offload", "utp", "recompute", "all"}) {
    const auto [r, report] = run(policy_options(policy));
    same(r, policy);
    EXPECT_EQ(report.peak_bytes, live.peak_bytes) << policy << ": forward-only liveness";
  }
  for (const std::string policy : {"utp", "all"}) {
    const std::size_t budget = test::smallest_budget(net, policy_options(policy));
    same(run(policy_options(policy, budget)).first, policy + " at its smallest budget");
  }
  // An executor that only evaluates needs no room for a backward pass: it runs in a budget
  // below the least that trains.
  executor_options eval_only = policy_options("liveness");
  const std::size_t train_floor = test::smallest_budget(net, eval_only);
  eval_only.evaluation_only = true;
  eval_only.budget_bytes = (live.peak_bytes / 4096 + 2) * 4096;
  ASSERT_LT(eval_only.budget_bytes, train_floor);
  const auto [eval_only_result, eval_only_report] = run(eval_only);
  same(eval_only_result, "evaluation_only below the training floor");
  // Without the momenta: less persistent memory, and a lower peak.
  EXPECT_LT(eval_only_report.persistent_bytes, live.persistent_bytes);
  EXPECT_LT(eval_only_report.peak_bytes, live.peak_bytes);
  // Its max(l_i) is the forward steps' (training's backward steps set one above its peak).
  EXPECT_LT(eval_only_report.max_layer_bytes, live.max_layer_bytes);
  EXPECT_LE(eval_only_report.max_layer_bytes, eval_only_report.peak_bytes);
  {
    auto dev = test::make_test_device("host");
    auto data = make_synthetic_source(img, net.classes(), 7);
    executor ex(net, *dev, eval_only);
    EXPECT_EQ(ex.persistent_names().size(), names.size() - 12);  // 6 trained layers x 2
    EXPECT_THROW((void)ex.read("fc1.weight.momentum"), invalid_argument);
    try {
      ex.run_iteration(data.get(), 0);
      ADD_FAILURE() << "an evaluation-only executor trained";
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("evaluation_only"), std::string::npos) << e.what();
    }
  }
}

// A timeline holds the last batch's kernels: forward ones only, each layer's once.
TEST(evaluate, a_timeline_holds_the_last_batchs_forward_kernels) {
  const network net = test::tiny_trainable_net();
  auto dev = test::make_test_device("host");
  auto data = make_synthetic_source(net[net.data_layer()].output_shape, net.classes(), 7);
  stream_timeline timeline(*dev);
  executor_options o = policy_options("liveness");
  o.timeline = &timeline;
  executor ex(net, *dev, o);
  ex.run_iteration(data.get(), 0);
  (void)ex.evaluate(data.get(), 0, 2);
  dev->get_stream(stream_role::compute).synchronize();
  std::size_t kernels = 0;
  for (const timeline_span& span : timeline.spans()) {
    if (span.category != "kernel") continue;
    ++kernels;
    EXPECT_EQ(span.name.back(), 'F') << span.name;
  }
  EXPECT_EQ(kernels, net.size());
}

// data {2 images, 2 channels, 1x1} -> bn -> dropout -> loss over 2 classes: evaluation
// normalises by the running statistics, y = gamma (x - mean) / sqrt(var + eps) + beta, and
// drops nothing.
TEST(evaluate, bn_uses_running_statistics_and_dropout_passes_through) {
  network_builder b("bn");
  auto x = b.data({2, 2, 1, 1}, 2);
  b.softmax_loss(b.dropout(b.bn(x, {}, "bn1"), {}, "drop1"), "loss");
  const network net = std::move(b).build();
  auto dev = test::make_test_device("host");
  executor ex(net, *dev, policy_options("liveness"));
  ex.write("bn1.gamma", std::vector<float>{2.0f, 0.5f});
  ex.write("bn1.beta", std::vector<float>{0.1f, -0.2f});
  ex.write("bn1.running_mean", std::vector<float>{1.0f, 0.0f});
  ex.write("bn1.running_var", std::vector<float>{4.0f, 0.25f});
  ex.watch("bn1.y");
  ex.watch("drop1.y");
  // Image 0 = (1, 2), label 1; image 1 = (3, -1), label 1.
  fixed_source data(net[net.data_layer()].output_shape, 2, {1, 2, 3, -1}, {1, 1});
  const evaluation_result r = ex.evaluate(&data, 0, 1);
  // (1-1)*2/2+0.1, (2-0)*0.5/0.5-0.2, (3-1)*2/2+0.1, (-1-0)*0.5/0.5-0.2 (eps 1e-5 aside).
  const std::vector<float> expected{0.1f, 1.8f, 2.1f, -1.2f};
  const auto y = ex.read("bn1.y");
  ASSERT_EQ(y.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_NEAR(y[i], expected[i], 1e-4) << i;
  EXPECT_EQ(ex.read("drop1.y"), y);
  // Image 0 predicts class 1 (1.8 > 0.1), image 1 class 0 (2.1 > -1.2): one of two right.
  EXPECT_EQ(r.correct, 1);
  const double l0 = std::log(1 + std::exp(0.1 - 1.8)), l1 = std::log(1 + std::exp(2.1 + 1.2));
  EXPECT_NEAR(r.loss, (l0 + l1) / 2, 1e-4);
  EXPECT_EQ(ex.read("bn1.running_var"), (std::vector<float>{4.0f, 0.25f}));
}

}  // namespace
}  // namespace memweave

namespace memweave {
namespace {

// An executor that trains split (TSPLIT's micro-batches) evaluates as an unsplit one, bit
// for bit: BN on its running statistics micro-batch by micro-batch (its two passes over a
// batch's statistics once normalized with those of the evaluated batch), dropout off, the loss
// over the whole batch.
class split_evaluate : public ::testing::TestWithParam<std::string> {};

TEST_P(split_evaluate, split_steps_evaluate_as_whole_ones) {
  const network net = test::small_zoo(GetParam(), 8);
  auto data = make_synthetic_source(net[net.data_layer()].output_shape, net.classes(), 7);
  const auto evaluated = [&](bool split) {
    auto dev = test::make_test_device("host");
    executor_options o = policy_options("liveness");
    if (split) o.split_parts.assign(2 * net.size(), 3);
    executor ex(net, *dev, o);
    for (int i = 0; i < 2; ++i) ex.run_iteration(data.get(), i);
    return ex.evaluate(data.get(), 100, 2);
  };
  const evaluation_result whole = evaluated(false), split = evaluated(true);
  EXPECT_EQ(split.loss, whole.loss) << GetParam();
  EXPECT_EQ(split.correct, whole.correct) << GetParam();
}

// `memweave eval --split`: an executor that only evaluates, under utp and all, stages its
// split forward steps as training does (their micro-tensors in host memory, one micro-batch's
// slices on the device; the loss's step whole), so it evaluates below the forward's largest
// step, bit-identically to liveness with unlimited memory, and plan (null) and the host peak
// alike.
TEST_P(split_evaluate, below_the_forwards_largest_step_evaluates_as_unlimited_memory) {
  const network net = test::small_zoo(GetParam(), 8);
  auto data = make_synthetic_source(net[net.data_layer()].output_shape, net.classes(), 7);
  std::vector<std::string> names;
  std::vector<std::vector<float>> weights;
  evaluation_result reference;
  {
    auto dev = test::make_test_device("host");
    executor ex(net, *dev, policy_options("liveness", 0, "fixed:direct"));
    for (int i = 0; i < 2; ++i) ex.run_iteration(data.get(), i);  // running statistics move
    names = ex.persistent_names();
    weights = ex.read_persistent();
    reference = ex.evaluate(data.get(), 100, 2);
  }
  const route r(net);
  const tensor_table table(net, r);
  const layer_memory memory(table);
  const split_plan ample = plan_splits(net, table, memory, cost_model{}, std::size_t{1} << 40, 1024,
                                       "test", false, true);
  const std::size_t budget = std::max(ample.max_layer_bytes / 2, ample.floor_bytes);
  ASSERT_LT(budget, ample.max_layer_bytes) << GetParam();
  const split_plan plan =
      plan_splits(net, table, memory, cost_model{}, budget, 1024, "test", false, true);
  for (const char* policy : {"utp", "all"}) {
    executor_options o = policy_options(policy, budget, "fixed:direct");
    o.evaluation_only = true;
    o.split_parts = plan.parts(table.step_count());
    auto dev = test::make_test_device("host");
    executor ex(net, *dev, o);
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (names[i].ends_with(".momentum")) continue;  // an evaluation keeps none
      ex.write(names[i], weights[i]);
    }
    const evaluation_result got = ex.evaluate(data.get(), 100, 2);
    EXPECT_EQ(got.loss, reference.loss) << GetParam() << " " << policy;
    EXPECT_EQ(got.correct, reference.correct) << GetParam() << " " << policy;
    const policy_report host = ex.report();
    EXPECT_GT(host.staged_steps, 0u) << GetParam() << " " << policy;
    EXPECT_GT(host.bytes_staged, 0u) << GetParam() << " " << policy;
    EXPECT_LE(host.peak_bytes, budget) << GetParam() << " " << policy;
    auto null_dev = test::make_test_device("null", std::size_t{1} << 40);
    executor planned(net, *null_dev, o);
    (void)planned.evaluate(nullptr, 0, 1);
    EXPECT_EQ(planned.report().peak_bytes, host.peak_bytes) << GetParam() << " " << policy;
    EXPECT_EQ(planned.report().bytes_staged, host.bytes_staged) << GetParam() << " " << policy;
  }
  // Every forward step staged, DATA's and the loss's too: the predictions and labels are
  // copied out of host memory, with the same results.
  executor_options every = policy_options("utp", ample.max_layer_bytes * 4, "fixed:direct");
  every.evaluation_only = true;
  every.split_parts.assign(r.layer_count(), 2);
  auto dev = test::make_test_device("host");
  executor ex(net, *dev, every);
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (!names[i].ends_with(".momentum")) ex.write(names[i], weights[i]);
  }
  const evaluation_result got = ex.evaluate(data.get(), 100, 2);
  EXPECT_EQ(got.loss, reference.loss) << GetParam() << ", every step staged";
  EXPECT_EQ(got.correct, reference.correct) << GetParam() << ", every step staged";
  EXPECT_EQ(ex.report().staged_steps, r.layer_count()) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(zoo, split_evaluate,
                         ::testing::Values("alexnet", "vgg16", "resnet50", "inception_v4",
                                           "densenet121"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace memweave
