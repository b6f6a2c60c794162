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
  EXPECT_NE(r.out.find("largest micro-step at one image) 27.86 MiB"), std::string::npos) << r.out;
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
  const auto r = run(plan_command, at("20MiB"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("below the smallest micro-step of step 208 (res5a_branch2b"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("raise --budget to at least 27.86 MiB"), std::string::npos) << r.out;
}

TEST(split_cli_test, needs_a_budget) {
  EXPECT_NE(error_of(plan_command, k_net).find("--split needs --budget"), std::string::npos);
}

}  // namespace
}  // namespace memweave
