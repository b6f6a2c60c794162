// Helpers of the executor tests: devices, small zoo networks, and running a policy.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include <memory>
#include <string>
#include <vector>

#include "memweave/device/device.hpp"
#include "memweave/engine/executor.hpp"
#include "memweave/engine/zoo.hpp"

namespace memweave::test {

inline std::unique_ptr<device> make_test_device(const std::string& kind,
                                                std::size_t capacity = std::size_t{2} << 30) {
  device_options o;
  o.kind = kind;
  o.capacity_bytes = capacity;
  return make_device(o);
}

/// What one training run produced.
struct training_result {
  std::vector<double> losses;
  std::vector<std::vector<float>> persistent;  ///< parameters, momenta, BN running stats
  std::vector<step_record> steps;              ///< last iteration
};

/// Trains `iterations` iterations of `net` on a fresh host device under `options`.
inline training_result train(const network& net, const executor_options& options, int iterations) {
  auto dev = make_test_device("host");
  auto data = make_synthetic_source(net[net.data_layer()].output_shape, net.classes(), 7);
  executor ex(net, *dev, options);
  training_result r;
  for (int i = 0; i < iterations; ++i) r.losses.push_back(ex.run_iteration(data.get(), i));
  r.persistent = ex.read_persistent();
  r.steps = ex.steps();
  return r;
}

/// Expects two runs to be bit-identical in losses and every persistent tensor.
inline void expect_bit_identical(const training_result& a, const training_result& b,
                                 const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size()) << what;
  for (std::size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_EQ(a.losses[i], b.losses[i]) << what << ": loss of iteration " << i;
  }
  ASSERT_EQ(a.persistent.size(), b.persistent.size()) << what;
  for (std::size_t t = 0; t < a.persistent.size(); ++t) {
    ASSERT_EQ(a.persistent[t].size(), b.persistent[t].size()) << what;
    const bool same = std::memcmp(a.persistent[t].data(), b.persistent[t].data(),
                                  a.persistent[t].size() * sizeof(float)) == 0;
    EXPECT_TRUE(same) << what << ": persistent tensor #" << t << " differs";
  }
}

/// A small version of a zoo network (full topology, few channels, small images).
inline network small_zoo(const std::string& name, std::int64_t batch = 2) {
  zoo_options o;
  o.batch = batch;
  o.classes = 5;
  o.width_scale = 0.0625;
  o.image_side = std::max<std::int64_t>(32, zoo_min_side(name));
  return make_network(name, o);
}

}  // namespace memweave::test
