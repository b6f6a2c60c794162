// SFT at the command line (issue 14): --tile cuts the layers over --budget into tiled
// segments for plan and train, says what it cut (output and JSON), and refuses what it
// cannot do with a message naming the option.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli_harness.hpp"

namespace memweave {
namespace {

using namespace test;

// A narrow VGG16 at 224 px, batch 4: its first block's steps are its largest.
std::vector<std::string> narrow_vgg_224(std::vector<std::string> extra) {
  std::vector<std::string> a = {"--net",     "vgg16", "--batch",      "4",   "--width",   "0.0625",
                                "--classes", "5",     "--image-side", "224", "--conv-ws", "none"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(tile_cli_test, plan_cuts_the_first_block_into_tiles_and_says_so) {
  // Untiled, liveness needs its largest step whole; at half of it nothing untiled runs.
  const auto whole = run(plan_command, narrow_vgg_224({"--budget", "6MiB", "--policy", "all"}));
  EXPECT_EQ(whole.code, 1) << whole.out;
  const std::string json = temp("tile_plan.json");
  const auto r =
      run(plan_command,
          narrow_vgg_224({"--budget", "6MiB", "--policy", "all", "--tile", "--json", json}));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("tiled segment conv1_1.."), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" tiles: its step touches "), std::string::npos) << r.out;
  const std::string j = slurp(json);
  EXPECT_NE(j.find("\"tiled_segments\": [\n    {\"first\": \"conv1_1\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"tiles_h\": "), std::string::npos) << j;
  std::filesystem::remove(json);
  // A policy that keeps more live than the tiled steps (liveness: the activations stashed for
  // backward) does not fit, and is told that the budget chose what tiles: raising it is not
  // the only way (a hostile run's model ran at 600 KiB and not from 1000 KiB to 4.9 MiB).
  const auto live =
      run(plan_command, narrow_vgg_224({"--budget", "6MiB", "--policy", "liveness", "--tile"}));
  EXPECT_EQ(live.code, 1) << live.out;
  EXPECT_NE(live.out.find("under --tile only the layers whose own step is over the budget run "
                          "tile by tile: a smaller budget tiles more of them"),
            std::string::npos)
      << live.out;
}

TEST(tile_cli_test, train_under_the_budget_with_tiles_and_refusals_name_the_option) {
  const auto r = run(train_command, narrow_vgg_224({"--budget", "6MiB", "--policy", "all", "--tile",
                                                    "--iterations", "2", "--device", "host"}));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("tiled segment conv1_1.."), std::string::npos) << r.out;
  const std::string no_budget = error_of(plan_command, narrow_vgg_224({"--tile"}));
  EXPECT_NE(no_budget.find("--tile"), std::string::npos) << no_budget;
  EXPECT_NE(no_budget.find("give --budget"), std::string::npos) << no_budget;
  const std::string both =
      error_of(plan_command, narrow_vgg_224({"--budget", "6MiB", "--tile", "--split"}));
  EXPECT_NE(both.find("--split and --tile"), std::string::npos) << both;
  // Below the least segment step: does not fit (exit 1), as a policy below its floor does.
  const auto tiny = run(plan_command, narrow_vgg_224({"--budget", "64KiB", "--tile"}));
  EXPECT_EQ(tiny.code, 1) << tiny.out;
  EXPECT_NE(tiny.out.find("--tile does not fit"), std::string::npos) << tiny.out;
  EXPECT_NE(tiny.out.find("budget 64.00 KiB (--budget)"), std::string::npos) << tiny.out;
  const auto tiny_train =
      run(train_command, narrow_vgg_224({"--budget", "64KiB", "--tile", "--device", "host"}));
  EXPECT_EQ(tiny_train.code, 1) << tiny_train.out;
}

// A fixed algorithm's workspace is held whole beside an untiled CONV step, as the executor's
// floor check counts it: the planner counts it too. Left out, conv2_2 stayed untiled and the
// check refused the plan at every budget it then named (session 44's hostile run).
TEST(tile_cli_test, a_fixed_algorithms_workspace_is_planned_for) {
  const std::vector<std::string> im2col = {
      "--net",     "vgg16", "--batch",      "4",        "--width",   "0.0625",
      "--classes", "5",     "--image-side", "224",      "--conv-ws", "fixed:im2col_image",
      "--policy",  "all",   "--tile",       "--budget", "6MiB"};
  const auto r = run(plan_command, im2col);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("tiled segment conv1_1.."), std::string::npos) << r.out;
}

// The least budget a too-small one is told of is given in bytes too (1.74 MiB read back is
// 1824522 bytes, short of the 1828864 that tiled ResNet-50 at 97 px: the figure alone failed
// again; session 44's hostile run), and that budget plans.
TEST(tile_cli_test, the_least_budget_named_is_exact_and_plans) {
  std::vector<std::string> a = {"--net",     "resnet50", "--width",      "0.0625",
                                "--classes", "5",        "--image-side", "32",
                                "--batch",   "1",        "--conv-ws",    "fixed:direct",
                                "--policy",  "all",      "--tile",       "--budget"};
  a.push_back("110KiB");
  const auto small = run(plan_command, a);
  EXPECT_EQ(small.code, 1) << small.out;
  const std::size_t at = small.out.find("tiles at ");
  ASSERT_NE(at, std::string::npos) << small.out;
  const std::size_t open = small.out.find(" (", at), bytes = small.out.find(" bytes)", at);
  ASSERT_LT(open, bytes) << small.out;
  const std::string named = small.out.substr(open + 2, bytes - open - 2);
  a.back() = named;
  EXPECT_EQ(run(plan_command, a).code, 0) << named;
}

}  // namespace
}  // namespace memweave
