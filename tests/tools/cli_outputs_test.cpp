// The files a run writes, tried as a hostile user would (session 27): an output never
// destroys a file the run reads, one that cannot be written is refused before the run, an
// empty path is an error, and an output that fails after training loses neither the report
// nor the other outputs. Each case failed on the code before the fix.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli_harness.hpp"
#include "memweave/engine/data_source.hpp"
#include "tests/core/file_size_limit.hpp"
#include "tools/cli_args.hpp"
#include "tools/network_run.hpp"

namespace memweave {
namespace cli_outputs {

using namespace test;
namespace fs = std::filesystem;

void expect_has(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' missing from: " << text;
}

std::vector<std::string> small_train(std::vector<std::string> extra) {
  std::vector<std::string> a = with(
      {"--device", "host", "--threads", "1", "--iterations", "1", "--conv-ws", "fixed:direct"});
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// A file with `text` in it, removed at the end of the scope.
struct scratch_file {
  std::string path;
  explicit scratch_file(const std::string& name, const std::string& text = "precious\n")
      : path(temp(name)) {
    std::ofstream(path) << text;
  }
  ~scratch_file() {
    std::error_code ec;
    fs::remove(path, ec);
  }
};

TEST(cli_outputs_test, an_output_at_a_file_the_run_reads_is_refused_and_the_file_kept) {
  // A checkpoint, then every output of a run resumed from it pointed at it.
  const std::string ck = temp("resume.ckpt");
  ASSERT_EQ(run(train_command, small_train({"--policy", "liveness", "--save", ck})).code, 0);
  const std::string saved = slurp(ck);
  for (const char* knob : {"--json", "--csv", "--svg", "--trace-timeline", "--save"}) {
    const std::string e =
        error_of(train_command, small_train({"--policy", "liveness", "--init-from", ck, knob, ck}));
    expect_has(e, std::string(knob) + " '" + ck + "' is the file --init-from reads");
    EXPECT_EQ(slurp(ck), saved) << knob << " destroyed the checkpoint";
  }
  // Through another name (a symbolic link) too.
  const std::string link = temp("resume_link.json");
  fs::create_symlink(ck, link);
  expect_has(error_of(train_command, small_train({"--init-from", ck, "--json", link})),
             "is the file --init-from reads");
  EXPECT_EQ(slurp(ck), saved);
  fs::remove(link);
  fs::remove(ck);

  // The conv algorithm cache is read (and written by the run itself).
  const scratch_file cache("cache.txt");
  scoped_env env("MEMWEAVE_CONV_CACHE", cache.path.c_str());
  expect_has(error_of(plan_command, with({"--json", cache.path})),
             "is the file MEMWEAVE_CONV_CACHE reads");
}

// An output given as a symbolic link writes the file it leads to, and the link stays: the file
// renamed over the link replaced it, leaving its target stale (`--save latest.ckpt`; as root,
// `--json /dev/stdout` replaced the system's link; session 45's hostile run).
TEST(cli_outputs_test, an_output_through_a_link_writes_where_it_leads_and_keeps_the_link) {
  for (const char* knob : {"--json", "--save"}) {
    const scratch_file target(std::string("link_target") + knob, "stale\n");
    const std::string link = temp(std::string("link") + knob);
    fs::remove(link);
    fs::create_symlink(target.path, link);
    ASSERT_EQ(run(train_command, small_train({"--policy", "liveness", knob, link})).code, 0)
        << knob;
    EXPECT_TRUE(fs::is_symlink(link)) << knob << " replaced the link";
    const std::string written = slurp(target.path);
    EXPECT_NE(written, "stale\n") << knob << " left the link's target as it was";
    EXPECT_EQ(written.substr(0, 1), std::string(knob) == "--json" ? "{" : "M") << knob;
    fs::remove(link);
  }
}

// An output at the file this process's standard output goes to (`--json out.txt > out.txt`,
// `--json /dev/stdout > out.txt`): the report renamed over it took the path, and what memweave
// printed went to the file unlinked. Refused before the run.
TEST(cli_outputs_test, an_output_at_the_file_standard_output_goes_to_is_refused) {
  const scratch_file out("stdout.txt", "");
  std::fflush(stdout);
  const int saved = ::dup(1);
  const int fd = ::open(out.path.c_str(), O_WRONLY | O_TRUNC);
  ASSERT_GE(fd, 0);
  ::dup2(fd, 1);
  ::close(fd);
  const std::string e =
      error_of(train_command, small_train({"--policy", "liveness", "--json", out.path}));
  std::fflush(stdout);
  ::dup2(saved, 1);
  ::close(saved);
  expect_has(e, "--json '" + out.path + "' is the file this run's standard output goes to");
}

// The convolution timings a host run measured survive a `plan` (which measures nothing and
// wrote its model's times over them) and a run at another thread count (which measured its
// own over them): the next host run found them gone and measured everything again.
TEST(cli_outputs_test, measured_conv_timings_survive_plan_and_another_thread_count) {
  const scratch_file cache("timings.txt", "");
  fs::remove(cache.path);
  scoped_env env("MEMWEAVE_CONV_CACHE", cache.path.c_str());
  const std::vector<std::string> measured =
      with({"--device", "host", "--threads", "1", "--iterations", "1", "--policy", "liveness"});
  ASSERT_EQ(run(train_command, measured).code, 0);
  const std::string timings = slurp(cache.path);
  ASSERT_NE(timings.find("host"), std::string::npos) << timings;
  EXPECT_EQ(run(plan_command, with({"--policy", "liveness"})).code, 0);
  EXPECT_EQ(slurp(cache.path), timings) << "plan replaced the measured timings";
  std::vector<std::string> other = measured;
  other[other.size() - 5] = "2";  // --threads 2
  ASSERT_EQ(other[other.size() - 6], "--threads");
  EXPECT_EQ(run(train_command, other).code, 0);
  EXPECT_EQ(slurp(cache.path), timings) << "a run at another thread count replaced them";
}

// A cache file edited by hand (an im2col algorithm given no workspace and the fastest time, an
// algorithm the host does not have): the run measures those again and trains (it failed with
// an internal error, exit 3, in the kernel given no workspace).
TEST(cli_outputs_test, a_conv_cache_entry_that_cannot_run_is_measured_again) {
  const scratch_file cache("edited.txt", "");
  fs::remove(cache.path);
  scoped_env env("MEMWEAVE_CONV_CACHE", cache.path.c_str());
  const std::vector<std::string> args =
      with({"--device", "host", "--threads", "1", "--iterations", "1", "--policy", "liveness"});
  ASSERT_EQ(run(train_command, args).code, 0);
  const std::string timings = slurp(cache.path);
  for (const char* edit : {"no workspace", "unknown algorithm"}) {
    SCOPED_TRACE(edit);
    std::string edited;
    std::istringstream lines(timings);
    for (std::string line; std::getline(lines, line);) {
      const auto at = line.find("\tim2col_image ");
      if (at != std::string::npos) {
        line = line.substr(0, at) + (std::string(edit) == "no workspace"
                                         ? "\tim2col_image 0 1e-12"
                                         : "\tbogus_algorithm 0 1e-12");
      }
      edited += line + "\n";
    }
    ASSERT_NE(edited, timings);
    std::ofstream(cache.path) << edited;
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(run(train_command, args).code, 0);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("measured again, as is every such entry"), std::string::npos) << err;
    EXPECT_EQ(slurp(cache.path).find("bogus_algorithm"), std::string::npos)
        << "the entries not replaced";
  }
}

TEST(cli_outputs_test, an_output_at_the_data_is_refused) {
  // Four CIFAR-10 records (a label byte, 3072 pixel bytes).
  const std::string data = temp("four.bin");
  {
    std::ofstream out(data, std::ios::binary);
    for (int r = 0; r < 4; ++r) out << static_cast<char>(r) << std::string(3072, '\x40');
  }
  const std::string spec = "cifar10:" + data;
  const std::vector<std::string> cifar = {
      "--net",     "resnet50", "--batch",  "2",    "--image-side", "32", "--width", "0.0625",
      "--classes", "10",       "--device", "host", "--iterations", "1",  "--data",  spec};
  std::vector<std::string> a = cifar;
  a.insert(a.end(), {"--csv", data});
  expect_has(error_of(train_command, a), "is the file --data reads");
  EXPECT_EQ(fs::file_size(data), 4u * 3073u);
  fs::remove(data);
}

TEST(cli_outputs_test, outputs_that_cannot_be_written_are_refused_before_the_run) {
  // /proc lets root pass access() but makes no file: found before training, not after it.
  expect_has(error_of(train_command, small_train({"--save", "/proc/memweave.ckpt"})),
             "--save '/proc/memweave.ckpt' cannot be written");
  expect_has(error_of(train_command, small_train({"--trace-timeline", "/proc/t.json"})),
             "--trace-timeline '/proc/t.json' cannot be written");
  expect_has(error_of(plan_command, with({"--json", "/proc/plan.json"})),
             "--json '/proc/plan.json' cannot be written");
  // The probe leaves nothing behind.
  const std::string json = temp("probe.json");
  ASSERT_EQ(run(plan_command, with({"--policy", "liveness", "--json", json})).code, 0);
  for (const auto& e : fs::directory_iterator(fs::temp_directory_path())) {
    EXPECT_EQ(e.path().filename().string().find("memweave-check"), std::string::npos) << e.path();
  }
  fs::remove(json);
}

TEST(cli_outputs_test, an_empty_output_path_is_an_error_not_no_output) {
  // --init-from too, an input: it said "cannot read checkpoint ''" (session 42's hostile run).
  for (const char* knob :
       {"--json", "--csv", "--svg", "--trace-timeline", "--save", "--init-from"}) {
    expect_has(error_of(train_command, small_train({knob, ""})),
               std::string(knob) + " '' is an empty path");
  }
  expect_has(error_of(replay_command, {"--synthetic-layers", "3", "--trace", ""}),
             "--trace '' is an empty path");
}

// An output that fails after the policies trained (a disk that filled up): the rows keep
// what was measured, the other outputs are written, and the failure is thrown after them.
TEST(cli_outputs_test, a_failed_output_keeps_the_rows_and_the_other_outputs) {
  std::vector<std::string> argv = {"memweave", "train"};
  for (const std::string& s : with({"--policy", "liveness", "--conv-ws", "fixed:direct"})) {
    argv.push_back(s);
  }
  std::vector<const char*> raw;
  for (const std::string& s : argv) raw.push_back(s.c_str());
  cli_args args(static_cast<int>(raw.size()), raw.data(), 2, {});
  network_run_options o = read_network_run_options(args);
  o.save = "/proc/memweave-late.ckpt";  // past the up-front check: it fails only when written
  o.json = "/proc/memweave-late.json";
  const std::string csv = temp("late.csv");
  o.csv = csv;
  const network net = make_run_network(o, true);
  auto data = make_synthetic_source(net[net.data_layer()].output_shape, net.classes(), 1);
  device_options dev;
  dev.kind = "host";
  run_report report;
  std::ostringstream out;
  try {
    run_policies(net, o, dev, 1, data.get(), report, out, nullptr);
    ADD_FAILURE() << "the outputs that failed were not reported";
  } catch (const error& e) {
    expect_has(e.what(), "--save");  // every one that failed, named by its option
    expect_has(e.what(), "--json");
  }
  ASSERT_EQ(report.policies.size(), 1u);
  EXPECT_TRUE(report.policies[0].fits) << report.policies[0].failure;
  EXPECT_FALSE(report.policies[0].failed);
  EXPECT_EQ(report.policies[0].losses.size(), 1u);
  expect_has(out.str(), "liveness    yes");  // the summary row, not ERR
  expect_has(slurp(csv), "liveness");        // written after the JSON failed
  fs::remove(csv);
}

// Outputs that run out of space half-way (a file size limit standing in for a full disk):
// each is named, and each earlier file stays whole. The timeline was written in place
// (session 36's hostile run): a full disk left half a JSON file where the earlier one was.
TEST(cli_outputs_test, outputs_that_fail_half_way_are_all_named_and_leave_earlier_files_whole) {
  const scratch_file timeline("half.timeline.json"), json("half.json");
  std::string e;
  {
    const file_size_limit limit(512);
    try {
      run(train_command, small_train({"--policy", "liveness", "--json", json.path,
                                      "--trace-timeline", timeline.path}));
    } catch (const error& x) {
      e = x.what();
    }
  }
  expect_has(e, "--trace-timeline '" + timeline.path + "'");
  expect_has(e, "--json: report '" + json.path + "'");
  EXPECT_EQ(slurp(timeline.path), "precious\n");
  EXPECT_EQ(slurp(json.path), "precious\n");
}

// A heap trace that cannot be written whole (a device that is always full): the run's rows
// and reports stand, and the lost trace is an error after them (exit 2), not a warning
// with exit 0.
TEST(cli_outputs_test, a_heap_trace_lost_on_the_way_is_an_error_after_the_reports) {
  scoped_env env("MEMWEAVE_TRACE", "/dev/full");
  const std::string json = temp("full.json");
  std::string e;
  try {
    run(train_command, small_train({"--policy", "liveness", "--json", json}));
  } catch (const error& x) {
    e = x.what();
  }
  expect_has(e, "MEMWEAVE_TRACE: heap trace '/dev/full': write failed");
  expect_has(slurp(json), "\"fits\": true");
  fs::remove(json);
}

}  // namespace cli_outputs
}  // namespace memweave
