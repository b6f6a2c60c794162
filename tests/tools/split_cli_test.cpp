// `memweave plan --split` (TSPLIT's planner): the per-step parts and the floor, no split where
// none is needed, a budget below the smallest micro-step as "does not fit" naming it.
#include <gtest/gtest.h>

#include <string>

#include "cli_harness.hpp"

namespace memweave {
namespace {

using namespace test;

const std::vector<std::string> k_net = {"--net", "resnet50", "--batch", "32", "--split"};

std::vector<std::string> at(const std::string& budget) {
  std::vector<std::string> a = k_net;
  a.insert(a.end(), {"--budget", budget});
  return a;
}

TEST(split_cli_test, half_the_largest_layer_splits_and_reports_the_floor) {
  const auto r = run(plan_command, at("147MiB"));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("max(l_i) 294.01 MiB"), std::string::npos) << r.out;
  // One image per micro-batch and one channel per CONV/FC group: BN's backward, which
  // splits only along the batch, sets the floor.
  EXPECT_NE(r.out.find("one channel per CONV/FC group) 9.20 MiB at step 318 (bn2b2_branch2c)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("41 of 351 steps split"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step   16 res2a F                          2 parts  whole 294.00 MiB  "
                       "micro-step 147.00 MiB"),
            std::string::npos)
      << r.out;
}

TEST(split_cli_test, no_split_where_every_step_fits) {
  const auto r = run(plan_command, at("1GiB"));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("0 of 351 steps split"), std::string::npos) << r.out;
}

TEST(split_cli_test, below_the_smallest_micro_step_does_not_fit_and_names_it) {
  const auto r = run(plan_command, at("8MiB"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("below the smallest micro-step of step 318 (bn2b2_branch2c"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("raise --budget to at least 9.20 MiB"), std::string::npos) << r.out;
}

// Batch 1: VGG16's fc6 backward (its weights, their gradient and momentum: 1.15 GiB) cannot
// be split along the batch; it runs in two groups of output features.
TEST(split_cli_test, batch_one_splits_fc_weights_along_output_features) {
  const auto r =
      run(plan_command, {"--net", "vgg16", "--batch", "1", "--split", "--budget", "1GiB"});
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("0 of 79 steps split, 1 along output channels"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fc6 B                            1 parts x 2 channel groups  whole   "
                       "1.15 GiB  micro-step 588.22 MiB"),
            std::string::npos)
      << r.out;
}

TEST(split_cli_test, needs_a_budget) {
  EXPECT_NE(error_of(plan_command, k_net).find("--split needs --budget"), std::string::npos);
}

}  // namespace
}  // namespace memweave
