// plan --min-budget: the smallest budget each policy trains the network in, checked against
// plans at the budget it names and one heap block below, with and without --split; and the
// options it cannot go with.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <string>

#include "cli_harness.hpp"

namespace memweave {
namespace {

using namespace test;

void expect_has(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "missing: " << part << "\nin: " << text;
}

std::vector<std::string> small_resnet(std::vector<std::string> extra) {
  std::vector<std::string> a = {"--net",        "resnet50", "--batch",   "4",
                                "--width",      "0.25",     "--classes", "10",
                                "--image-side", "32",       "--conv-ws", "fixed:direct"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// The budget the search named for `policy` ("  all: 1.71 MiB (1787904 bytes; ..."), or 0.
std::size_t found(const std::string& out, const std::string& policy) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("  " + policy + ": [^\n(]*\\(([0-9]+) bytes; "))) {
    return 0;
  }
  return std::stoull(m[1]);
}

// Whether `policy` fits `bytes` in a plan with `extra` (its row in the plan's table).
bool fits(const std::string& policy, std::size_t bytes, std::vector<std::string> extra = {}) {
  extra.insert(extra.end(), {"--policy", policy, "--budget", std::to_string(bytes)});
  const auto r = run(plan_command, small_resnet(extra));
  return r.out.find("\n" + policy + std::string(12 - policy.size(), ' ') + "yes") !=
         std::string::npos;
}

TEST(budget_search_cli_test, the_budget_found_runs_and_one_block_less_does_not) {
  const auto r = run(plan_command, small_resnet({"--policy", "liveness,all", "--min-budget"}));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("the smallest budget each policy trains batch 4 in, to one heap block"),
            std::string::npos)
      << r.out;
  for (const std::string policy : {"liveness", "all"}) {
    const std::size_t b = found(r.out, policy);
    ASSERT_GT(b, 0u) << policy << "\n" << r.out;
    EXPECT_EQ(b % 1024, 0u);
    EXPECT_TRUE(fits(policy, b)) << policy << " at " << b;
    EXPECT_FALSE(fits(policy, b - 1024)) << policy << " at " << b - 1024;
  }
  // Liveness holds every live tensor, all moves them: it needs far less.
  EXPECT_LT(2 * found(r.out, "all"), found(r.out, "liveness"));
}

// The floor a budget below the least is refused with is a lower bound, and says so: the run
// at it may need more, which the search finds.
TEST(budget_search_cli_test, the_floor_names_the_search) {
  const std::string json = temp("floor.json");
  const auto r = run(
      plan_command, small_resnet({"--policy", "liveness,all", "--budget", "1MiB", "--json", json}));
  // The refused rows still give the network's max(l_i) and persistent bytes (they said 0 B).
  const std::string j = slurp(json);
  std::filesystem::remove(json);
  std::smatch m;
  std::string::const_iterator from = j.begin();
  std::vector<std::string> figures;
  while (std::regex_search(from, j.end(), m,
                           std::regex("\"max_layer_bytes\": ([0-9]+),\\s*\"persistent_bytes\": "
                                      "([0-9]+)"))) {
    figures.push_back(m[1].str() + "/" + m[2].str());
    from = m.suffix().first;
  }
  ASSERT_EQ(figures.size(), 2u) << j;
  EXPECT_EQ(figures[0], figures[1]) << j;
  EXPECT_NE(figures[0].substr(0, 2), "0/") << j;
  EXPECT_NE(r.out.find("That is a lower bound: `memweave plan` with the same options and "
                       "--min-budget instead of --budget finds the smallest budget that runs"),
            std::string::npos)
      << r.out;
}

// With --split, each budget tried runs its own split plan: the budget found is below
// max(l_i), runs, and one block less does not.
TEST(budget_search_cli_test, with_split_the_budget_found_is_below_the_largest_step) {
  const auto r = run(plan_command, small_resnet({"--policy", "all", "--split", "--min-budget"}));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("trains batch 4 in (--split)"), std::string::npos) << r.out;
  const std::size_t b = found(r.out, "all");
  ASSERT_GT(b, 0u) << r.out;
  EXPECT_TRUE(fits("all", b, {"--split"}));
  EXPECT_FALSE(fits("all", b - 1024, {"--split"}));
  EXPECT_LT(b,
            found(run(plan_command, small_resnet({"--policy", "all", "--min-budget"})).out, "all"));
}

TEST(budget_search_cli_test, what_it_cannot_go_with_is_refused_by_name) {
  expect_has(error_of(plan_command, small_resnet({"--min-budget", "--budget", "4MiB"})),
             "--min-budget searches the budget: give it without --budget (--budget '4MiB')");
  expect_has(error_of(plan_command, small_resnet({"--min-budget", "--json", temp("m.json")})),
             "--min-budget prints its answer and writes no --json");
  expect_has(error_of(plan_command, small_resnet({"--min-budget", "--ranks", "2"})),
             "give it without --max-image-side, --max-batch, --max-depth or --ranks");
  // Two searches: the conflict first, not the other search's own check (--batch).
  expect_has(error_of(plan_command, small_resnet({"--min-budget", "--max-batch"})),
             "give it without --max-image-side, --max-batch, --max-depth or --ranks");
  expect_has(error_of(plan_command, small_resnet({"--min-budget", "--net-gbps", "10"})),
             "--net-gbps is the network between the devices of --ranks, which --min-budget");
  {
    const scoped_env tiny("MEMWEAVE_DEVICE_BYTES", "1000");
    expect_has(error_of(plan_command, small_resnet({"--min-budget"})),
               "is smaller than one heap block (1.00 KiB): no budget runs on that device");
    // Without a search the heap says it, naming the device's size, not only the pool's (it
    // named MEMWEAVE_POOL_BYTES alone; session 48's hostile run).
    expect_has(error_of(plan_command, small_resnet({})),
               "give MEMWEAVE_POOL_BYTES at least one block, and a device of at least that");
    expect_has(error_of(plan_command, small_resnet({})), "its size is MEMWEAVE_DEVICE_BYTES");
  }
}

}  // namespace
}  // namespace memweave
