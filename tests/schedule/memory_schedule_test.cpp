// The memory schedule planner on small hand-made iterations (what it chooses and when) and on
// random ones (the properties every schedule keeps: copies issued in order and before the
// step that needs them, windows inside their gaps, the memory it predicts, its timeline).
#include "memweave/schedule/memory_schedule.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <random>

#include "memweave/core/error.hpp"

namespace memweave {
namespace {

constexpr std::size_t k_mib = std::size_t{1} << 20;

schedule_tensor tensor(std::size_t bytes, std::vector<std::uint32_t> steps) {
  schedule_tensor t;
  t.bytes = bytes;
  for (std::uint32_t s : steps) t.uses.push_back({s, t.uses.empty()});
  return t;
}

// Makes `u` a use in host memory (a TSPLIT staged step): its slices' bytes on the device and
// the seconds their copies add.
void stage(schedule_use& u, std::size_t slice_bytes, double staged_seconds) {
  u.on_host = true;
  u.slice_bytes = slice_bytes;
  u.staged_seconds = staged_seconds;
}

// `steps` steps of `seconds` each; a tensor A of 100 MiB used at the first and last step,
// and a tensor B of 100 MiB used at steps busy_from..busy_to (every step by default), so that
// both are on the device there.
schedule_problem long_gap(std::size_t steps, double seconds, std::uint32_t busy_from = 0,
                          std::uint32_t busy_to = 1000) {
  schedule_problem p;
  p.step_seconds.assign(steps, seconds);
  p.tensors.push_back(tensor(100 * k_mib, {0, static_cast<std::uint32_t>(steps - 1)}));
  std::vector<std::uint32_t> busy;
  for (std::uint32_t s = busy_from; s < steps && s <= busy_to; ++s) busy.push_back(s);
  p.tensors.push_back(tensor(100 * k_mib, busy));
  p.link_bytes_per_s = 16e9;
  return p;
}

schedule_options no_headroom() {
  schedule_options o;
  o.headroom = 0;
  return o;
}

TEST(memory_schedule_test, a_budget_that_holds_everything_schedules_nothing) {
  schedule_problem p = long_gap(10, 1e-3);
  p.budget_bytes = 200 * k_mib;
  const memory_schedule s = plan_memory_schedule(p, no_headroom());
  EXPECT_TRUE(s.gaps.empty());
  EXPECT_TRUE(s.fits);
  EXPECT_EQ(s.predicted_peak_bytes, 200 * k_mib);
  EXPECT_DOUBLE_EQ(s.predicted_seconds, s.baseline_seconds);
}

TEST(memory_schedule_test, a_long_idle_tensor_is_swapped_with_its_copies_hidden_under_compute) {
  // 10 ms steps; a 100 MiB copy takes 6.6 ms at 16 GB/s: both directions hide when B needs
  // the room only over steps 2..7.
  schedule_problem p = long_gap(10, 10e-3, 2, 7);
  p.budget_bytes = 150 * k_mib;
  const memory_schedule s = plan_memory_schedule(p, no_headroom());
  ASSERT_EQ(s.gaps.size(), 1u);
  const scheduled_gap& g = s.gaps[0];
  EXPECT_EQ(g.tensor, 0u);
  EXPECT_EQ(g.action, gap_action::swap);
  EXPECT_EQ(g.after, 0u);
  EXPECT_EQ(g.before, 9u);
  // Released at the first step that starts after the copy out lands (step 1 starts at 10 ms,
  // the copy lands at 16.6 ms); prefetched after the last step that lets the copy in land
  // before step 9 starts (after step 7: 80 + 6.6 ms <= 90 ms).
  EXPECT_EQ(g.release, 2u);
  EXPECT_EQ(g.prefetch, 7u);
  EXPECT_TRUE(s.fits);
  EXPECT_EQ(s.predicted_peak_bytes, 100 * k_mib);
  EXPECT_EQ(s.bytes_per_step[4], 100 * k_mib);
  EXPECT_DOUBLE_EQ(s.predicted_seconds, s.baseline_seconds);
  EXPECT_EQ(s.bytes_swapped, 100 * k_mib);
  EXPECT_EQ(s.steps[0].offload, std::vector<std::uint32_t>{0});
  EXPECT_EQ(s.steps[2].release, std::vector<std::uint32_t>{0});
  EXPECT_EQ(s.steps[7].prefetch, std::vector<std::uint32_t>{0});
}

TEST(memory_schedule_test, a_release_at_the_edge_of_its_copy_moves_on_over_steps_with_room) {
  // A (100 MiB, idle over 1..8) must be away while B is used (steps 4..7). With 6.6 ms steps
  // its copy out (6.55 ms, issued after step 0) lands 0.05 ms before step 2 starts: the
  // release moves on over steps 2 and 3, which take no workspace and hold A within the
  // budget, to step 4, so a device a little faster than the model does not wait at step 2.
  schedule_problem p = long_gap(10, 6.6e-3, 4, 7);
  p.budget_bytes = 150 * k_mib;
  const auto release = [&] {
    const memory_schedule s = plan_memory_schedule(p, no_headroom());
    EXPECT_TRUE(s.fits);
    EXPECT_EQ(s.gaps.size(), 1u);
    return s.gaps.empty() ? 0u : s.gaps[0].release;
  };
  EXPECT_EQ(release(), 4u);
  // A step that may take a workspace stops it: the release comes before that step.
  p.step_options.resize(10);
  p.step_options[3] = {{6.6e-3, 10 * k_mib}};
  EXPECT_EQ(release(), 3u);
  // With 10 ms steps the copy lands 3.4 ms before step 2 starts: the release stays there.
  p = long_gap(10, 10e-3, 4, 7);
  p.budget_bytes = 150 * k_mib;
  EXPECT_EQ(release(), 2u);
}

TEST(memory_schedule_test, a_copy_that_cannot_hide_stalls_and_the_timeline_says_by_how_much) {
  // 1 ms steps: the 6.6 ms copies cannot hide; the planner still fits the budget, widening
  // the window to the steps that need it and waiting for the copies.
  schedule_problem p = long_gap(6, 1e-3, 1, 4);
  p.budget_bytes = 150 * k_mib;
  const memory_schedule s = plan_memory_schedule(p, no_headroom());
  ASSERT_EQ(s.gaps.size(), 1u);
  EXPECT_EQ(s.gaps[0].action, gap_action::swap);
  EXPECT_TRUE(s.fits);
  EXPECT_EQ(s.gaps[0].release, 1u);
  EXPECT_EQ(s.gaps[0].prefetch, 4u);
  EXPECT_GT(s.predicted_seconds, s.baseline_seconds + 5e-3);
  EXPECT_DOUBLE_EQ(simulate_memory_schedule(p, s), s.predicted_seconds);
}

TEST(memory_schedule_test, a_cheap_rebuild_is_preferred_to_a_round_trip) {
  schedule_problem p = long_gap(10, 10e-3, 1, 8);
  p.budget_bytes = 150 * k_mib;
  p.tensors[0].rebuildable = true;
  p.tensors[0].rebuild_seconds = 0.1e-3;  // far below the link time it would take
  const memory_schedule s = plan_memory_schedule(p, no_headroom());
  ASSERT_EQ(s.gaps.size(), 1u);
  EXPECT_EQ(s.gaps[0].action, gap_action::drop);
  EXPECT_EQ(s.steps[0].drop, std::vector<std::uint32_t>{0});
  EXPECT_EQ(s.steps[9].rebuild, std::vector<std::uint32_t>{0});
  EXPECT_EQ(s.rebuilds, 1u);
  EXPECT_EQ(s.bytes_swapped, 0u);
  EXPECT_NEAR(s.predicted_seconds, s.baseline_seconds + 0.1e-3, 1e-12);
}

TEST(memory_schedule_test, a_copys_latency_counts_besides_its_bytes) {
  // As a_long_idle_tensor_is_swapped...: the round trip hides (6.6 ms each way in 10 ms
  // steps). With 15 ms more per copy (a measured device's turn-around) the copy out lands at
  // 31.6 ms, after step 2 should start (B needs the room there): 11.6 ms of stall; the copy
  // back, issued after step 6, then lands 1.6 ms late.
  schedule_problem p = long_gap(10, 10e-3, 2, 6);
  p.budget_bytes = 150 * k_mib;
  EXPECT_EQ(plan_memory_schedule(p, no_headroom()).gaps.at(0).prefetch, 7u);
  p.copy_latency_s = 15e-3;
  const memory_schedule later = plan_memory_schedule(p, no_headroom());
  ASSERT_EQ(later.gaps.size(), 1u);
  EXPECT_EQ(later.gaps[0].prefetch, 6u);
  const double copy = 15e-3 + 100.0 * k_mib / 16e9;
  EXPECT_NEAR(later.predicted_seconds - later.baseline_seconds,
              (10e-3 + copy - 20e-3) + (copy - 20e-3), 1e-9);
  p.copy_latency_s = -1;
  EXPECT_THROW((void)plan_memory_schedule(p, no_headroom()), invalid_argument);
}

TEST(memory_schedule_test, a_drop_becomes_a_swap_where_the_link_is_idle_and_the_copies_hide) {
  // B needs the room over steps 2..6 only: the round trip hides (release 2, prefetch 7), but
  // the greedy round charges a hidden swap half its link time (6.6 ms), more than the 2 ms
  // rebuild, and drops. The link stays idle all iteration, so the refinement makes it a swap
  // and the iteration loses nothing.
  schedule_problem p = long_gap(10, 10e-3, 2, 6);
  p.budget_bytes = 150 * k_mib;
  p.tensors[0].rebuildable = true;
  p.tensors[0].rebuild_seconds = 2e-3;
  const memory_schedule s = plan_memory_schedule(p, no_headroom());
  ASSERT_EQ(s.gaps.size(), 1u);
  EXPECT_EQ(s.gaps[0].action, gap_action::swap);
  EXPECT_EQ(s.gaps[0].release, 2u);
  EXPECT_EQ(s.gaps[0].prefetch, 7u);
  EXPECT_EQ(s.rebuilds, 0u);
  EXPECT_DOUBLE_EQ(s.predicted_seconds, s.baseline_seconds);
  schedule_options drop_only = no_headroom();
  drop_only.allow_swap = false;
  const memory_schedule d = plan_memory_schedule(p, drop_only);
  ASSERT_EQ(d.gaps.size(), 1u);
  EXPECT_EQ(d.gaps[0].action, gap_action::drop);
  EXPECT_NEAR(d.predicted_seconds, d.baseline_seconds + 2e-3, 1e-12);
}

TEST(memory_schedule_test, drops_made_swaps_take_the_link_for_costlier_replays_first) {
  // Ten 1 ms steps. A (100 MiB, replayed in 0.5 ms: a memory-bound pass at 500 GB/s), C1 and
  // C2 (50 MiB each, 0.4 ms: costlier per byte) are written at step 0 and read at 9; B
  // (200 MiB) at steps 3..6 puts all 200 MiB of them over the budget there. The link carries
  // 100 MiB in the 2 ms between step 0 and step 3 (and again between 6 and 9): one round trip
  // of A, or of C1 and C2. By replay time alone A goes first and the Cs are replayed (0.8 ms);
  // memory-bound replays last, the Cs cross the link and A is replayed (0.5 ms).
  schedule_problem p;
  p.step_seconds.assign(10, 1e-3);
  p.tensors.push_back(tensor(100 * k_mib, {0, 9}));
  p.tensors.push_back(tensor(50 * k_mib, {0, 9}));
  p.tensors.push_back(tensor(50 * k_mib, {0, 9}));
  p.tensors.push_back(tensor(200 * k_mib, {3, 4, 5, 6}));
  for (std::size_t t = 0; t < 3; ++t) p.tensors[t].rebuildable = true;
  p.tensors[0].rebuild_seconds = 0.5e-3;
  p.tensors[1].rebuild_seconds = p.tensors[2].rebuild_seconds = 0.4e-3;
  p.link_bytes_per_s = 60e9;
  p.budget_bytes = 200 * k_mib;
  // Plans `p`: A's action and the Cs', and the iteration's seconds.
  auto expect_plan = [&p](gap_action a, gap_action cs, double seconds) {
    const memory_schedule s = plan_memory_schedule(p, no_headroom());
    ASSERT_TRUE(s.fits);
    std::vector<gap_action> actions(3, gap_action::keep);
    for (const scheduled_gap& g : s.gaps) {
      if (g.tensor < actions.size()) actions[g.tensor] = g.action;
    }
    EXPECT_EQ(actions, (std::vector<gap_action>{a, cs, cs}));
    EXPECT_NEAR(s.predicted_seconds, seconds, 1e-9);
  };
  expect_plan(gap_action::swap, gap_action::drop, 10e-3 + 0.8e-3);  // by replay time
  p.device_bytes_per_s = 500e9;
  expect_plan(gap_action::drop, gap_action::swap, 10e-3 + 0.5e-3);  // memory-bound last
  p.device_bytes_per_s = -1;
  EXPECT_THROW((void)plan_memory_schedule(p, no_headroom()), invalid_argument);
}

TEST(memory_schedule_test, a_dead_tensor_two_replays_read_is_rebuilt_once_where_there_is_room) {
  // Nine 1 ms steps. F (10 MiB) is written at step 0 and read at 1, then dead; C (read at 1
  // and 5) and D (read at 2 and 7) are rebuilt from F. B (40 MiB, the whole budget) at steps
  // 3 and 4 has both C and D dropped: each replay needs F, rebuilt first (a chain), at steps
  // 5 and 7. With room at steps 6 and 7, F stays from its rebuild at 5 to D's at 7: one
  // replay of F, not two.
  schedule_problem p;
  p.step_seconds.assign(9, 1e-3);
  p.tensors.push_back(tensor(10 * k_mib, {0, 1}));  // F
  p.tensors.push_back(tensor(10 * k_mib, {1, 5}));  // C
  p.tensors.push_back(tensor(10 * k_mib, {2, 7}));  // D
  p.tensors.push_back(tensor(40 * k_mib, {3, 4}));  // B
  for (std::size_t t = 0; t < 3; ++t) {
    p.tensors[t].rebuildable = true;
    p.tensors[t].rebuild_seconds = 1e-3;
  }
  p.tensors[1].rebuild_touches = p.tensors[2].rebuild_touches = {0};
  p.budget_bytes = 40 * k_mib;
  schedule_options o = no_headroom();
  o.allow_swap = false;
  const memory_schedule held = plan_memory_schedule(p, o);
  ASSERT_TRUE(held.fits);
  using hold = std::pair<std::uint32_t, std::uint32_t>;
  EXPECT_EQ(held.steps[5].hold, std::vector<hold>{hold(0, 7)});
  EXPECT_EQ(held.steps[5].rebuild, (std::vector<std::uint32_t>{1, 0}));
  EXPECT_EQ(held.steps[7].rebuild, std::vector<std::uint32_t>{2});
  EXPECT_EQ(held.rebuilds, 3u);
  EXPECT_EQ(held.bytes_per_step[6], 10 * k_mib);  // F, held
  EXPECT_NEAR(held.predicted_seconds, 9e-3 + 3e-3, 1e-12);
  // Another 40 MiB at step 6 leaves F no room there: rebuilt at both steps.
  p.tensors.push_back(tensor(40 * k_mib, {6}));
  const memory_schedule rebuilt = plan_memory_schedule(p, o);
  ASSERT_TRUE(rebuilt.fits);
  for (const scheduled_step& st : rebuilt.steps) EXPECT_TRUE(st.hold.empty());
  EXPECT_EQ(rebuilt.steps[7].rebuild, (std::vector<std::uint32_t>{2, 0}));
  EXPECT_NEAR(rebuilt.predicted_seconds, 9e-3 + 4e-3, 1e-12);
}

TEST(memory_schedule_test, an_expensive_rebuild_loses_to_a_hidden_swap) {
  schedule_problem p = long_gap(10, 10e-3, 2, 7);
  p.budget_bytes = 150 * k_mib;
  p.tensors[0].rebuildable = true;
  p.tensors[0].rebuild_seconds = 20e-3;
  const memory_schedule s = plan_memory_schedule(p, no_headroom());
  ASSERT_EQ(s.gaps.size(), 1u);
  EXPECT_EQ(s.gaps[0].action, gap_action::swap);
}

TEST(memory_schedule_test, a_rebuild_that_reads_a_dropped_tensor_rebuilds_it_first) {
  // x (used at 0, 1, 9), y = f(x) used at 1, 2, 9, z = g(y) used at 2, 3, 8, 9; a big tensor
  // w used at 4..6 forces both y and z off the device there (x could only be swapped, and
  // the link is hopeless).
  schedule_problem p;
  p.step_seconds.assign(10, 10e-3);
  p.link_bytes_per_s = 1e6;  // swaps are hopeless: everything must be rebuilt
  p.tensors.push_back(tensor(10 * k_mib, {0, 1, 9}));     // x
  p.tensors.push_back(tensor(10 * k_mib, {1, 2, 9}));     // y
  p.tensors.push_back(tensor(10 * k_mib, {2, 3, 8, 9}));  // z
  p.tensors.push_back(tensor(100 * k_mib, {4, 5, 6}));    // w
  p.tensors[1].rebuildable = true;
  p.tensors[1].rebuild_seconds = 1e-3;
  p.tensors[1].rebuild_touches = {0};
  p.tensors[2].rebuildable = true;
  p.tensors[2].rebuild_seconds = 1e-3;
  p.tensors[2].rebuild_touches = {1};
  p.budget_bytes = 110 * k_mib;
  const memory_schedule s = plan_memory_schedule(p, no_headroom());
  EXPECT_TRUE(s.fits) << s.predicted_peak_bytes;
  EXPECT_EQ(s.bytes_swapped, 0u);
  // z is dropped across 4..7 and rebuilt at 8; that rebuild reads y, which is dropped there
  // too: y is rebuilt at 8 first (a chain).
  bool y_rebuilt_at_8 = false, z_rebuilt_at_8 = false;
  for (std::uint32_t t : s.steps[8].rebuild) {
    y_rebuilt_at_8 = y_rebuilt_at_8 || t == 1;
    z_rebuilt_at_8 = z_rebuilt_at_8 || t == 2;
  }
  EXPECT_TRUE(z_rebuilt_at_8);
  EXPECT_TRUE(y_rebuilt_at_8);
  EXPECT_EQ(s.bytes_per_step[5], 110 * k_mib);  // x and w
  EXPECT_EQ(s.bytes_per_step[8], 30 * k_mib);   // x, and y and z rebuilt
}

// x is used at 0 and 8, y = f(x) at 1 and 6; a big w at 2..4 forces both off (the link is
// hopeless): y's replay before step 6 needs x, rebuilt there first. Kept from there to its
// own use at 8 (the steps between have room), x is rebuilt once, not twice.
TEST(memory_schedule_test,
     a_tensor_a_replay_rebuilt_early_stays_until_its_use_where_there_is_room) {
  schedule_problem p;
  p.step_seconds.assign(10, 10e-3);
  p.link_bytes_per_s = 1e6;
  p.tensors.push_back(tensor(10 * k_mib, {0, 8}));      // x
  p.tensors.push_back(tensor(10 * k_mib, {1, 6}));      // y
  p.tensors.push_back(tensor(100 * k_mib, {2, 3, 4}));  // w
  p.tensors[0].rebuildable = true;
  p.tensors[0].rebuild_seconds = 1e-3;
  p.tensors[1].rebuildable = true;
  p.tensors[1].rebuild_seconds = 2e-3;
  p.tensors[1].rebuild_touches = {0};
  p.budget_bytes = 100 * k_mib;
  auto rebuilt_at = [](const memory_schedule& s, std::uint32_t step, std::uint32_t t) {
    const auto& r = s.steps[step].rebuild;
    return std::find(r.begin(), r.end(), t) != r.end();
  };
  const memory_schedule again = plan_memory_schedule(p, no_headroom());
  ASSERT_TRUE(again.fits);
  EXPECT_TRUE(rebuilt_at(again, 6, 0));
  EXPECT_TRUE(rebuilt_at(again, 6, 1));
  EXPECT_TRUE(rebuilt_at(again, 8, 0));  // dropped after 6 and rebuilt again
  EXPECT_EQ(again.rebuilds, 3u);
  schedule_options o = no_headroom();
  o.keep_rebuilt = true;
  const memory_schedule kept = plan_memory_schedule(p, o);
  ASSERT_TRUE(kept.fits);
  EXPECT_TRUE(rebuilt_at(kept, 6, 0));
  EXPECT_FALSE(rebuilt_at(kept, 8, 0));
  EXPECT_EQ(kept.rebuilds, 2u);
  EXPECT_EQ(kept.bytes_per_step[7], 10 * k_mib);  // x held over step 7
  EXPECT_NEAR(again.predicted_seconds - kept.predicted_seconds, 1e-3, 1e-12);
  // Where the steps between have no room, it is dropped again.
  p.tensors.push_back(tensor(95 * k_mib, {7}));
  const memory_schedule full = plan_memory_schedule(p, o);
  ASSERT_TRUE(full.fits);
  EXPECT_TRUE(rebuilt_at(full, 8, 0));
  EXPECT_EQ(full.rebuilds, 3u);
}

// y = f(x) (100 MiB) is written at 1 and read at 9, x (50 MiB) is used at 0 and 1 only, and B
// (100 MiB) at 3..6 leaves room for one of y and B: a replay of y before step 9 would rebuild
// the dead x first. The greedy round drops y (a hidden round trip is charged half its link
// time, more than both replays) and the refinement makes it a swap, the link being idle: x
// is then not rebuilt either, and takes no room at step 9.
TEST(memory_schedule_test, a_drop_made_a_swap_leaves_no_rebuild_of_what_its_replay_read) {
  schedule_problem p;
  p.step_seconds.assign(10, 10e-3);
  p.link_bytes_per_s = 16e9;
  p.tensors.push_back(tensor(100 * k_mib, {1, 9}));        // y
  p.tensors.push_back(tensor(100 * k_mib, {3, 4, 5, 6}));  // B
  p.tensors.push_back(tensor(50 * k_mib, {0, 1}));         // x
  p.tensors[0].rebuildable = true;
  p.tensors[0].rebuild_seconds = 2e-3;
  p.tensors[0].rebuild_touches = {2};
  p.tensors[2].rebuildable = true;
  p.tensors[2].rebuild_seconds = 1e-3;
  p.budget_bytes = 150 * k_mib;
  const memory_schedule s = plan_memory_schedule(p, no_headroom());
  ASSERT_TRUE(s.fits);
  ASSERT_EQ(s.gaps.size(), 1u);
  EXPECT_EQ(s.gaps[0].action, gap_action::swap);
  EXPECT_EQ(s.rebuilds, 0u);
  EXPECT_TRUE(s.steps[9].rebuild.empty());
  EXPECT_EQ(s.bytes_per_step[9], 100 * k_mib);  // y alone
  EXPECT_DOUBLE_EQ(s.predicted_seconds, s.baseline_seconds);
  schedule_options drop_only = no_headroom();
  drop_only.allow_swap = false;
  const memory_schedule d = plan_memory_schedule(p, drop_only);
  EXPECT_EQ(d.rebuilds, 2u);  // x, then y
  EXPECT_EQ(d.bytes_per_step[9], 150 * k_mib);
}

// A (idle over 1..8) and B (always used) as in long_gap, D of 50 MiB used at steps 4 and 6;
// step 5 runs in 10 ms with a 60 MiB workspace or in 30 ms with none; a slow link (105 ms
// per copy).
schedule_problem workspace_trade(std::size_t budget) {
  schedule_problem p = long_gap(10, 10e-3);
  p.tensors.push_back(tensor(50 * k_mib, {4, 6}));
  p.step_options.resize(10);
  p.step_options[5] = {{10e-3, 60 * k_mib}, {30e-3, 0}};
  p.budget_bytes = budget;
  p.link_bytes_per_s = 1e9;
  return p;
}

TEST(memory_schedule_test, a_step_gives_up_workspace_where_that_costs_less_than_moving_tensors) {
  // A (idle over 1..8) and B (always used) as above, D of 50 MiB used at steps 4 and 6; step 5
  // runs in 10 ms with a 60 MiB workspace or in 30 ms with none. 310 MiB at step 5 against
  // 200: over a slow link no copy hides, so step 5 gives up its workspace (20 ms) and a
  // tensor goes for the rest; over a fast one hidden swaps are cheaper and the step keeps it.
  schedule_problem p = workspace_trade(200 * k_mib);
  const memory_schedule slow = plan_memory_schedule(p, no_headroom());
  EXPECT_TRUE(slow.fits);
  EXPECT_EQ(slow.step_choice[5], 1u);
  p.link_bytes_per_s = 16e9;
  const memory_schedule fast = plan_memory_schedule(p, no_headroom());
  EXPECT_TRUE(fast.fits);
  EXPECT_EQ(fast.step_choice[5], 0u);
  ASSERT_EQ(fast.gaps.size(), 2u);
  for (const scheduled_gap& g : fast.gaps) EXPECT_EQ(g.action, gap_action::swap);
}

TEST(memory_schedule_test, a_step_takes_back_the_workspace_that_later_actions_made_room_for) {
  // As above at 230 MiB: the greedy first gives up step 5's workspace (cheaper per byte than
  // a stalling swap), then must move A anyway; with A gone, the workspace fits again and the
  // step gets it back.
  schedule_problem p = workspace_trade(230 * k_mib);
  const memory_schedule s = plan_memory_schedule(p, no_headroom());
  EXPECT_TRUE(s.fits);
  EXPECT_EQ(s.step_choice[5], 0u);
  EXPECT_EQ(s.bytes_per_step[5], 210 * k_mib);
}

TEST(memory_schedule_test, the_timeline_counts_a_workspace_larger_than_planned_where_it_fits) {
  // Step 5 is planned without workspace only (30 ms; its 60 MiB way is beyond the share the
  // executor plans for), but selection takes it at run time where the budget holds it beside
  // the step's 250 MiB of tensors: at 320 MiB the timeline counts 10 ms, at 280 MiB 30 ms.
  schedule_problem p = workspace_trade(320 * k_mib);
  p.timing_options.resize(10);
  p.timing_options[5] = p.step_options[5];
  p.step_options[5] = {{30e-3, 0}};
  const memory_schedule roomy = plan_memory_schedule(p, no_headroom());
  EXPECT_TRUE(roomy.fits);
  EXPECT_EQ(roomy.step_choice[5], 0u);
  EXPECT_NEAR(roomy.predicted_seconds, 100e-3, 1e-9);
  p.budget_bytes = 280 * k_mib;
  const memory_schedule tight = plan_memory_schedule(p, no_headroom());
  EXPECT_TRUE(tight.fits);
  EXPECT_NEAR(tight.predicted_seconds, 120e-3, 1e-9);
}

TEST(memory_schedule_test, a_step_whose_own_tensors_exceed_the_budget_does_not_fit) {
  schedule_problem p = long_gap(4, 1e-3);
  p.budget_bytes = 150 * k_mib;  // steps 0 and 3 use both tensors: 200 MiB
  const memory_schedule s = plan_memory_schedule(p, no_headroom());
  EXPECT_FALSE(s.fits);
  EXPECT_EQ(s.predicted_peak_bytes, 200 * k_mib);
}

// A staged step (TSPLIT) reaches its micro-tensors in host memory: x, used on the device at
// 0, staged at 3 and 5 and fetched for 8, holds no device bytes from 3 to 7; the schedule
// takes no action on the gaps it spends in host memory, may offload it ahead of its staged
// use (one way), and no rebuild reads it in host memory.
TEST(memory_schedule_test, a_tensor_staged_in_host_memory_holds_no_device_bytes) {
  schedule_problem p;
  p.step_seconds.assign(10, 10e-3);
  p.link_bytes_per_s = 16e9;
  p.tensors.push_back(tensor(100 * k_mib, {0, 3, 5, 8}));  // x
  p.tensors[0].uses[1].on_host = true;
  p.tensors[0].uses[2].on_host = true;
  p.tensors.push_back(tensor(100 * k_mib, {1, 2, 3, 4, 5, 6, 7}));  // busy
  p.budget_bytes = 200 * k_mib;
  memory_schedule s = plan_memory_schedule(p, no_headroom());
  EXPECT_TRUE(s.gaps.empty());
  EXPECT_TRUE(s.fits);
  const std::vector<std::size_t> expected = {
      100 * k_mib, 200 * k_mib, 200 * k_mib, 100 * k_mib, 100 * k_mib,
      100 * k_mib, 100 * k_mib, 100 * k_mib, 100 * k_mib, 0};
  EXPECT_EQ(s.bytes_per_step, expected);
  // Kept up to its staged use, x is copied out there on the compute stream, and in again for
  // step 8.
  const double copy = 100.0 * k_mib / 16e9;
  EXPECT_NEAR(s.predicted_seconds, s.baseline_seconds + 2 * copy, 1e-12);

  // With room for one only, x must leave over 1..2: offloaded after step 0 and released
  // before step 1 (waiting for the 6.6 ms copy: no step lies between), never brought back:
  // the staged step takes its host copy and no longer copies it out.
  p.budget_bytes = 100 * k_mib;
  s = plan_memory_schedule(p, no_headroom());
  EXPECT_TRUE(s.fits);
  ASSERT_EQ(s.gaps.size(), 1u);
  const scheduled_gap& out = s.gaps[0];
  EXPECT_EQ(out.tensor, 0u);
  EXPECT_EQ(out.action, gap_action::swap);
  EXPECT_TRUE(out.to_host);
  EXPECT_EQ(out.after, 0u);
  EXPECT_EQ(out.before, 3u);
  EXPECT_EQ(out.release, 1u);
  EXPECT_EQ(s.steps[0].offload, std::vector<std::uint32_t>{0});
  EXPECT_EQ(s.steps[1].release, std::vector<std::uint32_t>{0});
  for (const scheduled_step& st : s.steps) EXPECT_TRUE(st.prefetch.empty());
  EXPECT_EQ(s.bytes_per_step[1], 100 * k_mib);
  EXPECT_NEAR(s.predicted_seconds, s.baseline_seconds + 2 * copy, 1e-12);  // wait, copy in

  // y, rebuilt by a replay that reads x, cannot be dropped across z's steps: its rebuild at 7
  // would need x, in host memory there.
  p.budget_bytes = 150 * k_mib;
  p.tensors[1].uses.erase(p.tensors[1].uses.begin(), p.tensors[1].uses.begin() + 2);
  p.tensors.push_back(tensor(50 * k_mib, {4, 7}));  // y
  p.tensors[2].rebuildable = true;
  p.tensors[2].rebuild_seconds = 1e-6;
  p.tensors[2].rebuild_touches = {0};
  p.tensors.push_back(tensor(50 * k_mib, {5, 6}));  // z
  p.link_bytes_per_s = 1e6;                         // a swap is hopeless: only a drop helps
  s = plan_memory_schedule(p, no_headroom());
  EXPECT_EQ(s.rebuilds, 0u);
  for (const scheduled_gap& g : s.gaps) EXPECT_FALSE(g.tensor == 2 && g.action == gap_action::drop);
  const double without_drop = s.predicted_seconds;
  p.tensors[2].rebuild_touches.clear();  // a replay that needs nothing: y is dropped
  s = plan_memory_schedule(p, no_headroom());
  EXPECT_TRUE(s.fits);
  EXPECT_EQ(s.rebuilds, 1u);
  EXPECT_LT(s.predicted_seconds, without_drop - 1.0);  // no swap of y over the slow link

  // Only transient tensors are staged.
  p.tensors[0].persistent = true;
  p.tensors[0].uses[2].on_host = true;
  EXPECT_THROW((void)plan_memory_schedule(p, no_headroom()), invalid_argument);
}

// A staged step is planned within the whole budget, the others within the planning budget the
// headroom leaves: the split plan fits the staged step's micro-step to the budget, and what it
// keeps whole besides is what the budget holds (held to the headroom's 92 MiB, x's slices
// crossed the link here: 21 ms more).
TEST(memory_schedule_test, a_staged_step_may_fill_the_whole_budget) {
  schedule_problem p;
  p.step_seconds.assign(4, 10e-3);
  p.link_bytes_per_s = 16e9;
  // x: written at 0, staged at 2 (its slices 4 MiB, 20 ms of copies), read whole at 3.
  p.tensors.push_back(tensor(10 * k_mib, {0, 2, 3}));
  stage(p.tensors[0].uses[1], 4 * k_mib, 20e-3);
  p.tensors.push_back(tensor(86 * k_mib, {2}));  // w: 90 MiB at step 2 with x's slices
  p.budget_bytes = 100 * k_mib;
  schedule_options o;
  o.headroom = 0.08;  // planning budget 92 MiB
  memory_schedule s = plan_memory_schedule(p, o);
  EXPECT_TRUE(s.fits);
  EXPECT_TRUE(s.gaps.empty());
  // Whole, x fills the budget at 2 (96 MiB: over 92, within 100) and crosses no link.
  EXPECT_EQ(s.steps[2].whole, std::vector<std::uint32_t>{0});
  EXPECT_EQ(s.bytes_per_step[2], 96 * k_mib);
  EXPECT_NEAR(s.predicted_seconds, s.baseline_seconds, 1e-12);
  // A step that is not staged keeps the headroom: with w used at 1 too, step 1 holds 96 MiB,
  // within the budget (so the planner takes no action) but over its 92 MiB planning budget.
  p.tensors[1] = tensor(86 * k_mib, {1, 2});
  s = plan_memory_schedule(p, o);
  EXPECT_FALSE(s.fits);
  EXPECT_EQ(s.bytes_per_step[1], 96 * k_mib);
  // Over the budget itself, x's slices alone do not fit either: w at 2 is the step's own.
  p.tensors[1] = tensor(97 * k_mib, {2});
  s = plan_memory_schedule(p, o);
  EXPECT_FALSE(s.fits);
}

// A staged step's micro-tensor whose slices cost copy time stays whole on the device there
// where the step has room and that shortens the iteration (scheduled_step::whole); where the
// budget holds only its slices, it stays in host memory.
TEST(memory_schedule_test, a_micro_tensor_stays_whole_where_the_staged_step_has_room) {
  schedule_problem p;
  p.step_seconds.assign(6, 10e-3);
  p.link_bytes_per_s = 16e9;
  // x: written at 0, staged at 2 (10 MiB of slices, 20 ms of copies), read whole at 4.
  p.tensors.push_back(tensor(100 * k_mib, {0, 2, 4}));
  stage(p.tensors[0].uses[1], 10 * k_mib, 20e-3);
  p.tensors.push_back(tensor(50 * k_mib, {1, 2, 3}));  // y
  p.budget_bytes = 150 * k_mib;
  memory_schedule s = plan_memory_schedule(p, no_headroom());
  EXPECT_TRUE(s.fits);
  EXPECT_EQ(s.steps[2].whole, std::vector<std::uint32_t>{0});
  EXPECT_EQ(s.bytes_per_step[2], 150 * k_mib);
  EXPECT_NEAR(s.predicted_seconds, s.baseline_seconds, 1e-12);  // no copy at all
  // 120 MiB: x whole at 2 beside y does not fit; staged, it is copied out at 2 (6.6 ms), its
  // slices cross (20 ms), and it is copied in for 4 (6.6 ms).
  p.budget_bytes = 120 * k_mib;
  s = plan_memory_schedule(p, no_headroom());
  EXPECT_TRUE(s.fits);
  for (const scheduled_step& st : s.steps) EXPECT_TRUE(st.whole.empty());
  EXPECT_EQ(s.bytes_per_step[2], 60 * k_mib);
  const double copy = 100.0 * k_mib / 16e9;
  EXPECT_NEAR(s.predicted_seconds, s.baseline_seconds + 20e-3 + 2 * copy, 1e-9);
}

TEST(memory_schedule_test, pinned_tensors_and_the_thresholds_are_respected) {
  schedule_problem p = long_gap(10, 10e-3, 2, 7);
  p.budget_bytes = 150 * k_mib;
  p.tensors[0].pinned = true;
  EXPECT_TRUE(plan_memory_schedule(p, no_headroom()).gaps.empty());
  p.tensors[0].pinned = false;
  schedule_options o = no_headroom();
  o.min_bytes = 200 * k_mib;
  EXPECT_TRUE(plan_memory_schedule(p, o).gaps.empty());
  o = no_headroom();
  o.min_swap_distance = 10;
  EXPECT_TRUE(plan_memory_schedule(p, o).gaps.empty());
  o = no_headroom();
  o.allow_swap = false;
  EXPECT_TRUE(plan_memory_schedule(p, o).gaps.empty());
}

// Ten 10 ms steps; a persistent W of 100 MiB used at steps 4 and 5 only (a VGG FC layer's
// weights) and transient tensors of 100 MiB over steps 0..2 and 7..9 (the convolutions'
// activations), under 150 MiB: W must be away at both ends of the iteration.
schedule_problem idle_at_both_ends() {
  schedule_problem p;
  p.step_seconds.assign(10, 10e-3);
  schedule_tensor w = tensor(100 * k_mib, {4, 5});
  w.persistent = w.pinned = w.parkable = true;
  p.tensors.push_back(w);
  p.tensors.push_back(tensor(100 * k_mib, {0, 1, 2}));
  p.tensors.push_back(tensor(100 * k_mib, {7, 8, 9}));
  p.budget_bytes = 150 * k_mib;
  p.link_bytes_per_s = 16e9;
  return p;
}

TEST(memory_schedule_test, a_persistent_tensor_idle_at_both_ends_is_parked_with_hidden_copies) {
  const schedule_problem p = idle_at_both_ends();
  const memory_schedule s = plan_memory_schedule(p, no_headroom());
  ASSERT_EQ(s.gaps.size(), 1u);
  const scheduled_gap& g = s.gaps[0];
  EXPECT_TRUE(g.wraps);
  EXPECT_EQ(g.tensor, 0u);
  EXPECT_EQ(g.action, gap_action::swap);
  // Out after its last use, the copy (6.6 ms) starting once its writer (step 4) is done: it
  // lands before step 6, released there; in after step 2, the latest whose copy lands before
  // step 4 starts.
  EXPECT_EQ(g.after, 5u);
  EXPECT_EQ(g.before, 4u);
  EXPECT_EQ(g.release, 6u);
  EXPECT_EQ(g.prefetch, 2u);
  EXPECT_EQ(s.steps[5].offload, std::vector<std::uint32_t>{0});
  EXPECT_EQ(s.steps[6].release, std::vector<std::uint32_t>{0});
  EXPECT_EQ(s.steps[2].prefetch, std::vector<std::uint32_t>{0});
  EXPECT_TRUE(s.fits);
  EXPECT_EQ(s.predicted_peak_bytes, 100 * k_mib);
  EXPECT_EQ(s.bytes_swapped, 100 * k_mib);
  EXPECT_DOUBLE_EQ(s.predicted_seconds, s.baseline_seconds);  // both copies hidden
  EXPECT_DOUBLE_EQ(simulate_memory_schedule(p, s), s.predicted_seconds);
}

TEST(memory_schedule_test, a_persistent_tensor_not_parkable_stays_and_the_schedule_does_not_fit) {
  schedule_problem p = idle_at_both_ends();
  p.tensors[0].parkable = false;
  const memory_schedule s = plan_memory_schedule(p, no_headroom());
  EXPECT_TRUE(s.gaps.empty());
  EXPECT_FALSE(s.fits);
  // Nor is it parked when swaps are off.
  p.tensors[0].parkable = true;
  schedule_options o = no_headroom();
  o.allow_swap = false;
  EXPECT_TRUE(plan_memory_schedule(p, o).gaps.empty());
}

// What no action can take off a step, seen before any planning: true only where the greedy
// cannot fit, at every threshold it is given.
TEST(memory_schedule_test, a_step_nothing_can_relieve_is_seen_before_planning) {
  schedule_problem p = idle_at_both_ends();
  const auto cannot = [&](const schedule_options& o) {
    const bool seen = memory_schedule_cannot_fit(p, o);
    if (seen) {
      EXPECT_FALSE(plan_memory_schedule(p, o).fits);  // sound: the greedy agrees
    }
    return seen;
  };
  EXPECT_FALSE(cannot(no_headroom()));  // W parks: nothing is sure to stay
  p.tensors[0].parkable = false;        // W stays at both ends, beside 100 MiB of activations
  std::uint32_t step = 99;
  std::size_t floor = 0;
  EXPECT_TRUE(memory_schedule_cannot_fit(p, no_headroom(), &step, &floor));
  EXPECT_EQ(step, 0u);
  EXPECT_EQ(floor, 200 * k_mib);
  EXPECT_TRUE(cannot(no_headroom()));
  p.tensors[0].parkable = true;
  schedule_options o = no_headroom();
  o.allow_swap = false;  // no park without swaps
  EXPECT_TRUE(cannot(o));
  o = no_headroom();
  o.min_bytes = 200 * k_mib;  // below min_bytes: not weighed at all
  EXPECT_TRUE(cannot(o));
  // Pinned between its uses: a tensor A idle at steps 1..8 beside B's 100 MiB (2..7).
  schedule_problem q = long_gap(10, 10e-3, 2, 7);
  q.budget_bytes = 150 * k_mib;
  EXPECT_FALSE(memory_schedule_cannot_fit(q, no_headroom()));
  q.tensors[0].pinned = true;
  EXPECT_TRUE(memory_schedule_cannot_fit(q, no_headroom()));
  EXPECT_FALSE(plan_memory_schedule(q, no_headroom()).fits);
  // A step's workspace counts at its smallest, options and fixed bytes alike (the executor's
  // last attempt plans with the fixed bytes alone).
  schedule_problem w = long_gap(10, 10e-3, 2, 7);
  w.budget_bytes = 150 * k_mib;
  w.step_extra_bytes.assign(10, 0);
  w.step_extra_bytes[4] = 100 * k_mib;
  EXPECT_TRUE(memory_schedule_cannot_fit(w, no_headroom()));
  w.step_options.assign(10, {});
  w.step_options[4] = {{1e-3, 100 * k_mib}, {2e-3, 0}};
  EXPECT_FALSE(memory_schedule_cannot_fit(w, no_headroom()));
}

// The prefetch of A (long_gap with B busy over steps 2..6) under the prefetch controls.
scheduled_gap swap_under(const schedule_options& o) {
  schedule_problem p = long_gap(10, 10e-3, 2, 6);
  p.budget_bytes = 150 * k_mib;
  const memory_schedule s = plan_memory_schedule(p, o);
  EXPECT_EQ(s.gaps.size(), 1u);
  return s.gaps.empty() ? scheduled_gap{} : s.gaps[0];
}

TEST(memory_schedule_test, prefetches_keep_the_slack_threshold_and_the_lb_ub_bounds) {
  schedule_options o = no_headroom();
  // Step 9 starts at 90 ms; the 6.6 ms copy issued after step 7 lands at 86.6 ms.
  EXPECT_EQ(swap_under(o).prefetch, 7u);
  o.slack_seconds = 5e-3;  // 86.6 + 5 > 90: one step earlier
  EXPECT_EQ(swap_under(o).prefetch, 6u);
  o = no_headroom();
  o.slack_copy_share = 0.5;  // half the 6.6 ms copy: 86.6 + 3.3 <= 90, still after step 7
  EXPECT_EQ(swap_under(o).prefetch, 7u);
  o.slack_copy_share = 1.0;  // the whole copy: 86.6 + 6.6 > 90, one step earlier
  EXPECT_EQ(swap_under(o).prefetch, 6u);
  o = no_headroom();
  o.prefetch_lb = 4;  // at least 4 steps before step 9
  EXPECT_EQ(swap_under(o).prefetch, 5u);
  o = no_headroom();
  o.prefetch_ub = 1;  // right before step 9: the copy cannot hide, step 9 waits for it
  schedule_problem p = long_gap(10, 10e-3, 2, 6);
  p.budget_bytes = 150 * k_mib;
  const memory_schedule s = plan_memory_schedule(p, o);
  ASSERT_EQ(s.gaps.size(), 1u);
  EXPECT_EQ(s.gaps[0].prefetch, 8u);
  EXPECT_NEAR(s.predicted_seconds - s.baseline_seconds, 100.0 * k_mib / 16e9, 1e-9);
}

TEST(memory_schedule_test, prefetch_bounds_and_slack_out_of_range_are_errors_naming_them) {
  schedule_problem p = long_gap(4, 1e-3);
  schedule_options o;
  o.prefetch_lb = 5;
  o.prefetch_ub = 3;
  try {
    (void)plan_memory_schedule(p, o);
    ADD_FAILURE() << "lb > ub accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("lower bound 5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("upper bound 3"), std::string::npos) << e.what();
  }
  o = {};
  o.slack_seconds = -1e-3;
  try {
    (void)plan_memory_schedule(p, o);
    ADD_FAILURE() << "negative slack accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("slack -0.001"), std::string::npos) << e.what();
  }
  o = {};
  o.slack_copy_share = -0.5;
  try {
    (void)plan_memory_schedule(p, o);
    ADD_FAILURE() << "a negative slack share accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("slack share -0.5"), std::string::npos) << e.what();
  }
  ::setenv("MEMWEAVE_SCHEDULE_PREFETCH_LB", "6", 1);
  ::setenv("MEMWEAVE_SCHEDULE_PREFETCH_UB", "2", 1);
  try {
    (void)schedule_options::from_environment();
    ADD_FAILURE() << "MEMWEAVE_SCHEDULE_PREFETCH_LB > _UB accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("MEMWEAVE_SCHEDULE_PREFETCH_LB=6"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("MEMWEAVE_SCHEDULE_PREFETCH_UB=2"), std::string::npos)
        << e.what();
  }
  ::unsetenv("MEMWEAVE_SCHEDULE_PREFETCH_LB");
  ::unsetenv("MEMWEAVE_SCHEDULE_PREFETCH_UB");
  ::setenv("MEMWEAVE_SCHEDULE_SLACK_MS", "-2", 1);
  try {
    (void)schedule_options::from_environment();
    ADD_FAILURE() << "a negative MEMWEAVE_SCHEDULE_SLACK_MS accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("MEMWEAVE_SCHEDULE_SLACK_MS"), std::string::npos)
        << e.what();
  }
  ::unsetenv("MEMWEAVE_SCHEDULE_SLACK_MS");
}

TEST(memory_schedule_test, impossible_controls_and_malformed_problems_are_errors_naming_them) {
  schedule_problem p = long_gap(4, 1e-3);
  schedule_options o;
  o.headroom = 1.5;
  EXPECT_THROW(
      try { (void)plan_memory_schedule(p, o); } catch (const invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("headroom"), std::string::npos) << e.what();
        throw;
      },
      invalid_argument);
  o = {};
  o.min_swap_distance = 1;
  EXPECT_THROW((void)plan_memory_schedule(p, o), invalid_argument);
  o = {};
  o.link_charge = -1;
  EXPECT_THROW((void)plan_memory_schedule(p, o), invalid_argument);
  schedule_problem bad = p;
  bad.tensors[0].uses = {{3, true}, {1, false}};
  EXPECT_THROW((void)plan_memory_schedule(bad), invalid_argument);
  bad = p;
  bad.tensors[0].uses = {{0, true}, {7, false}};
  EXPECT_THROW((void)plan_memory_schedule(bad), invalid_argument);
  bad = p;
  bad.tensors[0].rebuild_touches = {5};
  EXPECT_THROW((void)plan_memory_schedule(bad), invalid_argument);
  bad = p;
  bad.link_bytes_per_s = 0;
  EXPECT_THROW((void)plan_memory_schedule(bad), invalid_argument);
}

