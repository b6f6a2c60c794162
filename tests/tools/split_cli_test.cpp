// `memweave plan --split` (TSPLIT): the per-step parts and the floors, the policies' runs with
// their split steps staged, no split where none is needed, a budget below the smallest
// micro-step as "does not fit" naming it.
#include <gtest/gtest.h>

#include <string>

#include "cli_harness.hpp"

namespace memweave {
namespace {

using namespace test;

const std::vector<std::string> k_net = {"--net",   "resnet50", "--batch", "32",
                                        "--split", "--policy", "utp,all"};

std::vector<std::string> at(const std::string& budget) {
  std::vector<std::string> a = k_net;
  a.insert(a.end(), {"--budget", budget});
  return a;
}

TEST(split_cli_test, half_the_largest_layer_splits_and_reports_the_floor) {
  const auto r = run(plan_command, at("147MiB"));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("max(l_i) 294.01 MiB"), std::string::npos) << r.out;
  // One image per micro-batch: res5a_branch2b's weights, gradient and momentum set the
  // floor; with CONV/FC channel groups as well (planned only), BN's backward, which splits
  // only along the batch.
  EXPECT_NE(r.out.find("(the largest micro-step at one image) 27.86 MiB at step 208 "
                       "(res5a_branch2b)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("floor 9.20 MiB at step 318 (bn2b2_branch2c)"), std::string::npos) << r.out;
  // The runs: both policies fit, the 41 split steps staged.
  EXPECT_NE(r.out.find("utp: TSPLIT: 41 steps ran in micro-batches"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("all: TSPLIT: 41 steps ran in micro-batches"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(" NO "), std::string::npos) << r.out;
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
  EXPECT_NE(r.out.find("below the smallest micro-step of step 208 (res5a_branch2b"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("raise --budget to at least 27.86 MiB"), std::string::npos) << r.out;
}

// Batch 1: VGG16's fc6 backward (its weights, their gradient and momentum: 1.15 GiB) cannot
// be split along the batch: at 1 GiB it does not fit, and the floor with output-feature groups
// (which the planner reports but the executor does not run yet) is named beside it.
TEST(split_cli_test, batch_one_names_the_fc_weights_and_the_channel_floor) {
  const auto r =
      run(plan_command, {"--net", "vgg16", "--batch", "1", "--split", "--budget", "1GiB"});
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("(fc6 backward, one image per micro-batch): 1.15 GiB"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("floor 36.75 MiB at step"), std::string::npos) << r.out;
}

// train --split below max(l_i) (518.89 KiB for this narrow ResNet-50): the same losses as
// liveness with unlimited memory (the oracle tests compare every bit).
TEST(split_cli_test, train_below_the_largest_layer_gives_the_unsplit_losses) {
  const std::vector<std::string> net = {"--net",        "resnet50", "--batch",   "8",
                                        "--width",      "0.0625",   "--classes", "5",
                                        "--image-side", "64",       "--conv-ws", "fixed:direct",
                                        "--iterations", "3",        "--device",  "host"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = net;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const auto whole = run(train_command, with({"--policy", "liveness"}));
  ASSERT_EQ(whole.code, 0) << whole.out;
  const auto split = run(train_command, with({"--policy", "utp", "--budget", "300KiB", "--split"}));
  ASSERT_EQ(split.code, 0) << split.out;
  EXPECT_NE(split.out.find("utp: TSPLIT: "), std::string::npos) << split.out;
  for (const char* loss : {"loss   3.53255", "loss   2.27500", "loss   1.97856"}) {
    EXPECT_NE(whole.out.find(loss), std::string::npos) << whole.out;
    EXPECT_NE(split.out.find(loss), std::string::npos) << split.out;
  }
  const std::string no_budget = error_of(train_command, with({"--policy", "utp", "--split"}));
  EXPECT_NE(no_budget.find("--split runs the steps over the budget in micro-batches: give "
                           "--budget"),
            std::string::npos)
      << no_budget;
}

TEST(split_cli_test, needs_a_budget) {
  EXPECT_NE(error_of(plan_command, k_net).find("--split needs --budget"), std::string::npos);
}

// ResNet-152 b1700 at 12 GiB: the staged micro-tensors and the swapped tensors fill the
// 256 GiB host pool. A write-back ahead of need then stops (it used to fail the run), and an
// eviction whose host copy cannot be had drops the tensor where it can be rebuilt.
TEST(split_cli_test, a_full_host_pool_stops_write_back_and_drops_what_can_be_rebuilt) {
  const auto r = run(plan_command, {"--net", "resnet152", "--batch", "1700", "--budget", "12GiB",
                                    "--split", "--policy", "all", "--conv-ws", "none"});
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\nall         yes"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("no host memory"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace memweave
