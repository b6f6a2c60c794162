// Helpers of the executor tests: devices, small zoo networks, and running a policy.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iomanip>

#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "memweave/core/error.hpp"
#include "memweave/device/device.hpp"
#include "memweave/engine/executor.hpp"
#include "memweave/engine/network_builder.hpp"
#include "memweave/engine/zoo.hpp"

namespace memweave::test {

/// `count` floats uniform in [-1, 1) from `gen`.
inline std::vector<float> random_floats(std::mt19937& gen, std::int64_t count) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(count));
  for (float& x : v) x = u(gen);
  return v;
}

inline std::unique_ptr<device> make_test_device(const std::string& kind,
                                                std::size_t capacity = std::size_t{2} << 30,
                                                double link_gbps = 0) {
  device_options o;
  o.kind = kind;
  o.capacity_bytes = capacity;
  o.host_link_gbps = link_gbps;
  return make_device(o);
}

/// What one training run produced.
struct training_result {
  std::vector<double> losses;
  std::vector<std::vector<float>> persistent;  ///< parameters, momenta, BN running stats
  std::vector<step_record> steps;              ///< last iteration
  policy_report report;                        ///< after the last iteration
};

/// Trains `iterations` iterations of `net` on a fresh host device under `options`, host
/// copies throttled to `link_gbps` (0: unthrottled). An exception is a test failure naming
/// the policy, budget and link; the result then holds the iterations that ran.
inline training_result train(const network& net, const executor_options& options, int iterations,
                             double link_gbps = 0) {
  auto dev = make_test_device("host", std::size_t{2} << 30, link_gbps);
  auto data = make_synthetic_source(net[net.data_layer()].output_shape, net.classes(), 7);
  executor ex(net, *dev, options);
  training_result r;
  try {
    for (int i = 0; i < iterations; ++i) r.losses.push_back(ex.run_iteration(data.get(), i));
  } catch (const std::exception& e) {
    ADD_FAILURE() << options.policy.name << " budget " << options.budget_bytes << " link "
                  << link_gbps << ": " << e.what();
    return r;
  }
  r.persistent = ex.read_persistent();
  r.steps = ex.steps();
  r.report = ex.report();
  return r;
}

/// Expects two runs to be bit-identical in losses and every persistent tensor.
inline void expect_bit_identical(const training_result& a, const training_result& b,
                                 const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size()) << what;
  for (std::size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_EQ(a.losses[i], b.losses[i])
        << what << ": loss of iteration " << i << std::setprecision(17) << " " << a.losses[i]
        << " vs " << b.losses[i];
  }
  ASSERT_EQ(a.persistent.size(), b.persistent.size()) << what;
  for (std::size_t t = 0; t < a.persistent.size(); ++t) {
    ASSERT_EQ(a.persistent[t].size(), b.persistent[t].size()) << what;
    const bool same = std::memcmp(a.persistent[t].data(), b.persistent[t].data(),
                                  a.persistent[t].size() * sizeof(float)) == 0;
    EXPECT_TRUE(same) << what << ": persistent tensor #" << t << " differs";
  }
}

/// Options for `policy` under `budget` (0 = none), one fixed convolution algorithm (the
/// oracle needs it: algorithms round differently), 2 kernel threads, and the oracle's
/// bit-identity mode (exact: a lossy technique is refused).
inline executor_options policy_options(const std::string& policy, std::size_t budget = 0,
                                       const std::string& conv_ws = "fixed:im2col_image") {
  executor_options o;
  o.policy = executor_policy::parse(policy);
  o.budget_bytes = budget;
  o.threads = 2;
  o.conv_ws = conv_ws_options::parse(conv_ws, "test");
  o.host_pool_bytes = std::size_t{256} << 20;
  o.exact = true;
  // `all` as itself: weighing it against recompute and another headroom (three more runs
  // on the null device) only picks among configurations these tests cover one by one; the
  // weighing has its own tests (schedule_test), which turn it on. So with the prefetch
  // margins tried per problem (two more plans of each): planned with none here, tried in
  // schedule_test's own test.
  o.weigh_alternatives = false;
  o.schedule.slack_auto = false;
  return o;
}