// A random iteration shaped like training: a forward pass producing activations read again
// in a mirrored backward pass, some of them rebuildable from the previous one.
TEST(memory_schedule_test, a_swap_that_stalls_uncompressed_hides_compressed_to_fp16) {
  // 4 ms steps, B needs the room over steps 2..7: A's 6.6 ms copies land 2.6 ms late each
  // way; as fp16 (3.3 ms) both hide.
  schedule_problem p = long_gap(10, 4e-3, 2, 7);
  p.budget_bytes = 150 * k_mib;
  p.tensors[0].compressible = true;
  const memory_schedule plain = plan_memory_schedule(p, no_headroom());
  ASSERT_EQ(plain.gaps.size(), 1u);
  EXPECT_FALSE(plain.gaps[0].compressed) << "compression is opt-in";
  EXPECT_EQ(plain.bytes_compressed, 0u);
  EXPECT_NEAR(plain.predicted_seconds - plain.baseline_seconds, 2 * 2.6e-3, 0.1e-3);
  schedule_options o = no_headroom();
  o.compress = true;
  const memory_schedule half = plan_memory_schedule(p, o);
  ASSERT_EQ(half.gaps.size(), 1u);
  EXPECT_EQ(half.gaps[0].action, gap_action::swap);
  EXPECT_TRUE(half.gaps[0].compressed);
  EXPECT_TRUE(half.fits);
  EXPECT_EQ(half.bytes_swapped, 100 * k_mib);
  EXPECT_EQ(half.bytes_compressed, 100 * k_mib);
  EXPECT_DOUBLE_EQ(half.predicted_seconds, half.baseline_seconds) << "both copies hide";
  EXPECT_DOUBLE_EQ(simulate_memory_schedule(p, half), half.predicted_seconds);
  EXPECT_DOUBLE_EQ(simulate_memory_schedule(p, plain), plain.predicted_seconds);
  // A tensor not marked compressible travels whole even with compress on.
  p.tensors[0].compressible = false;
  const memory_schedule whole = plan_memory_schedule(p, o);
  ASSERT_EQ(whole.gaps.size(), 1u);
  EXPECT_FALSE(whole.gaps[0].compressed);
  EXPECT_DOUBLE_EQ(whole.predicted_seconds, plain.predicted_seconds);
}

