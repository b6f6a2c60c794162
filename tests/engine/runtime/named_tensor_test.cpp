// Tensors by name: persistent tensors read and written under every policy (on the device or
// evicted to host memory), parameter gradients and watched activations of the last
// iteration, and the errors for a wrong name, size or a tensor that no longer exists.
#include <algorithm>
#include <string>
#include <vector>

#include "engine_test_util.hpp"

namespace memweave {
namespace {

using test::policy_options;

// Distinct values for every persistent tensor (running variances kept positive).
std::vector<float> pattern(std::size_t count, int salt) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) {
    v[i] = 0.01f * static_cast<float>((static_cast<int>(i) * 7 + salt * 13) % 23 + 1);
  }
  return v;
}

TEST(named_tensors, names_follow_read_persistent_and_read_matches_it) {
  const network net = test::tiny_trainable_net();
  auto dev = test::make_test_device("host");
  executor ex(net, *dev, policy_options("liveness"));
  const std::vector<std::string> names = ex.persistent_names();
  const auto all = ex.read_persistent();
  ASSERT_EQ(names.size(), all.size());
  for (const char* n : {"conv1.weight", "conv1.bias", "conv1.weight.momentum", "bn1.gamma",
                        "bn1.running_mean", "bn1.running_var", "fc1.weight"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  }
  for (std::size_t i = 0; i < names.size(); ++i) EXPECT_EQ(ex.read(names[i]), all[i]) << names[i];
  EXPECT_EQ(ex.read("bn1.running_var"), std::vector<float>(4, 1.0f));
}

// Sets every persistent tensor and trains: the same losses and tensors under every policy,
// including utp/all at a budget where persistent tensors wait in host memory.
TEST(named_tensors, written_weights_train_bit_identically_under_every_policy) {
  const network net = test::tiny_trainable_net();
  auto run = [&](executor_options o, bool evicts = false) {
    auto dev = test::make_test_device("host");
    auto data = make_synthetic_source(net[net.data_layer()].output_shape, net.classes(), 7);
    executor ex(net, *dev, o);
    // Parameters wait in host memory before the first iteration: writing them moves them.
    EXPECT_EQ(ex.cache().stats().evictions > 0, evicts) << o.policy.name;
    int salt = 0;
    for (const std::string& n : ex.persistent_names()) {
      const auto v = pattern(ex.find_tensor(n).bytes / sizeof(float), ++salt);
      ex.write(n, v);
      EXPECT_EQ(ex.read(n), v) << o.policy.name << " " << n;
    }
    test::training_result r;
    for (int i = 0; i < 2; ++i) r.losses.push_back(ex.run_iteration(data.get(), i));
    r.persistent = ex.read_persistent();
    return r;
  };
  const auto reference = run(policy_options("baseline"));
  for (const std::string policy : {"liveness", "offload", "recompute", "utp", "all"}) {
    test::expect_bit_identical(reference, run(policy_options(policy)), policy);
  }
  // utp/all at the smallest budget they run: persistent tensors are evicted meanwhile.
  for (const std::string policy : {"utp", "all"}) {
    const std::size_t budget = test::smallest_budget(net, policy_options(policy));
    test::expect_bit_identical(reference, run(policy_options(policy, budget), true),
                               policy + " at its smallest budget");
  }
}

TEST(named_tensors, bad_names_and_sizes_are_errors_that_write_nothing) {
  const network net = test::tiny_trainable_net();
  auto dev = test::make_test_device("host");
  executor ex(net, *dev, policy_options("liveness"));
  const auto before = ex.read("fc1.bias");
  try {
    ex.write("fc1.bais", std::vector<float>(5, 1.0f));
    FAIL() << "a misspelt name was accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'fc1.bais'"), std::string::npos) << e.what();
  }
  try {
    ex.write("fc1.bias", std::vector<float>(4, 1.0f));
    FAIL() << "a wrong size was accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("holds 5 values"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ex.write("conv1.y", std::vector<float>(4 * 4 * 8 * 8, 1.0f)), invalid_argument);
  EXPECT_THROW(ex.watch("fc1.bias"), invalid_argument);
  EXPECT_EQ(ex.read("fc1.bias"), before);
  auto null_dev = test::make_test_device("null");
  executor planned(net, *null_dev, policy_options("liveness"));
  EXPECT_THROW((void)planned.read("fc1.bias"), invalid_argument);
}

// After one iteration from zero momenta, v = lr (g + wd w): the watched gradient is
// v / lr - wd w, with w the weight before the update.
TEST(named_tensors, parameter_gradient_is_the_last_iterations) {
  const network net = test::tiny_trainable_net();
  auto dev = test::make_test_device("host");
  auto data = make_synthetic_source(net[net.data_layer()].output_shape, net.classes(), 7);
  const executor_options o = policy_options("liveness");
  executor ex(net, *dev, o);
  EXPECT_THROW((void)ex.parameter_gradient("fc1.weight"), invalid_argument);  // not watched
  ex.watch_gradients();
  const auto w = ex.read("fc1.weight");
  ex.run_iteration(data.get(), 0);
  const auto v = ex.read("fc1.weight.momentum");
  const auto g = ex.parameter_gradient("fc1.weight");
  ASSERT_EQ(g.size(), w.size());
  double norm = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double expected = v[i] / o.learning_rate - o.weight_decay * w[i];
    EXPECT_NEAR(g[i], expected, 1e-4 + 1e-3 * std::abs(expected)) << i;
    norm += std::abs(g[i]);
  }
  EXPECT_GT(norm, 0.0);
  EXPECT_THROW((void)ex.parameter_gradient("bn1.running_mean"), invalid_argument);
}

TEST(named_tensors, an_activation_not_watched_says_when_it_died_and_a_watched_one_is_kept) {
  const network net = test::tiny_trainable_net();
  for (const std::string policy : {"liveness", "utp", "recompute"}) {
    auto dev = test::make_test_device("host");
    const shape4 img = net[net.data_layer()].output_shape;
    auto data = make_synthetic_source(img, net.classes(), 7);
    executor ex(net, *dev, policy_options(policy));
    ex.watch("data.y");
    ex.watch("conv1.dy");
    ex.run_iteration(data.get(), 3);
    try {
      (void)ex.read("relu1.y");
      FAIL() << policy << ": a dead tensor was read";
    } catch (const invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("no longer exists"), std::string::npos) << m;
      EXPECT_NE(m.find("policy " + policy + " frees it after step"), std::string::npos) << m;
    }
    std::vector<float> images(static_cast<std::size_t>(img.count())), labels(img.n);
    auto again = make_synthetic_source(img, net.classes(), 7);
    again->fill(3, img.n, images.data(), labels.data());
    EXPECT_EQ(ex.read("data.y"), images) << policy;
    EXPECT_EQ(ex.read("conv1.dy").size(), static_cast<std::size_t>(4 * 4 * 8 * 8)) << policy;
  }
}

}  // namespace
}  // namespace memweave
