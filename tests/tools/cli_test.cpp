// The subcommands run in-process with argv arrays; their printed output and files are
// checked. Bad input must throw memweave::error with a message that says what to do.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <tuple>

#include "cli_harness.hpp"
#include "support/static_tls_reexec.hpp"

// The offload/utp/all policies use the pinned host pool (jemalloc). This binary used to
// get by without the re-exec only because the CUDA libraries it linked left spare static TLS.
MEMWEAVE_REEXEC_WITH_STATIC_TLS();

namespace memweave {
namespace {

using namespace test;

TEST(cli_test, train_prints_progress_and_a_summary_per_policy) {
  const auto r = run(train_command, with({"--iterations", "2", "--policy", "baseline,liveness",
                                          "--device", "host", "--threads", "2"}));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("liveness  iter    2/2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("img/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("baseline    yes"), std::string::npos) << r.out;
}

TEST(cli_test, plan_and_train_write_identical_per_step_bytes) {
  const std::string plan_csv = temp("plan.csv"), train_csv = temp("train.csv");
  // One fixed algorithm: with dynamic selection, measured (train) and modelled (plan) times
  // may choose differently.
  run(plan_command,
      with({"--policy", "liveness", "--csv", plan_csv, "--conv-ws", "fixed:im2col_image"}));
  run(train_command, with({"--policy", "liveness", "--iterations", "1", "--device", "host", "--csv",
                           train_csv, "--threads", "2", "--conv-ws", "fixed:im2col_image"}));
  const std::string a = slurp(plan_csv), b = slurp(train_csv);
  EXPECT_GT(a.size(), 1000u);
  EXPECT_TRUE(a == b) << "plan and train CSVs differ (" << a.size() << " vs " << b.size()
                      << " bytes)";
  std::filesystem::remove(plan_csv);
  std::filesystem::remove(train_csv);
}

TEST(cli_test, plan_writes_json_with_stable_names_and_an_svg) {
  const std::string json = temp("plan.json"), svg = temp("plan.svg");
  const auto r = run(plan_command, with({"--policy", "baseline,liveness", "--json", json, "--svg",
                                         svg, "--budget", "1GiB"}));
  EXPECT_EQ(r.code, 0);
  const std::string j = slurp(json);
  for (const char* key :
       {"\"peak_bytes\"", "\"max_layer_bytes\"", "\"tensors_allocated\"", "\"bytes_offloaded\"",
        "\"bytes_prefetched\"", "\"recomputations\"", "\"images_per_s\"", "\"steps\"",
        "\"bytes_live\"", "\"tensors_live\"", "\"layer\"", "\"pass\"", "\"policy\": \"liveness\"",
        "\"cost_model\": {\"flops\": 12000000000000, \"memory_bytes_per_s\": "
        "500000000000, \"link_bytes_per_s\": 16000000000}"}) {
    EXPECT_NE(j.find(key), std::string::npos) << key;
  }
  const std::string s = slurp(svg);
  EXPECT_NE(s.find("<svg"), std::string::npos);
  EXPECT_NE(s.find("<polyline"), std::string::npos);
  EXPECT_NE(s.find("backward"), std::string::npos);
  std::filesystem::remove(json);
  std::filesystem::remove(svg);
}

TEST(cli_test, trace_timeline_writes_each_policys_streams_as_a_perfetto_trace) {
  const std::string base = temp("timeline.json");
  const std::string liveness = temp("timeline.liveness.json"), all = temp("timeline.all.json");
  // A file an earlier run left at liveness's path is neither rewritten nor announced.
  std::ofstream(liveness) << "stale";
  // Below what liveness can run in: `all` moves tensors (and parameters) to host memory.
  const auto r =
      run(train_command, with({"--iterations", "2", "--policy", "liveness,all", "--device", "host",
                               "--threads", "2", "--budget", "1MiB", "--trace-timeline", base}));
  EXPECT_NE(r.out.find("wrote " + all), std::string::npos) << r.out;
  EXPECT_EQ(slurp(liveness), "stale") << "liveness cannot run there: no timeline";
  EXPECT_EQ(r.out.find("wrote " + liveness), std::string::npos) << r.out;
  const std::string t = slurp(all);
  EXPECT_EQ(t.rfind("{\"displayTimeUnit\"", 0), 0u) << t.substr(0, 200);
  for (const char* key :
       {"\"traceEvents\"", "\"name\": \"compute\"", "\"cat\": \"kernel\"", "\"cat\": \"offload\"",
        "\"cat\": \"prefetch\"", "\"overlap_with_compute\""}) {
    EXPECT_NE(t.find(key), std::string::npos) << key;
  }
  std::filesystem::remove(liveness);
  std::filesystem::remove(all);
}

// all's first iterations re-plan the schedule and try it against the model's, re-placing the
// parameters at each switch: the summary's img/s is timed after them where the run goes on
// past them, and says over which iterations, in its text and in --json.
TEST(cli_test, train_times_its_speed_after_alls_replanning_trial) {
  const std::string json = temp("timed.json");
  const auto timed = [&](int iterations) {
    const auto r = run(train_command, with({"--iterations", std::to_string(iterations), "--policy",
                                            "all", "--device", "host", "--threads", "2", "--budget",
                                            "1MiB", "--json", json}));
    EXPECT_EQ(r.code, 0) << r.out;
    const std::string j = slurp(json);
    const auto at = j.find("\"timed_iterations\": [");
    EXPECT_NE(at, std::string::npos) << j;
    // Tried only where the re-planned schedule ran on the null device, which the measured
    // times decide: the model's may stay without a trial. The trial over, both are timed.
    const bool tried = j.find("\"model_iteration_seconds\": 0,") == std::string::npos;
    return std::make_tuple(r.out, j.substr(at + 21, j.find(']', at) - at - 21), tried);
  };
  const auto [out, range, tried] = timed(7);
  if (tried) {
    EXPECT_EQ(range, "6, 7");
    EXPECT_NE(out.find("all: img/s timed over iterations 6-7, after the re-planning and its trial"),
              std::string::npos)
        << out;
  } else {
    EXPECT_EQ(range, "2, 7");
    EXPECT_EQ(out.find("img/s timed over"), std::string::npos) << out;
  }
  // A run that ends within the trial times what it has, and says so.
  const auto [short_out, short_range, unused] = timed(3);
  EXPECT_EQ(short_range, "2, 3");
  const bool in_trial =
      short_out.find("all in the trial of the re-planned schedule") != std::string::npos;
  EXPECT_EQ(in_trial, short_out.find("gaps changed") != std::string::npos) << short_out;
  (void)unused;
  std::filesystem::remove(json);
}

// eval --json: each policy's loss at full precision (the same bits under every policy and
// budget), accuracy and images, and what memory did; a policy that does not fit is a row too.
TEST(cli_test, eval_writes_json_with_each_policys_loss_and_memory) {
  const std::string json = temp("eval.json");
  const auto r =
      run(eval_command, with({"--device", "host", "--threads", "2", "--batches", "2",
                              "--first-batch", "3", "--policy", "baseline,utp,all", "--budget",
                              "400000", "--conv-ws", "fixed:direct", "--json", json}));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("wrote " + json), std::string::npos) << r.out;
  const std::string j = slurp(json);
  for (const char* key : {"\"command\": \"eval\"", "\"first_batch\": 3", "\"iterations\": 2",
                          "\"budget_bytes\": 400000", "\"peak_bytes\"", "\"steps\""}) {
    EXPECT_NE(j.find(key), std::string::npos) << key << "\n" << j.substr(0, 400);
  }
  // baseline does not fit the budget; utp and all evaluate the same 4 images to the same bits
  // (one CONV algorithm: the dynamic choice follows the memory free, and algorithms round
  // differently).
  const std::regex row(
      "\"evaluation\": \\{\"loss\": ([^,]+), \"accuracy\": [^,]+, "
      "\"correct\": [0-9]+, \"images\": ([0-9]+)\\}");
  std::vector<std::pair<std::string, std::string>> rows;
  for (auto it = std::sregex_iterator(j.begin(), j.end(), row); it != std::sregex_iterator();
       ++it) {
    rows.emplace_back((*it)[1], (*it)[2]);
  }
  ASSERT_EQ(rows.size(), 2u) << j;
  EXPECT_EQ(rows[0].second, "4");
  EXPECT_EQ(rows[0], rows[1]);
  EXPECT_NE(rows[0].first, "0");
  // baseline's row says it did not fit, with no numbers that read as a loss of 0.
  EXPECT_NE(j.find("\"fits\": false"), std::string::npos);
  EXPECT_NE(j.find("\"evaluation\": null"), std::string::npos);
  std::filesystem::remove(json);
}

// eval's policies each trace their heap to their own file, as train's (one file, the last
// policy's, was left).
TEST(cli_test, eval_traces_each_policys_heap_to_its_own_file) {
  const std::string trace = temp("eval_heap.trace");
  const scoped_env env("MEMWEAVE_TRACE", trace.c_str());
  const auto r = run(eval_command, with({"--device", "host", "--threads", "2", "--batches", "1",
                                         "--policy", "liveness,utp"}));
  EXPECT_EQ(r.code, 0) << r.out;
  for (const std::string policy : {"liveness", "utp"}) {
    EXPECT_NE(slurp(trace + "." + policy).find("memweave-trace"), std::string::npos) << policy;
    std::filesystem::remove(trace + "." + policy);
  }
  EXPECT_FALSE(std::filesystem::exists(trace));
}

TEST(cli_test, the_cost_model_is_chosen_by_name_and_a_bad_name_is_refused) {
  const auto titan = run(plan_command, with({"--policy", "liveness"}));
  const auto h100 = run(plan_command, with({"--policy", "liveness", "--cost-model", "h100_pcie5"}));
  EXPECT_NE(titan.out.find("link 16 GB/s"), std::string::npos) << titan.out;
  EXPECT_NE(h100.out.find("link 64 GB/s"), std::string::npos) << h100.out;
  // The summary says which figures planned: auto, the default, is titan_xp on a device that
  // stands for no GPU of its own.
  EXPECT_NE(titan.out.find("cost model: 12.0 TFLOP/s fp32, 500 GB/s device memory, link 16.0 GB/s"),
            std::string::npos)
      << titan.out;
  EXPECT_NE(h100.out.find("cost model: 51.0 TFLOP/s fp32, 2000 GB/s device memory, link 64.0 GB/s"),
            std::string::npos)
      << h100.out;
  const auto named_auto = run(plan_command, with({"--policy", "liveness", "--cost-model", "auto"}));
  EXPECT_NE(named_auto.out.find("cost model: 12.0 TFLOP/s"), std::string::npos) << named_auto.out;
  EXPECT_NE(error_of(plan_command, with({"--cost-model", "v100"}))
                .find("--cost-model 'v100' is not a known device model: expected auto or titan_xp, "
                      "k40, h100_pcie5"),
            std::string::npos);
  const scoped_env env("MEMWEAVE_COST_MODEL", "v100");
  EXPECT_NE(error_of(plan_command, with({})).find("MEMWEAVE_COST_MODEL"), std::string::npos);
}

TEST(cli_test, plan_reports_a_policy_that_does_not_fit) {
  // Find liveness's peak, then give a budget between it and the baseline's.
  const std::string json = temp("fit.json");
  run(plan_command, with({"--policy", "liveness", "--json", json}));
  const std::string j = slurp(json);
  const auto at = j.find("\"peak_bytes\": ") + 14;
  const std::size_t peak = std::stoull(j.substr(at));
  const auto r =
      run(plan_command,
          with({"--policy", "baseline,liveness", "--budget", std::to_string(peak + (1 << 20))}));
  EXPECT_NE(r.out.find("baseline    NO"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("liveness    yes"), std::string::npos) << r.out;
  std::filesystem::remove(json);
}

TEST(cli_test, bad_input_is_a_clear_error) {
  EXPECT_NE(error_of(plan_command, {"--net", "lenet"})
                .find("unknown zoo network 'lenet'; known: alexnet"),
            std::string::npos);
  EXPECT_NE(error_of(plan_command, with({"--policy", "magic"}))
                .find("expected baseline, liveness, offload, utp, recompute or all"),
            std::string::npos);
  EXPECT_NE(error_of(plan_command, {"--net", "alexnet", "--batch", "0"})
                .find("--batch '0' is out of range: expected a whole number from 1 to"),
            std::string::npos);
  EXPECT_NE(error_of(train_command, with({"--budget", "64GiB", "--device", "host"}))
                .find("exceeds the device's free memory"),
            std::string::npos);
  EXPECT_NE(error_of(plan_command, with({"--bugdet", "1G"})).find("unknown option(s) --bugdet"),
            std::string::npos);
  EXPECT_NE(error_of(plan_command, with({"--budget", "lots"})).find("--budget"), std::string::npos);
  EXPECT_NE(error_of(plan_command, {}).find("--net is required"), std::string::npos);
}

TEST(cli_test, replay_of_a_synthetic_trace_compares_fit_policies) {
  const std::string trace = temp("replay.trace");
  const auto r = run(replay_command, {"--synthetic-layers", "20", "--trace", trace});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("best"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("first"), std::string::npos) << r.out;
  EXPECT_NE(error_of(replay_command, {"--trace", temp("missing.trace")}).find("missing.trace"),
            std::string::npos);
  std::filesystem::remove(trace);
}

TEST(cli_test, config_lists_every_variable) {
  const auto r = run(config_command, {});
  EXPECT_NE(r.out.find("MEMWEAVE_POOL_FRACTION = 0.9  [default]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("takes 0 or a whole number from 1 to 4096"), std::string::npos) << r.out;
  const auto md = run(config_command, {"--markdown"});
  EXPECT_NE(md.out.find("| `MEMWEAVE_DEVICE` | `auto` |"), std::string::npos) << md.out;
}

// config checks every value as the commands that read it do, the engine's forms too (it listed
// MEMWEAVE_POLICY=bogus and MEMWEAVE_CONV_WS=zzz as if they were good).
TEST(cli_test, config_refuses_a_bad_policy_or_convolution_mode_naming_the_variable) {
  {
    const scoped_env env("MEMWEAVE_POLICY", "utp,bogus");
    const std::string e = error_of(config_command, {});
    EXPECT_NE(e.find("MEMWEAVE_POLICY"), std::string::npos) << e;
    EXPECT_NE(e.find("bogus"), std::string::npos) << e;
  }
  {
    const scoped_env env("MEMWEAVE_CONV_WS", "zzz");
    const std::string e = error_of(config_command, {});
    EXPECT_NE(e.find("MEMWEAVE_CONV_WS"), std::string::npos) << e;
    EXPECT_NE(e.find("zzz"), std::string::npos) << e;
  }
  const scoped_env policies("MEMWEAVE_POLICY", "utp,all");
  const scoped_env mode("MEMWEAVE_CONV_WS", "fixed:direct");
  const auto r = run(config_command, {});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("MEMWEAVE_POLICY = utp,all\n"), std::string::npos) << r.out;
}

// A refused value does not hide the others: every row is listed, each refused one with why,
// then config fails naming the first (one bad variable made it list nothing; session 43).
TEST(cli_test, config_lists_every_variable_before_it_refuses_a_bad_one) {
  const scoped_env threads("MEMWEAVE_THREADS", "x");
  const scoped_env policy("MEMWEAVE_POLICY", "bogus");
  const char* argv[] = {"memweave", "config"};
  std::ostringstream out;
  std::string e;
  try {
    (void)config_command(2, argv, out);
  } catch (const error& refused) {
    e = refused.what();
  }
  EXPECT_NE(e.find("MEMWEAVE_THREADS='x'"), std::string::npos) << e;
  EXPECT_NE(e.find("(and 1 more, above)"), std::string::npos) << e;
  const std::string listed = out.str();
  EXPECT_NE(listed.find("MEMWEAVE_POOL_FRACTION = 0.9  [default]"), std::string::npos) << listed;
  EXPECT_NE(listed.find("REFUSED: MEMWEAVE_THREADS='x' is not 0 or a whole number"),
            std::string::npos)
      << listed;
  EXPECT_NE(listed.find("REFUSED: MEMWEAVE_POLICY: unknown memory policy 'bogus'"),
            std::string::npos)
      << listed;
}

}  // namespace
}  // namespace memweave