TEST(memory_schedule_test, exact_mode_refuses_fp16_compression_naming_the_variable) {
  EXPECT_NO_THROW(require_exact(schedule_options{}, "the oracle's bit-identity mode"));
  schedule_options o;
  o.compress = true;
  try {
    require_exact(o, "the oracle's bit-identity mode");
    ADD_FAILURE() << "a lossy option was accepted where results must be bit-identical";
  } catch (const invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("the oracle's bit-identity mode"), std::string::npos) << m;
    EXPECT_NE(m.find("MEMWEAVE_SCHEDULE_COMPRESS=fp16"), std::string::npos) << m;
    EXPECT_NE(m.find("lossy"), std::string::npos) << m;
    EXPECT_NE(m.find("not bit-identical"), std::string::npos) << m;
  }
}

// Left unset, the link charge, the headroom and the slack are chosen per problem (the executor
// tries several); set, the value is used alone, and an out-of-range one is an error.
TEST(memory_schedule_test, link_charge_and_headroom_are_automatic_unless_memweave_sets_them) {
  struct knob {
    const char* variable;
    double fallback, set;
    double schedule_options::*value;
    bool schedule_options::*automatic;
  };
  for (const knob& k : {knob{"MEMWEAVE_SCHEDULE_LINK_CHARGE", 0.5, 1.5,
                             &schedule_options::link_charge, &schedule_options::link_charge_auto},
                        knob{"MEMWEAVE_SCHEDULE_HEADROOM", 0.08, 0.1, &schedule_options::headroom,
                             &schedule_options::headroom_auto}}) {
    SCOPED_TRACE(k.variable);
    ::unsetenv(k.variable);
    const schedule_options unset = schedule_options::from_environment();
    EXPECT_TRUE(unset.*k.automatic);
    EXPECT_EQ(unset.*k.value, k.fallback);
    ::setenv(k.variable, std::to_string(k.set).c_str(), 1);
    const schedule_options set = schedule_options::from_environment();
    EXPECT_FALSE(set.*k.automatic);
    EXPECT_EQ(set.*k.value, k.set);
    ::setenv(k.variable, "-1", 1);
    EXPECT_THROW((void)schedule_options::from_environment(), invalid_argument);
    ::unsetenv(k.variable);
  }
  // The slack, in milliseconds: unset, no fixed margin and margins of a share of each copy
  // tried (slack_auto); set, that margin alone.
  ::unsetenv("MEMWEAVE_SCHEDULE_SLACK_MS");
  const schedule_options unset = schedule_options::from_environment();
  EXPECT_TRUE(unset.slack_auto);
  EXPECT_EQ(unset.slack_seconds, 0.0);
  ::setenv("MEMWEAVE_SCHEDULE_SLACK_MS", "2", 1);
  const schedule_options set = schedule_options::from_environment();
  EXPECT_FALSE(set.slack_auto);
  EXPECT_DOUBLE_EQ(set.slack_seconds, 2e-3);
  ::setenv("MEMWEAVE_SCHEDULE_SLACK_MS", "-1", 1);
  EXPECT_THROW((void)schedule_options::from_environment(), invalid_argument);
  ::unsetenv("MEMWEAVE_SCHEDULE_SLACK_MS");
}

