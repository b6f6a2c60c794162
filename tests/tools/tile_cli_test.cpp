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
  // backward) does not fit, not even tiled finer, and is told both were tried.
  const auto live =
      run(plan_command, narrow_vgg_224({"--budget", "6MiB", "--policy", "liveness", "--tile"}));
  EXPECT_EQ(live.code, 1) << live.out;
  EXPECT_NE(live.out.find("that is with the budget's tiled segments, and tiled for smaller "
                          "targets (half an octave apart, down to the finest tiles) it did not "
                          "fit either"),
            std::string::npos)
      << live.out;
}

// ResNet-14 at 256 px, batch 2: liveness holds every activation stashed for backward, so its
// floor is well over its largest step, and the budget's own tiling (the layers whose step is
// over the budget) left it short: it needed 28.6 MiB tiled for 11 MiB, and 10.6 MiB tiled for
// 3 MiB, so 3 MiB "tiled more and ran" where 12 MiB did not.
std::vector<std::string> resnet14_256(std::vector<std::string> extra) {
  std::vector<std::string> a = {"--net",     "resnet:1,1,1,1", "--width",  "0.25",     "--classes",
                                "10",        "--image-side",   "256",      "--batch",  "2",
                                "--conv-ws", "fixed:direct",   "--policy", "liveness", "--tile"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::size_t tiling_target_in(const std::string& out) {
  const std::string key = "it ran tiled for ";
  const std::size_t at = out.find(key);
  if (at == std::string::npos) return 0;
  const std::size_t open = out.find(" (", at) + 2;
  return std::stoull(out.substr(open, out.find(" bytes", open) - open));
}

TEST(tile_cli_test, a_policy_the_budgets_tiles_do_not_fit_runs_tiled_finer) {
  const std::string json = temp("tile_finer.json");
  const auto plan = run(plan_command, resnet14_256({"--budget", "12MiB", "--json", json}));
  EXPECT_EQ(plan.code, 0) << plan.out;
  const std::size_t target = tiling_target_in(plan.out);
  EXPECT_GT(target, 0u) << plan.out;
  EXPECT_LT(target, 12u << 20) << plan.out;
  EXPECT_NE(plan.out.find("    tiled segment conv1.."), std::string::npos) << plan.out;
  const std::string j = slurp(json);
  std::filesystem::remove(json);
  EXPECT_NE(j.find("\"tiling_target_bytes\": " + std::to_string(target)), std::string::npos) << j;
  EXPECT_NE(j.find("\"tiled_segments\": [\n        {\"first\": \"conv1\""), std::string::npos) << j;
  // train runs what plan planned: the same target, and it fits.
  const auto train = run(train_command, resnet14_256({"--budget", "12MiB", "--device", "host",
                                                      "--threads", "1", "--iterations", "1"}));
  EXPECT_EQ(train.code, 0) << train.out;
  EXPECT_EQ(tiling_target_in(train.out), target) << train.out;
}

// With each policy tiled as finely as it needs, a larger budget runs wherever a smaller one
// does: every budget from --min-budget's answer up to the untiled floor fits.
TEST(tile_cli_test, fitting_under_tile_grows_with_the_budget) {
  const auto least = run(plan_command, resnet14_256({"--min-budget"}));
  ASSERT_EQ(least.code, 0) << least.out;
  const std::size_t at = least.out.find("liveness: ");
  ASSERT_NE(at, std::string::npos) << least.out;
  const std::size_t open = least.out.find(" (", at) + 2;
  const std::size_t bytes = std::stoull(least.out.substr(open, least.out.find(" bytes", open)));
  EXPECT_LT(bytes, 16u << 20) << least.out;  // 28.7 MiB when tiled only for the budget
  for (const double scale : {1.0, 1.2, 1.5, 1.9, 2.4, 3.0}) {
    const std::size_t budget = static_cast<std::size_t>(scale * static_cast<double>(bytes));
    const auto r = run(plan_command, resnet14_256({"--budget", std::to_string(budget)}));
    EXPECT_EQ(r.code, 0) << budget << "\n" << r.out;
  }
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