/// The smallest budget (to 4 KiB) in which `options` runs one iteration of `net` on the
/// null device (the same executor as on host: the heap sees the same sequence).
inline std::size_t smallest_budget(const network& net, executor_options options) {
  auto run = [&](std::size_t budget) {
    try {
      auto d = make_test_device("null", std::size_t{1} << 40);
      options.budget_bytes = budget;
      executor ex(net, *d, options);
      ex.run_iteration(nullptr, 0);
      return std::optional<std::size_t>(ex.report().peak_bytes);
    } catch (const out_of_memory&) {  // anything else is a bug the test must see
      return std::optional<std::size_t>();
    } catch (const invalid_argument&) {  // below what any policy can run
      return std::optional<std::size_t>();
    }
  };
  const std::size_t ample = *run(0);
  std::size_t lo = 0, hi = 2 * ample;
  while (hi - lo > 4096) {
    const std::size_t mid = lo + (hi - lo) / 2;
    (run(mid) ? hi : lo) = mid;
  }
  return hi;
}

/// A host pool, in MiB from `lo_mib` up to `hi_mib` in steps of `step_mib`, at which
/// `fits(mib)` holds and one step less does not (or `lo_mib`), found by bisection: each try is
/// a whole planned iteration, and a scan down from `hi_mib` made up to 60. The least such pool
/// where fitting is monotonic in it; where it is not, still a pool at the edge of fitting.
/// 0 where `hi_mib` does not fit.
template <class Fits>
std::size_t least_host_pool_mib(std::size_t lo_mib, std::size_t hi_mib, std::size_t step_mib,
                                Fits fits) {
  if (!fits(hi_mib)) return 0;
  // Invariant: fits at good; bad is below lo_mib (taken as not fitting) or does not fit.
  std::ptrdiff_t bad = -1, good = static_cast<std::ptrdiff_t>((hi_mib - lo_mib) / step_mib);
  while (good - bad > 1) {
    const std::ptrdiff_t mid = bad + (good - bad) / 2;
    (fits(lo_mib + static_cast<std::size_t>(mid) * step_mib) ? good : bad) = mid;
  }
  return lo_mib + static_cast<std::size_t>(good) * step_mib;
}

/// A random DAG of 25 layers with every layer type, batch 4.
inline network random_dag_with_every_type(std::uint64_t seed) {
  random_dag_options r;
  r.seed = seed;
  r.layers = 25;
  r.all_types = true;
  r.batch = 4;
  return make_random_dag(r);
}

/// The oracle tests' random DAG: 25 layers, every layer type on even seeds (LRN, DROPOUT,
/// tanh, average pooling), the generator's default batch and images otherwise.
inline network oracle_random_dag(std::uint64_t seed) {
  random_dag_options r;
  r.seed = seed;
  r.layers = 25;
  r.all_types = seed % 2 == 0;
  return make_random_dag(r);
}

/// A small version of a zoo network (full topology, few channels, small images).
/// Zoo network `name` at `batch` images of `image_side` pixels, width `width`, `classes` classes.
inline network zoo_net(const std::string& name, std::int64_t batch, std::int64_t image_side,
                       double width, std::int64_t classes = 5) {
  zoo_options o;
  o.batch = batch;
  o.classes = classes;
  o.width_scale = width;
  o.image_side = image_side;
  return make_network(name, o);
}

inline network small_zoo(const std::string& name, std::int64_t batch = 2) {
  return zoo_net(name, batch, std::max<std::int64_t>(32, zoo_min_side(name)), 0.0625);
}

/// ResNet-50 at batch 16 of 128-pixel images, width 1/8, 5 classes: activations large enough
/// that a host pool of a few tens of MiB runs out under utp and all.
inline network host_heavy_resnet50() {
  return test::zoo_net("resnet50", 16, 128, 0.125);
}

/// conv -> bn -> relu -> pool -> fc x3 -> dropout -> fc -> loss, batch 4 of 3x8x8, 5
/// classes: every kind of persistent tensor, and the FC layers (three of equal size) large
/// enough that at the smallest utp budget their parameters cannot all stay on the device.
inline network tiny_trainable_net() {
  network_builder b("tiny");
  auto x = b.data({4, 3, 8, 8}, 5);
  auto y = b.conv(
      x, conv_params{.out_channels = 4, .kernel_h = 3, .kernel_w = 3, .pad_h = 1, .pad_w = 1},
      "conv1");
  y = b.relu(b.bn(y, {}, "bn1"), "relu1");
  y = b.pool(y, pool_params{}, "pool1");
  for (const char* n : {"fca", "fcb", "fcc"})
    y = b.relu(b.fc(y, fc_params{.out_features = 256}, n));
  y = b.dropout(y, {}, "drop1");
  b.softmax_loss(b.fc(y, fc_params{.out_features = 5}, "fc1"), "loss");
  return std::move(b).build();
}

}  // namespace memweave::test