TEST(memory_schedule_test, memweave_schedule_compress_is_read_and_checked) {
  EXPECT_FALSE(schedule_options::from_environment().compress) << "off by default";
  ::setenv("MEMWEAVE_SCHEDULE_COMPRESS", "fp16", 1);
  EXPECT_TRUE(schedule_options::from_environment().compress);
  ::setenv("MEMWEAVE_SCHEDULE_COMPRESS", "none", 1);
  EXPECT_FALSE(schedule_options::from_environment().compress);
  ::setenv("MEMWEAVE_SCHEDULE_COMPRESS", "bf16", 1);
  try {
    (void)schedule_options::from_environment();
    ADD_FAILURE() << "an unknown compression was accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("MEMWEAVE_SCHEDULE_COMPRESS"), std::string::npos)
        << e.what();
  }
  ::unsetenv("MEMWEAVE_SCHEDULE_COMPRESS");
}

// A setting weighed both ways by default: unset, the flag is off and both are run; `on` and
// `off` fix it; anything else is an error naming the variable.
void expect_weighed_choice(const char* variable, const char* on, const char* off,
                           bool schedule_options::*flag, bool schedule_options::*flag_auto) {
  SCOPED_TRACE(variable);
  ::unsetenv(variable);
  schedule_options o = schedule_options::from_environment();
  EXPECT_FALSE(o.*flag);
  EXPECT_TRUE(o.*flag_auto) << "both ways weighed by default";
  for (const char* value : {on, off}) {
    ::setenv(variable, value, 1);
    o = schedule_options::from_environment();
    EXPECT_EQ(o.*flag, value == on) << value;
    EXPECT_FALSE(o.*flag_auto) << value;
  }
  ::setenv(variable, "2", 1);
  try {
    (void)schedule_options::from_environment();
    ADD_FAILURE() << "an unknown value was accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(variable), std::string::npos) << e.what();
  }
  ::unsetenv(variable);
}

