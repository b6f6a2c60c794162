// `memweave plan --split` (TSPLIT): the per-step parts and the floors, the policies' runs with
// their split steps staged, no split where none is needed, a budget below the smallest
// micro-step as "does not fit" naming it.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "cli_harness.hpp"
#include "memweave/core/error.hpp"
#include "tools/cli_args.hpp"
#include "tools/network_run.hpp"

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
  // The whole plans only: mixing them region by region quadruples the planning here.
  const scoped_env whole("MEMWEAVE_SPLIT_REGIONS", "0");
  const auto r = run(plan_command, at("147MiB"));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("max(l_i) 294.01 MiB"), std::string::npos) << r.out;
  // One image per micro-batch, one output channel per CONV/FC group: BN's backward, which
  // splits only along the batch, sets the floor; with micro-batches alone, res5a_branch2b's
  // weights, gradient and momentum.
  EXPECT_NE(r.out.find("one output channel per CONV/FC group) 9.20 MiB at step 318 "
                       "(bn2b2_branch2c)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("floor with micro-batches alone (the largest micro-step at one image) "
                       "27.86 MiB at step 208 (res5a_branch2b)"),
            std::string::npos)
      << r.out;
  // The runs: both policies fit, utp with the 41 split steps staged; all with the whole split
  // plan it weighed fastest, here the one whose micro-steps fit 70 % of the budget (not mixed
  // region by region: all_runs_the_fastest_split_plan_and_says_which).
  EXPECT_NE(r.out.find("utp: TSPLIT: 41 steps ran in micro-batches"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("all: TSPLIT: the fastest whole split plan here in the plan's model fits "
                       "its micro-steps in 70 % of the budget (69 steps in micro-batches, "
                       "against 41 with the fewest, which runs 895.9 ms per iteration)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("all: TSPLIT: 69 steps ran in micro-batches"), std::string::npos) << r.out;
  // Its plan step by step, the first twelve (the plan printed above is the fewest).
  EXPECT_NE(r.out.find("all: its steps in micro-batches: conv1 F 2, bn_conv1 F 2, conv1_relu F "
                       "2, pool1 F 2, res2a_branch2c F 2,"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(", and 57 more (--json, --csv: `parts`)"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(" NO "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("41 of 351 steps split, 0 in output-channel groups"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("step   16 res2a F                          2 parts  whole 294.00 MiB  "
                       "micro-step 147.00 MiB"),
            std::string::npos)
      << r.out;
}

// A fixed algorithm with a workspace takes it whole beside every CONV micro-step: the floors
// and the split plan hold it, and the plan says so (a hostile run had found --split doing
// nothing under fixed:im2col_image; then the floors were only noted to leave it out, and utp
// failed under `train` where `plan` split nothing: "the workspace of im2col_image needs 147.00
// KiB", 69 KiB free). conv1's step is 137 KiB of tensors and a 147 KiB im2col matrix.
TEST(split_cli_test, a_fixed_algorithms_workspace_is_in_the_floor_and_the_split_plan) {
  const std::vector<std::string> small = {
      "--net",  "resnet:1,1,1,1", "--width", "0.0625",   "--image-side", "32",       "--classes",
      "5",      "--batch",        "8",       "--policy", "utp",          "--budget", "200KiB",
      "--split"};
  for (const char* algorithm : {"fixed:im2col_image", "fixed:direct"}) {
    SCOPED_TRACE(algorithm);
    std::vector<std::string> a = small;
    a.insert(a.end(), {"--conv-ws", algorithm});
    const auto r = run(plan_command, a);
    EXPECT_EQ(r.code, 0) << r.out;
    const bool im2col = std::string(algorithm) != "fixed:direct";
    const bool noted = r.out.find("hold each CONV step's workspace under --conv-ws '" +
                                  std::string(algorithm) + "'") != std::string::npos;
    EXPECT_EQ(noted, im2col) << r.out;
    EXPECT_NE(r.out.find(im2col ? "floor with micro-batches alone (the largest micro-step at one "
                                  "image) 172.00 KiB at step 111 (conv1)"
                                : "floor with micro-batches alone (the largest micro-step at one "
                                  "image) 111.00 KiB at step 68 (res5a_branch2b)"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find(im2col ? "2 of 111 steps split" : "0 of 111 steps split"),
              std::string::npos)
        << r.out;
  }
}

// A hostile review (session 29): below the split floor `plan --split` returned before its
// report, and wrote no --json/--csv/--svg (without --split, or under train, they were written).
TEST(split_cli_test, below_the_split_floor_the_report_files_are_still_written) {
  const std::string json = temp("split_below_floor.json");
  std::filesystem::remove(json);
  const auto r =
      run(plan_command, {"--net", "resnet:1,1,1,1", "--width", "0.0625", "--image-side", "32",
                         "--classes", "5", "--batch", "8", "--conv-ws", "fixed:direct", "--split",
                         "--policy", "utp,all", "--budget", "10KiB", "--json", json});
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("does not fit: budget of 10.00 KiB"), std::string::npos) << r.out;
  EXPECT_NE(slurp(json).find("\"fits\": false"), std::string::npos) << r.out;
  std::filesystem::remove(json);
}

// Liveness moves nothing to host memory: its split steps run whole on the device, so below
// the split floor its row names its own floor, not the micro-step (it was told "at least 20.00
// KiB", and at that budget then 435.00 KiB; session 43's hostile run).
TEST(split_cli_test, below_the_split_floor_a_policy_that_stages_nothing_names_its_own_floor) {
  const auto r =
      run(plan_command, {"--net", "resnet:1,1,1,1", "--width", "0.0625", "--image-side", "32",
                         "--classes", "5", "--batch", "4", "--conv-ws", "fixed:direct", "--split",
                         "--policy", "liveness,utp", "--budget", "10000"});
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("  liveness: budget 9.77 KiB is below what policy liveness can run "
                       "resnet14 at batch 4 with: parameters and state 368.00 KiB (as the heap "
                       "rounds them) plus the "
                       "tensors live at step 63 (res5a_branch1 backward) 294.00 KiB = 662.00 "
                       "KiB"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  utp: budget of 9.77 KiB (--budget) is below the smallest micro-step "
                       "of step 98"),
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

// What train and eval plan for a cuda device (split_parts_if_asked without the host's
// algorithms): where one image does not fit without output-channel groups (VGG16 at batch 1,
// fc6's 1.15 GiB), fc6 is cut into channel groups as on the host, and all's weighing may cut
// them too; where micro-batches suffice, none.
TEST(split_cli_test, the_split_planned_for_cuda_cuts_channel_groups_where_one_image_does_not_fit) {
  const auto options_of = [](const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {"memweave", "train", "--split", "--policy", "all"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    std::vector<const char*> raw;
    for (const std::string& a : argv) raw.push_back(a.c_str());
    cli_args args(static_cast<int>(raw.size()), raw.data(), 2, {"tile", "split"});  // train's
    network_run_options o = read_network_run_options(args);
    o.split = args.flag("split");  // as train_command reads it
    return o;
  };
  network_run_options o = options_of({"--net", "vgg16", "--batch", "1", "--budget", "1GiB"});
  const network net = make_run_network(o, false);
  const auto groups = [](const executor_options& e) {
    return std::count_if(e.channel_parts.begin(), e.channel_parts.end(),
                         [](int c) { return c > 1; });
  };
  executor_options host, cuda;
  split_parts_if_asked(net, o, host, true);
  split_parts_if_asked(net, o, cuda, false);
  EXPECT_TRUE(host.split_channel_groups);
  EXPECT_TRUE(cuda.split_channel_groups);
  EXPECT_NE(groups(host), 0);
  EXPECT_EQ(cuda.channel_parts, host.channel_parts);
  // Where micro-batches do (below its max(l_i), 137 KiB, above its floor of micro-batches,
  // 111 KiB): split, no groups.
  network_run_options b8 =
      options_of({"--net", "resnet:1,1,1,1", "--width", "0.0625", "--image-side", "32", "--classes",
                  "5", "--batch", "8", "--budget", "120KiB"});
  const network small = make_run_network(b8, false);
  executor_options split;
  split_parts_if_asked(small, b8, split, false);
  EXPECT_NE(std::count_if(split.split_parts.begin(), split.split_parts.end(),
                          [](int p) { return p > 1; }),
            0);
  EXPECT_EQ(groups(split), 0);
}

// Batch 1: VGG16's fc6 backward (its weights, their gradient and momentum: 1.15 GiB) cannot
// be split along the batch. In output-feature groups it runs: at 1 GiB in 2, its tensors in
// host memory under utp and all; the floor is relu1_2's backward at one image, 36.75 MiB.
TEST(split_cli_test, batch_one_runs_the_fc_weights_in_output_channel_groups) {
  const auto r = run(plan_command, {"--net", "vgg16", "--batch", "1", "--split", "--budget", "1GiB",
                                    "--policy", "utp,all"});
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("floor with micro-batches alone (the largest micro-step at one image) "
                       "1.15 GiB at step 48 (fc6)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("one output channel per CONV/FC group) 36.75 MiB at step 76 (relu1_2)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("fc6 B                            1 parts x 2 channel groups"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\nutp         yes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nall         yes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("utp: TSPLIT: 1 steps ran in micro-batches (1 in output-channel groups)"),
            std::string::npos)
      << r.out;
  const auto below = run(plan_command, {"--net", "vgg16", "--batch", "1", "--split", "--budget",
                                        "36MiB", "--policy", "utp"});
  EXPECT_EQ(below.code, 1) << below.out;
  EXPECT_NE(below.out.find("below the smallest micro-step of step 76 (relu1_2 backward"),
            std::string::npos)
      << below.out;
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& extra) {
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// The "loss   X" of each iteration line of a train run's output, in order.
std::vector<std::string> iteration_losses(const std::string& out) {
  std::vector<std::string> losses;
  for (std::size_t at = out.find("  loss "); at != std::string::npos;
       at = out.find("  loss ", at + 1)) {
    const std::size_t value = out.find_first_not_of(' ', at + 7);
    losses.push_back(out.substr(value, out.find(' ', value) - value));
  }
  return losses;
}

// Trains `net` under liveness with no budget and with `split` (policy, budget, --split): the
// same losses iteration by iteration, among them `losses` (none where the kernels' sums
// depend on the machine: im2col's GEMMs are OpenBLAS's, which picks its kernels by CPU), and
// the split run's report says `marker`.
void expect_the_unsplit_losses(const std::vector<std::string>& net,
                               const std::vector<std::string>& split_args,
                               const std::vector<const char*>& losses, const std::string& marker) {
  const auto whole = run(train_command, with(net, {"--policy", "liveness"}));
  ASSERT_EQ(whole.code, 0) << whole.out;
  const auto split = run(train_command, with(net, split_args));
  ASSERT_EQ(split.code, 0) << split.out;
  EXPECT_NE(split.out.find(marker), std::string::npos) << split.out;
  EXPECT_FALSE(iteration_losses(whole.out).empty()) << whole.out;
  EXPECT_EQ(iteration_losses(whole.out), iteration_losses(split.out)) << split.out;
  for (const char* loss : losses) {
    EXPECT_NE(whole.out.find(loss), std::string::npos) << whole.out;
    EXPECT_NE(split.out.find(loss), std::string::npos) << split.out;
  }
}

// ... and `--split --max-batch` took --json and --policy and ignored them (it answers for
// `all` and writes nothing); a fixed algorithm that names nothing was "does not fit" (exit
// 1, "raise --budget"), not bad input.
TEST(split_cli_test, what_split_cannot_honour_is_refused) {
  const std::vector<std::string> search = {
      "--net", "resnet:1,1,1,1", "--width",  "0.0625", "--image-side", "32", "--classes",
      "5",     "--split",        "--budget", "200KiB"};
  std::vector<std::string> net = search;
  net.insert(net.end(), {"--batch", "8"});
  EXPECT_NE(error_of(plan_command, with(search, {"--max-batch", "--json", temp("mb.json")}))
                .find("--split --max-batch prints its answer and writes no --json"),
            std::string::npos);
  EXPECT_NE(error_of(plan_command, with(search, {"--max-batch", "--policy", "utp"}))
                .find("searches the largest batch `all` trains: give --policy all or leave "
                      "it out (--policy 'utp')"),
            std::string::npos);
  {
    const scoped_env policy("MEMWEAVE_POLICY", "liveness");  // the variable, too
    EXPECT_NE(error_of(plan_command, with(search, {"--max-batch"}))
                  .find("give --policy all or leave it out (MEMWEAVE_POLICY='liveness')"),
              std::string::npos);
  }
  for (const bool train : {false, true}) {
    std::vector<std::string> a = with(net, {"--policy", "utp", "--conv-ws", "fixed:bogus"});
    if (train) a.insert(a.end(), {"--device", "host", "--iterations", "1"});
    const std::string e = error_of(train ? train_command : plan_command, a);
    EXPECT_NE(e.find("--conv-ws 'fixed:bogus' names no host algorithm of convolution conv1; "
                     "available: direct, im2col_image"),
              std::string::npos)
        << e;
  }
}

// The staged tensors and the swapped copies share the host pool: an offload counts what is
// staged (a review found 5.94 MiB swapped beside 59.83 MiB staged in a 64 MiB pool), and the
// failure says host memory ran out, not the budget.
// A search writes no heap trace: each of its runs replaced the file, leaving the trace of one
// nobody could name (session 36's hostile run; the search without --split already said so).
TEST(split_cli_test, the_max_batch_search_writes_no_heap_trace) {
  const std::string trace = temp("search.trace");
  const scoped_env env("MEMWEAVE_TRACE", trace.c_str());
  const auto r =
      run(plan_command, {"--net", "resnet:1,1,1,1", "--width", "0.0625", "--image-side", "32",
                         "--classes", "5", "--split", "--budget", "200KiB", "--max-batch"});
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("MEMWEAVE_TRACE is not written by a search (--split --max-batch)"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(std::filesystem::exists(trace));
}

TEST(split_cli_test, staged_and_swapped_bytes_share_the_host_pool) {
  const auto r =
      run(plan_command, {"--net", "vgg16", "--width", "0.25", "--image-side", "64", "--batch", "1",
                         "--classes", "5", "--conv-ws", "fixed:direct", "--split", "--budget",
                         "1MiB", "--policy", "utp", "--host-pool", "64MiB"});
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("utp: host memory ran out at step 5 (relu1_2 forward)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("63.94 MiB in use (62.65 MiB of it staged tensors)"), std::string::npos)
      << r.out;
}

// train under fixed:im2col_image, conv1 split for its workspace: liveness's losses.
TEST(split_cli_test, train_with_a_fixed_algorithms_workspace_gives_the_unsplit_losses) {
  const std::vector<std::string> net = {"--net",        "resnet:1,1,1,1",
                                        "--width",      "0.0625",
                                        "--image-side", "32",
                                        "--classes",    "5",
                                        "--batch",      "8",
                                        "--conv-ws",    "fixed:im2col_image",
                                        "--iterations", "3",
                                        "--device",     "host"};
  expect_the_unsplit_losses(net, {"--policy", "utp", "--budget", "180KiB", "--split"}, {},
                            "utp: TSPLIT: 2 steps ran in micro-batches");
}

// train --split below max(l_i) (518.89 KiB for this narrow ResNet-50): the same losses as
// liveness with unlimited memory (the oracle tests compare every bit).
TEST(split_cli_test, train_below_the_largest_layer_gives_the_unsplit_losses) {
  const std::vector<std::string> net = {"--net",        "resnet50", "--batch",   "8",
                                        "--width",      "0.0625",   "--classes", "5",
                                        "--image-side", "64",       "--conv-ws", "fixed:direct",
                                        "--iterations", "3",        "--device",  "host"};
  expect_the_unsplit_losses(net, {"--policy", "utp", "--budget", "300KiB", "--split"},
                            {"loss   3.53254", "loss   2.27510", "loss   2.19139"},
                            "utp: TSPLIT: ");
  const std::string no_budget = error_of(train_command, with(net, {"--policy", "utp", "--split"}));
  EXPECT_NE(no_budget.find("--split runs the steps over the budget in micro-batches: give "
                           "--budget"),
            std::string::npos)
      << no_budget;
}

// train --split at batch 1 below the floor of micro-batches (VGG16's FC weights): its CONV
// and FC steps in output-channel groups, the same losses as liveness with unlimited memory.
TEST(split_cli_test, train_in_output_channel_groups_gives_the_unsplit_losses) {
  expect_the_unsplit_losses(
      {"--net", "vgg16", "--batch", "1", "--width", "0.25", "--classes", "10", "--image-side", "32",
       "--conv-ws", "fixed:direct", "--iterations", "3", "--device", "host", "--lr", "0.001"},
      {"--policy", "all", "--budget", "2MiB", "--split"},
      {"loss   2.54438", "loss   2.09522", "loss   4.29594"}, "in output-channel groups)");
}

// MEMWEAVE_SPLIT_COMPRESS=fp16 from the command line: `train` on the host and `plan` move the
// same bytes, fewer than exact training, the report says how many crossed as fp16 and that it
// is lossy, with the rounding's largest error where values were rounded (the host); the losses
// stay near the exact ones. A value that is not a choice names the variable.
TEST(split_cli_test, fp16_micro_tensors_report_their_bytes_and_rounding) {
  const std::vector<std::string> net = {
      "--net",     "resnet50", "--batch",      "8",      "--width",   "0.0625",
      "--classes", "5",        "--image-side", "64",     "--conv-ws", "fixed:direct",
      "--policy",  "utp",      "--budget",     "300KiB", "--split"};
  const std::vector<std::string> host = {"--device", "host", "--iterations", "1"};
  const auto exact = run(train_command, with(net, host));
  ASSERT_EQ(exact.code, 0) << exact.out;
  EXPECT_EQ(exact.out.find("FP16"), std::string::npos) << exact.out;
  const scoped_env fp16("MEMWEAVE_SPLIT_COMPRESS", "fp16");
  const auto trained = run(train_command, with(net, host));
  ASSERT_EQ(trained.code, 0) << trained.out;
  const auto planned = run(plan_command, with(net, {}));
  ASSERT_EQ(planned.code, 0) << planned.out;
  const auto staged = [](const std::string& out) {
    const auto at = out.find("with their micro-tensors in host memory, ");
    return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
  };
  EXPECT_FALSE(staged(trained.out).empty()) << trained.out;
  EXPECT_EQ(staged(trained.out), staged(planned.out));
  EXPECT_NE(staged(trained.out), staged(exact.out));
  const std::string lossy = "utp: TSPLIT: FP16 micro-tensors (lossy, MEMWEAVE_SPLIT_COMPRESS): ";
  EXPECT_NE(trained.out.find(lossy), std::string::npos) << trained.out;
  EXPECT_NE(trained.out.find("largest relative rounding error 0.000488"), std::string::npos)
      << trained.out;
  EXPECT_NE(planned.out.find(lossy), std::string::npos) << planned.out;
  EXPECT_EQ(planned.out.find("rounding error"), std::string::npos) << planned.out;
  const scoped_env bad("MEMWEAVE_SPLIT_COMPRESS", "bf16");
  const std::string e = error_of(plan_command, net);
  EXPECT_NE(e.find("MEMWEAVE_SPLIT_COMPRESS='bf16' is not one of none|fp16"), std::string::npos)
      << e;
}

TEST(split_cli_test, needs_a_budget) {
  EXPECT_NE(error_of(plan_command, k_net).find("--split needs --budget"), std::string::npos);
}

// `memweave eval` of `net` under liveness with no budget: what follows the policy's name on
// its result line (" loss ... accuracy ..."), "" when it did not run.
std::string unlimited_evaluation(const std::vector<std::string>& net) {
  const auto r = run(eval_command, with(net, {"--policy", "liveness"}));
  const auto at = r.out.find("liveness  loss");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(at, std::string::npos) << r.out;
  if (r.code != 0 || at == std::string::npos) return "";
  return r.out.substr(at + 9, r.out.find('\n', at) - at - 9);
}

// `memweave eval --split`: below the forward's largest step (conv1_2's, 8 MiB here) the
// forward steps run staged and the loss and accuracy are those of unlimited memory; without
// --split that budget does not fit, and below the smallest micro-step (relu1_1's at one
// image, which no channel group cuts) the error names it.
TEST(split_cli_test, eval_below_the_forwards_largest_step_gives_the_unlimited_results) {
  const std::vector<std::string> net = {
      "--net",     "vgg16", "--batch",   "16", "--image-side", "128", "--width", "0.0625",
      "--classes", "5",     "--batches", "2",  "--device",     "host"};
  const std::string result = unlimited_evaluation(net);
  ASSERT_FALSE(result.empty());
  const auto split =
      run(eval_command, with(net, {"--policy", "utp,all", "--budget", "2MiB", "--split"}));
  ASSERT_EQ(split.code, 0) << split.out;
  EXPECT_NE(split.out.find("utp      " + result), std::string::npos) << result << "\n" << split.out;
  EXPECT_NE(split.out.find("all      " + result), std::string::npos) << result << "\n" << split.out;
  EXPECT_NE(split.out.find("TSPLIT: 13 steps ran in micro-batches with their micro-tensors in "
                           "host memory"),
            std::string::npos)
      << split.out;
  const auto whole = run(eval_command, with(net, {"--policy", "utp", "--budget", "2MiB"}));
  EXPECT_EQ(whole.code, 1) << whole.out;
  // No budget: an error before anything runs.
  const std::string no_budget = error_of(eval_command, with(net, {"--policy", "utp", "--split"}));
  EXPECT_NE(no_budget.find("--split runs the forward steps over the budget in micro-batches: "
                           "give --budget"),
            std::string::npos)
      << no_budget;
  const auto below =
      run(eval_command, with(net, {"--policy", "utp", "--budget", "256KiB", "--split"}));
  EXPECT_EQ(below.code, 1) << below.out;
  EXPECT_NE(below.out.find("below the smallest micro-step of step 3 (relu1_1 forward, one image "
                           "per micro-batch): 512.00 KiB"),
            std::string::npos)
      << below.out;
}

// eval --split below the floor of micro-batches: fc6's weights (24.5 MiB here) run in
// output-channel groups from host memory, at 512 KiB, with the unlimited results.
TEST(split_cli_test, eval_runs_the_fc_weights_in_output_channel_groups) {
  const std::vector<std::string> net = {
      "--net",     "vgg16", "--batch",   "2", "--image-side", "32",  "--width", "0.25",
      "--classes", "10",    "--batches", "2", "--device",     "host"};
  const std::string result = unlimited_evaluation(net);
  ASSERT_FALSE(result.empty());
  const auto split =
      run(eval_command, with(net, {"--policy", "all", "--budget", "512KiB", "--split"}));
  ASSERT_EQ(split.code, 0) << split.out;
  EXPECT_NE(split.out.find("all      " + result), std::string::npos) << result << "\n" << split.out;
  EXPECT_NE(split.out.find("peak 497.00 KiB"), std::string::npos) << split.out;
  // Said as train says it (eval's line named the micro-batches alone).
  EXPECT_NE(split.out.find(" in output-channel groups) with their micro-tensors in host memory"),
            std::string::npos)
      << split.out;
}

// `all` weighs the split plans whose micro-steps fit 100, 85, 70, 55 and 40 % of the budget,
// keeps the fastest, mixes it region by region with the others (MEMWEAVE_SPLIT_REGIONS, 64),
// and says so; MEMWEAVE_SPLIT_REGIONS=0 runs the fastest whole plan, MEMWEAVE_SPLIT_WEIGH=0
// the fewest micro-batches.
TEST(split_cli_test, all_runs_the_fastest_split_plan_and_says_which) {
  const std::vector<std::string> args = {
      "--net",  "vgg16",    "--batch", "16",      "--image-side", "128", "--width",
      "0.0625", "--budget", "3MiB",    "--split", "--policy",     "all"};
  const std::string whole_plan =
      "all: TSPLIT: the fastest whole split plan here in the plan's model fits its micro-steps in "
      "85 % of the budget (27 steps in micro-batches, against 24 with the fewest, which runs "
      "9.722 ms per iteration)";
  const std::string json = temp("split_mixed.json");
  std::vector<std::string> with_json = args;
  with_json.insert(with_json.end(), {"--json", json});
  const auto mixed = run(plan_command, with_json);
  EXPECT_EQ(mixed.code, 0) << mixed.out;
  EXPECT_NE(mixed.out.find(whole_plan), std::string::npos) << mixed.out;
  // The report's fields for scripts: the whole plan's share and time, and the steps mixed.
  const std::string report = slurp(json);
  std::filesystem::remove(json);
  EXPECT_NE(report.find("\"split_steps\": 27, \"fewest_split_steps\": 24"), std::string::npos)
      << report;
  EXPECT_NE(report.find("\"mixed_split_steps\": 14, \"whole_split_seconds\": 0.008979"),
            std::string::npos)
      << report;
  EXPECT_NE(mixed.out.find("all: TSPLIT: 14 steps took another split plan's micro-batches, "
                           "region by region, faster here in the plan's model (the whole plan: "
                           "8.979 ms per iteration)"),
            std::string::npos)
      << mixed.out;
  EXPECT_NE(mixed.out.find("all: TSPLIT: 27 steps ran in micro-batches"), std::string::npos)
      << mixed.out;
  {
    const scoped_env whole("MEMWEAVE_SPLIT_REGIONS", "0");
    const auto weighed = run(plan_command, args);
    EXPECT_EQ(weighed.code, 0) << weighed.out;
    EXPECT_NE(weighed.out.find(whole_plan), std::string::npos) << weighed.out;
    EXPECT_EQ(weighed.out.find("region by region"), std::string::npos) << weighed.out;
    EXPECT_NE(weighed.out.find("all: TSPLIT: 27 steps ran in micro-batches"), std::string::npos)
        << weighed.out;
  }
  const scoped_env fewest("MEMWEAVE_SPLIT_WEIGH", "0");
  const auto plain = run(plan_command, args);
  EXPECT_EQ(plain.code, 0) << plain.out;
  EXPECT_EQ(plain.out.find("whole split plan"), std::string::npos) << plain.out;
  EXPECT_EQ(plain.out.find("region by region"), std::string::npos) << plain.out;
  EXPECT_NE(plain.out.find("all: TSPLIT: 24 steps ran in micro-batches"), std::string::npos)
      << plain.out;
}

// ResNet-152 b1700 at 12 GiB in a 128 GiB host pool: the staged micro-tensors and the swapped
// tensors fill it, and an eviction whose host copy cannot be had drops the tensor where it
// can be rebuilt (it used to fail the run). In the default 256 GiB pool nothing is dropped
// since a run with staged steps stopped writing back ahead of need.
TEST(split_cli_test, a_full_host_pool_drops_what_can_be_rebuilt) {
  // The fewest micro-batches only: weighing the other split plans triples the planning, and
  // the host pool fills either way.
  const scoped_env fewest("MEMWEAVE_SPLIT_WEIGH", "0");
  const auto r =
      run(plan_command, {"--net", "resnet152", "--batch", "1700", "--budget", "12GiB", "--split",
                         "--policy", "all", "--conv-ws", "none", "--host-pool", "128GiB"});
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\nall         yes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("all: host memory ran out: 97 values there were given back and rebuilt "
                       "by replays"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("no host memory"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace memweave
