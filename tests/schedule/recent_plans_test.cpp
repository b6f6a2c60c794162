// The process's recent plans (schedule/recent_plans.hpp): plan_memory_schedule gives a plan
// again only for the same problem and options, compared whole, and threads planning at once
// each get the plan planning alone gives.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "memweave/schedule/memory_schedule.hpp"
#include "schedule/recent_plans.hpp"

namespace memweave {
namespace {

constexpr std::size_t k_mib = std::size_t{1} << 20;

// Ten 1 ms steps; A (100 MiB) used at the first and last, B (100 MiB) at every step, C (50
// MiB) at the third and fourth: under 220 MiB, A must be away there, and its copies (6.6 ms
// each way at 16 GB/s) stall the iteration, so the link, the latency and the steps' times
// all show in the predicted time.
schedule_problem tight() {
  schedule_problem p;
  p.step_seconds.assign(10, 1e-3);
  auto tensor = [](std::size_t bytes, std::vector<std::uint32_t> steps) {
    schedule_tensor t;
    t.bytes = bytes;
    for (std::uint32_t s : steps) t.uses.push_back({s, t.uses.empty()});
    return t;
  };
  p.tensors.push_back(tensor(100 * k_mib, {0, 9}));
  p.tensors.push_back(tensor(100 * k_mib, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  p.tensors.push_back(tensor(50 * k_mib, {2, 3}));
  p.budget_bytes = 220 * k_mib;
  return p;  // the default link: 16 GB/s
}

// The whole budget planned (no headroom), else the defaults.
const schedule_options no_headroom = [] {
  schedule_options o;
  o.headroom = 0;
  return o;
}();

// What a plan says, compared whole.
void expect_same(const memory_schedule& a, const memory_schedule& b, const std::string& what) {
  EXPECT_EQ(a.gaps, b.gaps) << what;
  EXPECT_EQ(a.steps, b.steps) << what;
  EXPECT_EQ(a.bytes_per_step, b.bytes_per_step) << what;
  EXPECT_EQ(a.predicted_seconds, b.predicted_seconds) << what;
  EXPECT_EQ(a.predicted_peak_bytes, b.predicted_peak_bytes) << what;
  EXPECT_EQ(a.fits, b.fits) << what;
}

bool same(const memory_schedule& a, const memory_schedule& b) {
  return a.gaps == b.gaps && a.steps == b.steps && a.bytes_per_step == b.bytes_per_step &&
         a.predicted_seconds == b.predicted_seconds &&
         a.predicted_peak_bytes == b.predicted_peak_bytes && a.fits == b.fits;
}

// Each change below gives a different plan. Planned after the unchanged problem, a plan
// given again on a key that missed the changed field would be the unchanged problem's: it
// must differ from it, and be given again, unchanged, for its own problem.
TEST(recent_plans_test, a_plan_is_given_again_only_for_the_same_problem_and_options) {
  const schedule_problem base = tight();
  const schedule_options options = no_headroom;
  const memory_schedule planned = plan_memory_schedule(base, options);
  ASSERT_FALSE(planned.gaps.empty()) << "the problem must need a schedule";
  struct change {
    std::string what;
    std::function<void(schedule_problem&, schedule_options&)> apply;
  };
  const std::vector<change> changes = {
      {"budget", [](schedule_problem& p, schedule_options&) { p.budget_bytes = 300 * k_mib; }},
      {"a tensor's bytes",
       [](schedule_problem& p, schedule_options&) { p.tensors[2].bytes = 10 * k_mib; }},
      {"a step's time", [](schedule_problem& p, schedule_options&) { p.step_seconds[9] = 2e-3; }},
      {"the link", [](schedule_problem& p, schedule_options&) { p.link_bytes_per_s = 8e9; }},
      {"the copy latency", [](schedule_problem& p, schedule_options&) { p.copy_latency_s = 1e-3; }},
      {"a use's step",
       [](schedule_problem& p, schedule_options&) { p.tensors[0].uses[1].step = 8; }},
      {"a rebuildable tensor",
       [](schedule_problem& p, schedule_options&) {
         p.tensors[0].rebuildable = true;
         p.tensors[0].rebuild_seconds = 1e-4;
       }},
      {"the headroom", [](schedule_problem&, schedule_options& o) { o.headroom = 0.2; }},
      {"swaps allowed", [](schedule_problem&, schedule_options& o) { o.allow_swap = false; }},
  };
  std::vector<memory_schedule> first;
  for (const change& c : changes) {
    schedule_problem p = base;
    schedule_options o = options;
    c.apply(p, o);
    first.push_back(plan_memory_schedule(p, o));
    EXPECT_FALSE(same(first.back(), planned)) << c.what << " changed nothing it plans";
  }
  expect_same(plan_memory_schedule(base, options), planned, "the unchanged problem again");
  for (std::size_t i = 0; i < changes.size(); ++i) {
    schedule_problem p = base;
    schedule_options o = options;
    changes[i].apply(p, o);
    expect_same(plan_memory_schedule(p, o), first[i], changes[i].what + " again");
  }
}

// More problems than the process keeps (64 plans), planned by four threads at once, each in
// its own order: every thread gets, for every problem, the plan planned before the threads
// started (given again, or planned again once it has left).
TEST(recent_plans_test, threads_planning_at_once_get_the_plans_planning_alone_gives) {
  constexpr std::size_t k_problems = 80;
  auto problem = [](std::size_t i) {
    schedule_problem p = tight();
    p.budget_bytes = (200 + i) * k_mib;
    return p;
  };
  std::vector<memory_schedule> alone;
  for (std::size_t i = 0; i < k_problems; ++i) {
    alone.push_back(plan_memory_schedule(problem(i), no_headroom));
  }
  constexpr std::size_t k_threads = 4;
  std::vector<std::vector<memory_schedule>> got(k_threads,
                                                std::vector<memory_schedule>(k_problems));
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < k_threads; ++t) {
    threads.emplace_back([&, t] {
      for (std::size_t n = 0; n < k_problems; ++n) {
        constexpr std::size_t strides[k_threads] = {1, 3, 7, 9};  // each coprime with 80
        const std::size_t i = (n * strides[t] + 13 * t) % k_problems;
        got[t][i] = plan_memory_schedule(problem(i), no_headroom);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (std::size_t t = 0; t < k_threads; ++t) {
    for (std::size_t i = 0; i < k_problems; ++i) {
      expect_same(got[t][i], alone[i],
                  "thread " + std::to_string(t) + ", problem " + std::to_string(i));
    }
  }
}

// The least recently used entry leaves first, past the count or the bytes kept; an entry
// larger than all the bytes is not kept at all.
TEST(recent_plans_test, the_least_recently_used_leaves_first_past_the_count_or_the_bytes) {
  auto problem = [](std::size_t budget_mib, std::size_t steps) {
    schedule_problem p = tight();
    p.budget_bytes = budget_mib * k_mib;
    p.step_seconds.assign(steps, 1e-3);
    return p;
  };
  auto bound = [](double seconds) {
    schedule_bound b;
    b.seconds = seconds;
    return b;
  };
  recent_plans<int, schedule_bound> by_count(2, std::size_t{1} << 30);
  by_count.insert(problem(1, 10), 0, bound(1));
  by_count.insert(problem(2, 10), 0, bound(2));
  ASSERT_TRUE(by_count.find(problem(1, 10), 0));  // 1 is now the most recently used
  EXPECT_FALSE(by_count.find(problem(1, 10), 1)) << "other options, another entry";
  by_count.insert(problem(3, 10), 0, bound(3));
  EXPECT_FALSE(by_count.find(problem(2, 10), 0)) << "the least recently used stayed";
  ASSERT_TRUE(by_count.find(problem(1, 10), 0));
  EXPECT_EQ(by_count.find(problem(1, 10), 0)->seconds, 1);
  EXPECT_EQ(by_count.find(problem(3, 10), 0)->seconds, 3);

  // Room for two small entries (10 steps), not for one of 100k steps.
  const std::size_t small = recent_plans_detail::bytes_of(problem(1, 10)) + sizeof(schedule_bound);
  recent_plans<int, schedule_bound> by_bytes(64, 2 * small + small / 2);
  by_bytes.insert(problem(9, 100000), 0, bound(9));
  EXPECT_FALSE(by_bytes.find(problem(9, 100000), 0)) << "kept an entry over all the bytes";
  by_bytes.insert(problem(1, 10), 0, bound(1));
  by_bytes.insert(problem(2, 10), 0, bound(2));
  EXPECT_TRUE(by_bytes.find(problem(1, 10), 0));
  by_bytes.insert(problem(3, 10), 0, bound(3));
  EXPECT_FALSE(by_bytes.find(problem(2, 10), 0)) << "three entries in the bytes of two";
  EXPECT_TRUE(by_bytes.find(problem(1, 10), 0));
  EXPECT_TRUE(by_bytes.find(problem(3, 10), 0));
}

}  // namespace
}  // namespace memweave