TEST(memory_schedule_test, memweave_schedule_keep_rebuilt_is_read_and_checked) {
  expect_weighed_choice("MEMWEAVE_SCHEDULE_KEEP_REBUILT", "yes", "no",
                        &schedule_options::keep_rebuilt, &schedule_options::keep_rebuilt_auto);
}

TEST(memory_schedule_test, memweave_schedule_conv_mode_is_read_and_checked) {
  expect_weighed_choice("MEMWEAVE_SCHEDULE_CONV_MODE", "mode", "ladder",
                        &schedule_options::conv_mode_workspaces,
                        &schedule_options::conv_mode_workspaces_auto);
}

TEST(memory_schedule_test, memweave_schedule_min_bytes_is_read_and_checked) {
  ::unsetenv("MEMWEAVE_SCHEDULE_MIN_BYTES");
  schedule_options o = schedule_options::from_environment();
  EXPECT_EQ(o.min_bytes, 0u);
  EXPECT_TRUE(o.min_bytes_auto) << "a threshold weighed by default";
  ::setenv("MEMWEAVE_SCHEDULE_MIN_BYTES", "64KiB", 1);
  o = schedule_options::from_environment();
  EXPECT_EQ(o.min_bytes, 65536u);
  EXPECT_FALSE(o.min_bytes_auto);
  ::setenv("MEMWEAVE_SCHEDULE_MIN_BYTES", "0", 1);
  o = schedule_options::from_environment();
  EXPECT_EQ(o.min_bytes, 0u);
  EXPECT_FALSE(o.min_bytes_auto) << "0 set is 0 alone";
  ::setenv("MEMWEAVE_SCHEDULE_MIN_BYTES", "-3", 1);
  try {
    (void)schedule_options::from_environment();
    ADD_FAILURE() << "a negative size was accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("MEMWEAVE_SCHEDULE_MIN_BYTES"), std::string::npos)
        << e.what();
  }
  ::unsetenv("MEMWEAVE_SCHEDULE_MIN_BYTES");
}

