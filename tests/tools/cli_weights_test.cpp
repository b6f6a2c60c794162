// train --init-from / --save, the learning-rate flags and `memweave eval`, driven
// in-process: a resumed run prints the losses of a straight one, eval prints loss and
// accuracy the same under every policy, and bad values are errors naming the flag.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "cli_harness.hpp"
#include "memweave/engine/checkpoint.hpp"
#include "memweave/swap/transfer_engine.hpp"

namespace memweave {
namespace {

using test::error_of;
using test::run;
using test::temp;

// A small ResNet (one block per stage) on the host with one fixed convolution algorithm.
std::vector<std::string> net_args(std::vector<std::string> extra,
                                  const std::string& device = "host") {
  std::vector<std::string> a = {"--net",        "resnet:1,1,1,1",
                                "--batch",      "4",
                                "--image-side", "32",
                                "--width",      "0.125",
                                "--classes",    "5",
                                "--conv-ws",    "fixed:im2col_image",
                                "--threads",    "2",
                                "--device",     device};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// The "loss X" of each progress line.
std::vector<std::string> losses(const std::string& out) {
  std::vector<std::string> v;
  const std::regex re("iter +[0-9]+/[0-9]+ +loss +([-0-9.]+)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator();
       ++it) {
    v.push_back((*it)[1]);
  }
  return v;
}

TEST(cli_weights, train_resumed_from_save_prints_the_losses_of_a_straight_run) {
  const std::string a = temp("a.ckpt"), b = temp("b.ckpt");
  const std::vector<std::string> schedule = {
      "--lr", "0.02",       "--lr-schedule", "step:1:0.5",     "--warmup",
      "2",    "--momentum", "0.8",           "--weight-decay", "0.001"};
  auto args = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), schedule.begin(), schedule.end());
    return net_args(extra);
  };
  const auto straight = run(train_command, args({"--iterations", "5", "--policy", "liveness"}));
  const auto first =
      run(train_command, args({"--iterations", "2", "--policy", "liveness", "--save", a}));
  EXPECT_NE(first.out.find("saved the weights after iteration 2 to " + a), std::string::npos)
      << first.out;
  const auto rest = run(
      train_command, args({"--iterations", "3", "--policy", "utp", "--init-from", a, "--save", b}));
  EXPECT_NE(rest.out.find("resuming at iteration 2"), std::string::npos) << rest.out;
  std::vector<std::string> resumed = losses(first.out);
  for (const auto& l : losses(rest.out)) resumed.push_back(l);
  ASSERT_EQ(losses(straight.out).size(), 5u) << straight.out;
  EXPECT_EQ(resumed, losses(straight.out));
  // The solver's settings from the file, the schedule given again: the file holds the base
  // rate (it held the last iteration's scheduled one, which the schedule then scaled twice).
  // (step:1: the last iteration saved ran at 0.01, not at the base rate 0.02.)
  EXPECT_EQ(read_checkpoint(a).state.solver.learning_rate, 0.02f);
  const auto from_file =
      run(train_command, net_args({"--iterations", "3", "--policy", "liveness", "--init-from", a,
                                   "--lr-schedule", "step:1:0.5", "--warmup", "2"}));
  std::vector<std::string> resumed_from_file = losses(first.out);
  for (const auto& l : losses(from_file.out)) resumed_from_file.push_back(l);
  EXPECT_EQ(resumed_from_file, losses(straight.out)) << from_file.out;
  // Without --lr-schedule and --warmup the file's schedule continues (it trained at the
  // constant base rate, silently): the straight run's losses still.
  const auto file_schedule =
      run(train_command, net_args({"--iterations", "3", "--policy", "liveness", "--init-from", a}));
  std::vector<std::string> resumed_with_its_schedule = losses(first.out);
  for (const auto& l : losses(file_schedule.out)) resumed_with_its_schedule.push_back(l);
  EXPECT_EQ(resumed_with_its_schedule, losses(straight.out)) << file_schedule.out;
  EXPECT_NE(file_schedule.out.find("resuming at iteration 2, base learning rate 0.02 (the "
                                   "checkpoint's; --lr replaces it), learning-rate schedule "
                                   "step:1:0.5 warmup 2 (of --lr-schedule and --warmup, what is "
                                   "not given is the checkpoint's)"),
            std::string::npos)
      << file_schedule.out;
  // Each on its own: the schedule given, the warm-up the file's (said on the resuming line).
  const auto mixed =
      run(train_command, net_args({"--iterations", "3", "--policy", "liveness", "--init-from", a,
                                   "--lr-schedule", "step:1:0.5"}));
  std::vector<std::string> resumed_mixed = losses(first.out);
  for (const auto& l : losses(mixed.out)) resumed_mixed.push_back(l);
  EXPECT_EQ(resumed_mixed, losses(straight.out)) << mixed.out;
  EXPECT_NE(mixed.out.find("learning-rate schedule step:1:0.5 warmup 2"), std::string::npos)
      << mixed.out;
  ASSERT_TRUE(read_checkpoint(a).state.schedule.has_value());
  EXPECT_EQ(read_checkpoint(a).state.schedule->describe(), "step:1:0.5 warmup 2");
  // And eval of the saved weights: the same loss and accuracy under every policy.
  const auto e = run(eval_command, net_args({"--init-from", b, "--batches", "3", "--policy",
                                             "baseline,liveness,recompute,all"}));
  EXPECT_EQ(e.code, 0);
  const std::regex re("loss +([-0-9.]+) +accuracy +([0-9.]+%)");
  std::vector<std::string> rows;
  for (auto it = std::sregex_iterator(e.out.begin(), e.out.end(), re); it != std::sregex_iterator();
       ++it) {
    rows.push_back(it->str());
  }
  ASSERT_EQ(rows.size(), 4u) << e.out;
  for (const auto& r : rows) EXPECT_EQ(r, rows[0]) << e.out;
  EXPECT_NE(e.out.find("forward-only liveness"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("memory per batch: peak"), std::string::npos) << e.out;
  // The null device: memory only, the checkpoint not needed there.
  const auto n = run(eval_command, net_args({"--policy", "liveness"}, "null"));
  EXPECT_NE(n.out.find("null device: memory only"), std::string::npos) << n.out;
  std::filesystem::remove(a);
  std::filesystem::remove(b);
}

// A run that would end past the last iteration a checkpoint records is refused before it
// trains: it saved a file its own reader then refused.
TEST(cli_weights, a_save_past_the_last_recordable_iteration_is_refused_up_front) {
  const std::string a = temp("late.ckpt"), b = temp("later.ckpt");
  ASSERT_EQ(
      run(train_command, net_args({"--iterations", "1", "--policy", "liveness", "--save", a})).code,
      0);
  // The iteration field (offset 16) set to 2^53 - 1, the checksum made again.
  std::string bytes = slurp(a);
  const std::int64_t late = checkpoint_max_iteration - 1;
  std::memcpy(bytes.data() + 16, &late, sizeof late);
  const std::uint64_t sum = transfer_checksum(bytes.data(), bytes.size() - 8);
  std::memcpy(bytes.data() + bytes.size() - 8, &sum, sizeof sum);
  std::ofstream(a, std::ios::binary | std::ios::trunc) << bytes;
  const std::string m = error_of(
      train_command,
      net_args({"--iterations", "3", "--policy", "liveness", "--init-from", a, "--save", b}));
  EXPECT_NE(m.find("--iterations 3 after iteration 9007199254740991 of --init-from"),
            std::string::npos)
      << m;
  EXPECT_FALSE(std::filesystem::exists(b));
  // One iteration more still fits.
  EXPECT_EQ(run(train_command, net_args({"--iterations", "1", "--policy", "liveness", "--init-from",
                                         a, "--save", b}))
                .code,
            0);
  EXPECT_EQ(read_checkpoint(b).state.iteration, checkpoint_max_iteration);
  std::filesystem::remove(a);
  std::filesystem::remove(b);
}

// At --lr 1000 the 6th update leaves a running variance infinite while every loss, taken
// before its update, is finite: the run is a failure and nothing of its weights is saved (they
// were, and a run resumed from them refused them; session 45's hostile run). Five are saved.
TEST(cli_weights, weights_the_last_update_left_unsound_are_not_saved) {
  const std::string a = temp("diverged.ckpt");
  auto args = [&](const char* iterations) {
    return net_args({"--iterations", iterations, "--policy", "liveness", "--lr", "1000",
                     "--momentum", "0.99", "--save", a});
  };
  const std::string m = error_of(train_command, args("6"));
  EXPECT_NE(m.find("after the update of iteration 6, tensor 'bn2a_branch2a.running_var' holds "
                   "inf at index 0"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("training diverged; lower --lr (now 1000); --save " + a + " not written"),
            std::string::npos)
      << m;
  EXPECT_FALSE(std::filesystem::exists(a));
  EXPECT_EQ(run(train_command, args("5")).code, 0);
  EXPECT_EQ(read_checkpoint(a).state.iteration, 5);
  std::filesystem::remove(a);
}

// A checkpoint's base rate is the solver's range, from 0 (--lr's starts above it): resumed
// from a rate of 0 the run trains nothing, and says so (it said nothing); --lr replaces it.
TEST(cli_weights, a_checkpoints_learning_rate_of_0_is_shown_and_warned_about) {
  const std::string a = temp("lr0.ckpt");
  ASSERT_EQ(
      run(train_command, net_args({"--iterations", "1", "--policy", "liveness", "--save", a})).code,
      0);
  // The learning rate (offset 32, f32) set to 0, the checksum made again.
  std::string bytes = slurp(a);
  const float zero = 0.0f;
  std::memcpy(bytes.data() + 32, &zero, sizeof zero);
  const std::uint64_t sum = transfer_checksum(bytes.data(), bytes.size() - 8);
  std::memcpy(bytes.data() + bytes.size() - 8, &sum, sizeof sum);
  std::ofstream(a, std::ios::binary | std::ios::trunc) << bytes;
  ::testing::internal::CaptureStderr();
  const auto r =
      run(train_command, net_args({"--iterations", "1", "--policy", "liveness", "--init-from", a}));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("resuming at iteration 1, base learning rate 0 (the checkpoint's"),
            std::string::npos)
      << r.out;
  EXPECT_NE(err.find("the checkpoint's base learning rate is 0, so training changes no weight; "
                     "give --lr to train"),
            std::string::npos)
      << err;
  ::testing::internal::CaptureStderr();
  const auto given = run(train_command, net_args({"--iterations", "1", "--policy", "liveness",
                                                  "--init-from", a, "--lr", "0.01"}));
  const std::string quiet = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(given.code, 0);
  EXPECT_EQ(given.out.find("base learning rate"), std::string::npos) << given.out;
  EXPECT_EQ(quiet.find("learning rate is 0"), std::string::npos) << quiet;
  std::filesystem::remove(a);
}

TEST(cli_weights, bad_values_are_errors_naming_the_flag) {
  auto expect_has = [](const std::string& message, const std::string& part) {
    EXPECT_NE(message.find(part), std::string::npos) << message;
  };
  expect_has(error_of(train_command, net_args({"--momentum", "1"})), "--momentum");
  expect_has(error_of(train_command, net_args({"--momentum", "x"})), "--momentum");
  expect_has(error_of(train_command, net_args({"--weight-decay", "-0.1"})), "--weight-decay");
  expect_has(error_of(train_command, net_args({"--lr-schedule", "cosine:0"})), "--lr-schedule");
  expect_has(error_of(train_command, net_args({"--lr-schedule", "exp:3"})), "step:EVERY:GAMMA");
  expect_has(error_of(train_command, net_args({"--warmup", "-1"})), "--warmup");
  expect_has(error_of(train_command, net_args({"--save", "x", "--policy", "liveness,utp"})),
             "give one --policy");
  expect_has(error_of(train_command, net_args({"--save", "/nonexistent_memweave_dir/x"})),
             "--save");
  // A checkpoint of another network is refused once, before anything runs, naming --net as
  // given: each policy refused it in its row, after "resuming at iteration 1" was printed.
  const std::string other = temp("other.ckpt");
  ASSERT_EQ(
      run(train_command, net_args({"--iterations", "1", "--policy", "liveness", "--save", other}))
          .code,
      0);
  auto deeper = [&](std::vector<std::string> extra) {
    auto a = net_args(extra);
    a[1] = "resnet:1,1,2,1";
    return a;
  };
  for (auto command : {train_command, eval_command}) {
    expect_has(error_of(command, deeper({"--policy", "liveness,all", "--init-from", other})),
               "--init-from: checkpoint '" + other +
                   "' does not match network 'resnet17' (--net resnet:1,1,2,1) (");
  }
  // A policy that does not fit says its --save was not written (its row said only why it
  // did not fit).
  const std::string unfit = temp("unfit.ckpt");
  const auto small = run(train_command, net_args({"--iterations", "1", "--policy", "liveness",
                                                  "--budget", "256K", "--save", unfit}));
  EXPECT_EQ(small.code, 1) << small.out;
  expect_has(small.out, "; --save " + unfit + " not written");
  EXPECT_FALSE(std::filesystem::exists(unfit));
  const std::string junk = temp("junk.ckpt");
  std::ofstream(junk) << "not weights";
  expect_has(error_of(train_command, net_args({"--init-from", junk})),
             "--init-from: '" + junk + "' is not a memweave checkpoint");
  expect_has(error_of(eval_command, net_args({"--init-from", temp("absent.ckpt")})),
             "--init-from: cannot read checkpoint");
  // A file that opens and fails to read (a bad disk, a mount gone away; here the process's
  // memory at address 0): the error names the file and the option, not a stream's buffer.
  expect_has(error_of(train_command, net_args({"--init-from", "/proc/self/mem"})),
             "--init-from: cannot read checkpoint '/proc/self/mem': Input/output error");
  expect_has(error_of(train_command, net_args({"--data", "cifar10:/proc/self/mem"})),
             "cannot read CIFAR-10 file '/proc/self/mem': Input/output error; check the path "
             "given to --data");
  expect_has(error_of(eval_command, net_args({"--batches", "0"})), "--batches");
  std::filesystem::remove(junk);
}

}  // namespace
}  // namespace memweave