schedule_problem random_training(std::mt19937& rng, std::uint32_t layers) {
  schedule_problem p;
  const std::uint32_t steps = 2 * layers;
  std::uniform_real_distribution<double> secs(0.1e-3, 5e-3);
  for (std::uint32_t s = 0; s < steps; ++s) p.step_seconds.push_back(secs(rng));
  std::uniform_int_distribution<std::size_t> mib(1, 64);
  std::bernoulli_distribution coin(0.5);
  for (std::uint32_t l = 0; l < layers; ++l) {
    schedule_tensor t;
    t.bytes = mib(rng) * k_mib;
    t.uses.push_back({l, true});
    if (l + 1 < layers) t.uses.push_back({l + 1, false});
    const std::uint32_t back = steps - 1 - l;
    if (back > t.uses.back().step) t.uses.push_back({back, false});
    if (l > 0 && coin(rng)) {
      t.rebuildable = true;
      t.rebuild_seconds = p.step_seconds[l];
      t.rebuild_touches = {l - 1};
    }
    t.compressible = coin(rng);
    p.tensors.push_back(std::move(t));
  }
  schedule_tensor weights = tensor(8 * k_mib, {0, steps - 1});
  weights.persistent = weights.pinned = true;
  p.tensors.push_back(weights);
  // A middle layer's weights (idle at both ends: parkable) and its momentum (used by the
  // update only).
  const std::uint32_t middle = layers / 2;
  schedule_tensor fc = tensor(mib(rng) * k_mib, {middle, steps - 1 - middle});
  fc.persistent = fc.pinned = fc.parkable = true;
  p.tensors.push_back(fc);
  schedule_tensor momentum = tensor(fc.bytes, {steps - 1 - middle});
  momentum.persistent = momentum.pinned = momentum.parkable = true;
  p.tensors.push_back(momentum);
  p.link_bytes_per_s = 16e9;
  return p;
}

TEST(memory_schedule_test, every_random_schedule_issues_its_copies_in_order_and_in_time) {
  std::mt19937 rng(7);
  std::size_t parks = 0;
  for (int trial = 0; trial < 200; ++trial) {
    schedule_problem p = random_training(rng, 4 + trial % 40);
    // The peak with nothing done, then a budget between the largest step and that.
    p.budget_bytes = std::size_t{1} << 50;
    const memory_schedule none = plan_memory_schedule(p, no_headroom());
    std::size_t largest_step = 0;
    for (std::uint32_t s = 0; s < p.step_seconds.size(); ++s) {
      std::size_t b = 0;
      for (const schedule_tensor& t : p.tensors) {
        for (const schedule_use& u : t.uses) b += u.step == s ? t.bytes : 0;
      }
      largest_step = std::max(largest_step, b);
    }
    std::uniform_real_distribution<double> f(0.0, 1.0);
    p.budget_bytes =
        largest_step + static_cast<std::size_t>(
                           f(rng) * static_cast<double>(none.predicted_peak_bytes - largest_step));
    SCOPED_TRACE("trial " + std::to_string(trial));
    // With and without FP16 compression (half the copy time for compressible tensors), and
    // keeping what replays rebuild early.
    for (const auto& [compress, keep] : {std::pair{false, false}, {true, false}, {false, true}}) {
      SCOPED_TRACE(compress ? "compressed" : "uncompressed");
      SCOPED_TRACE(keep ? "keep_rebuilt" : "");
      schedule_options o = no_headroom();
      o.compress = compress;
      o.keep_rebuilt = keep;
      const memory_schedule s = plan_memory_schedule(p, o);
      std::uint64_t compressed = 0;
      for (const scheduled_gap& g : s.gaps) {
        EXPECT_TRUE(!g.compressed ||
                    (compress && g.action == gap_action::swap && p.tensors[g.tensor].compressible));
        compressed += g.compressed ? p.tensors[g.tensor].bytes : 0;
        if (g.wraps) {
          // Parked: offloaded after its last use, released before a later step of the
          // iteration, prefetched before its first use.
          const schedule_tensor& w = p.tensors[g.tensor];
          EXPECT_TRUE(w.parkable && w.persistent);
          EXPECT_EQ(g.action, gap_action::swap);
          EXPECT_EQ(g.after, w.uses.back().step);
          EXPECT_EQ(g.before, w.uses.front().step);
          EXPECT_LT(g.after, g.release);
          EXPECT_LT(g.release, p.step_seconds.size());
          EXPECT_LT(g.prefetch, g.before);
          ++parks;
          continue;
        }
        ASSERT_LT(g.after, g.before);
        EXPECT_FALSE(p.tensors[g.tensor].pinned);
        if (g.action == gap_action::swap) {
          // Offloaded after its use, released later, prefetched no earlier than released and
          // strictly before the step that needs it.
          EXPECT_LT(g.after, g.release);
          EXPECT_LE(g.release, g.prefetch);
          EXPECT_LT(g.prefetch, g.before);
        }
        EXPECT_TRUE(g.action != gap_action::drop || p.tensors[g.tensor].rebuildable);
      }
      EXPECT_TRUE(!s.fits || s.predicted_peak_bytes <= p.budget_bytes);
      for (std::size_t b : s.bytes_per_step) EXPECT_LE(b, s.predicted_peak_bytes);
      EXPECT_GE(s.predicted_seconds, s.baseline_seconds - 1e-12);
      EXPECT_DOUBLE_EQ(simulate_memory_schedule(p, s), s.predicted_seconds);
      EXPECT_EQ(s.bytes_compressed, compressed);
    }
  }
  EXPECT_GT(parks, 0u);  // the middle layer's weights or momentum were parked somewhere
}

}  // namespace
}  // namespace memweave

namespace memweave {
namespace {

// Four steps of 1 s, a link of 1 byte/s, a 100-byte tensor used at the first and last step
// and 50 bytes used at the two steps between, under a budget of 100: 50 bytes of the first
// must be away at steps 1 and 2.
schedule_problem tiny_overflow() {
  schedule_problem p;
  p.step_seconds.assign(4, 1.0);
  p.tensors.push_back(tensor(100, {0, 3}));
  p.tensors.push_back(tensor(50, {1, 2}));
  p.link_bytes_per_s = 1.0;
  p.budget_bytes = 100;
  return p;
}

TEST(schedule_bound_test, the_way_out_before_a_step_and_the_way_back_after_it_add_up) {
  // 50 of the tensor's bytes must be away at steps 1 and 2. At step 2 they leave between step
  // 0's end and step 2's start (1 s of link, the second it idled before the write does not
  // count) and come back between step 2's start and step 3's (1 s): 49 s more on each side,
  // E = 98. A stall cannot widen both: the way out is over when step 2 starts, the way back
  // not begun (step 1 likewise: 50 s before it, 48 after). A bound that let every second of E
  // widen both windows said 54 s. (The bound's searches stop within 1e-5 of the extra time,
  // on the low side.)
  const schedule_bound b = bound_memory_schedule(tiny_overflow());
  EXPECT_TRUE(b.feasible);
  EXPECT_DOUBLE_EQ(b.baseline_seconds, 4.0);
  EXPECT_LE(b.seconds, 4.0 + 98.0 + 1e-9);
  EXPECT_GE(b.seconds, 4.0 + 98.0 * (1 - 1e-5));
  EXPECT_EQ(b.overflow_bytes, 50u);
}

TEST(schedule_bound_test, a_cheap_rebuild_lowers_the_bound_by_what_it_drops_per_second) {
  // Rebuilding the 100 bytes costs 10 s: A seconds after step 1 starts drop 10·A bytes, and
  // B seconds before it let B bytes out: B + 10·A >= 50 is cheapest at A = 5, B = 0. The
  // replay runs after step 1 (the tensor is away there), so its seconds do not also widen
  // the way out, as a bound that lengthened both windows by all of E (11·E >= 50) let them.
  // The split of E is searched in pieces, each counted at its most: a little under 5.
  schedule_problem p = tiny_overflow();
  p.tensors[0].rebuildable = true;
  p.tensors[0].rebuild_seconds = 10.0;
  const double e = bound_memory_schedule(p).seconds - 4.0;
  EXPECT_GT(e, 4.95);
  EXPECT_LE(e, 5.0 + 1e-9);
}

TEST(schedule_bound_test, a_drop_is_charged_the_least_any_rebuild_of_it_takes) {
  // As above, but a fused replay rebuilds the 100 bytes in 5 s (the plan's own replay takes
  // 10): A seconds drop 20·A bytes, B + 20·A >= 50 at A = 2.5.
  schedule_problem p = tiny_overflow();
  p.tensors[0].rebuildable = true;
  p.tensors[0].rebuild_seconds = 10.0;
  p.tensors[0].least_rebuild_seconds = 5.0;
  const double e = bound_memory_schedule(p).seconds - 4.0;
  EXPECT_GT(e, 2.45);
  EXPECT_LE(e, 2.5 + 1e-9);
}

TEST(schedule_bound_test, a_copy_moves_the_tensors_own_bytes_and_frees_its_rounded_ones) {
  // The 100-byte tensor holds 100 bytes on the device but copies 99 (heap rounding): each
  // link's cut counts the 99 and, whichever cross, the 1 byte of padding more. At step 1 it
  // leaves in B seconds (B + 1 >= 50) and comes back in the 2 s before step 3 plus A
  // (3 + A >= 50): E = 49 + 47; step 2 alike (2 + B, 2 + A): E = 96, two less than
  // copies of all 100 bytes (98).
  schedule_problem p = tiny_overflow();
  p.tensors[0].copy_bytes = 99;
  const schedule_bound b = bound_memory_schedule(p);
  EXPECT_LE(b.seconds, 4.0 + 96.0 + 1e-9);
  EXPECT_GE(b.seconds, 4.0 + 96.0 * (1 - 1e-5));
}

TEST(schedule_bound_test, a_copy_waits_for_the_write_before_it_and_lands_before_the_next_use) {
  // Six steps of 1 s, a link of 10 bytes/s, budget 100. A (100 bytes) is written at step 0,
  // read at 2 and 5; B (50 bytes) is used at steps 3 and 4, where 50 bytes of A must be away.
  // At step 3 they leave in the 2 s from step 0's end (20 bytes) plus B seconds, and come
  // back in the 2 s before step 5 starts plus A: B >= 3, A >= 3, E = 6 (step 4: 3 s out, 1 s
  // back, 2 + 4). Were A written at step 2, at step 3 it could leave only in the B seconds
  // after that write: B >= 5, A >= 3, E = 8.
  schedule_problem p;
  p.step_seconds.assign(6, 1.0);
  p.tensors.push_back(tensor(100, {0, 2, 5}));
  p.tensors.push_back(tensor(50, {3, 4}));
  p.link_bytes_per_s = 10.0;
  p.budget_bytes = 100;
  EXPECT_NEAR(bound_memory_schedule(p).seconds, 6.0 + 6.0, 1e-4);
  p.tensors[0].uses[1].writes = true;
  const schedule_bound b = bound_memory_schedule(p);
  EXPECT_NEAR(b.seconds, 6.0 + 8.0, 1e-4);
  EXPECT_EQ(b.overflow_bytes, 50u);
  // A parameter that is never written (frozen) may stay on the host from an earlier
  // iteration: after its last use it need not cross the link at all.
  p.tensors[0] = tensor(100, {0, 2});
  p.tensors[0].persistent = true;
  p.tensors[0].uses[0].writes = false;
  EXPECT_DOUBLE_EQ(bound_memory_schedule(p).seconds, 6.0);
}

TEST(schedule_bound_test, a_parameter_may_leave_from_its_update_in_the_iteration_before) {
  // A parameter P (100 bytes) read at step 0 and updated at step 5 of six 1-s steps, B (50)
  // at step 1, budget 100, 10 bytes/s. At step 1, 50 bytes of P must be away: written at the
  // end of the iteration before, it has had 1 s of link (10 bytes) plus E (its window spans
  // the iteration's end: every added second widens it): E >= 4. Frozen (never written), only
  // its way back counts: 4 s before step 5 (40 bytes) plus E: E >= 1.
  schedule_problem p;
  p.step_seconds.assign(6, 1.0);
  p.tensors.push_back(tensor(100, {0, 5}));
  p.tensors[0].persistent = true;
  p.tensors[0].uses[0].writes = false;
  p.tensors[0].uses[1].writes = true;
  p.tensors.push_back(tensor(50, {1}));
  p.link_bytes_per_s = 10.0;
  p.budget_bytes = 100;
  EXPECT_NEAR(bound_memory_schedule(p).seconds, 6.0 + 4.0, 1e-4);
  p.tensors[0].uses[1].writes = false;
  EXPECT_NEAR(bound_memory_schedule(p).seconds, 6.0 + 1.0, 1e-4);
}

TEST(schedule_bound_test, nothing_to_move_is_the_baseline_and_an_oversized_step_is_infeasible) {
  schedule_problem p = tiny_overflow();
  p.budget_bytes = 150;
  EXPECT_DOUBLE_EQ(bound_memory_schedule(p).seconds, 4.0);
  p.budget_bytes = 90;  // step 0 uses 100 bytes itself
  const schedule_bound b = bound_memory_schedule(p);
  EXPECT_FALSE(b.feasible);
  EXPECT_EQ(b.step, 0u);
  EXPECT_EQ(b.overflow_bytes, 10u);
}

TEST(schedule_bound_test, a_tensor_in_host_memory_is_away_at_no_cost) {
  // The 100-byte tensor staged at step 1 (in host memory from there to step 3): steps 1 and
  // 2 hold only the 50 bytes, nothing must move.
  schedule_problem p = tiny_overflow();
  p.tensors[0].uses.insert(p.tensors[0].uses.begin() + 1, schedule_use{1, false, true});
  EXPECT_DOUBLE_EQ(bound_memory_schedule(p).seconds, 4.0);
}

TEST(schedule_bound_test, no_random_schedule_that_fits_is_faster_than_the_bound) {
  // The planner's schedules are exact and fit the budget: each is one the bound covers, so
  // its predicted time can never be below it (a bound that claimed too much would fail).
  std::mt19937 rng(11);
  int fitted = 0, binding = 0;
  for (int trial = 0; trial < 200; ++trial) {
    schedule_problem p = random_training(rng, 4 + trial % 40);
    // Slower links make copies that cannot hide, where the bound rises above the baseline.
    p.link_bytes_per_s = std::array{16e9, 2e9, 0.25e9}[trial % 3];
    p.budget_bytes = std::size_t{1} << 50;
    const std::size_t peak = plan_memory_schedule(p, no_headroom()).predicted_peak_bytes;
    std::uniform_real_distribution<double> f(0.3, 1.0);
    p.budget_bytes = static_cast<std::size_t>(f(rng) * static_cast<double>(peak));
    SCOPED_TRACE("trial " + std::to_string(trial));
    const schedule_bound b = bound_memory_schedule(p);
    binding += b.feasible && b.seconds > b.baseline_seconds * (1 + 1e-6);
    for (const double charge : {0.0, 0.5, -1.0}) {
      schedule_options o = no_headroom();
      o.link_charge = charge < 0 ? 0.5 : charge;
      o.keep_rebuilt = charge < 0;  // -1: at 0.5, keeping what replays rebuild early
      const memory_schedule s = plan_memory_schedule(p, o);
      if (!s.fits) continue;
      ++fitted;
      ASSERT_TRUE(b.feasible);
      EXPECT_LE(b.seconds, s.predicted_seconds * (1 + 1e-9));
      EXPECT_GE(b.seconds, s.baseline_seconds - 1e-12);
    }
  }
  EXPECT_GT(fitted, 100);
  EXPECT_GT(binding, 20);  // the bound says more than "no faster than nothing moved"
}

}  // namespace
}  // namespace memweave
