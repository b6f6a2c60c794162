// The recomputation planner: a hand-checked chain under each strategy; residency and
// memory checks on every zoo network and on random DAGs; cost-aware's peak against max(l_i)
// at full size; the paper's Table 1 counts; planning time on a 10^4-layer ResNet.
#include "memweave/recompute/recompute_plan.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "memweave/core/error.hpp"
#include "memweave/engine/zoo.hpp"
#include "recompute/recompute_fixtures.hpp"

namespace memweave {
namespace {

using test::adapter_options;
using test::check_plan;
using test::engine_graph;

const char* const zoo[] = {"alexnet",   "vgg16",        "resnet50",   "resnet101",
                           "resnet152", "inception_v4", "densenet121"};
const recompute_strategy strategies[] = {recompute_strategy::speed_centric,
                                         recompute_strategy::memory_centric,
                                         recompute_strategy::cost_aware};

recompute_plan plan_of(const recompute_graph& g, recompute_strategy s, bool fans = true) {
  recompute_options o;
  o.strategy = s;
  o.fan_checkpoints = fans;
  return recompute_plan(g, o);
}

std::vector<recompute_key> keys(std::span<const recompute_key> s) {
  return {s.begin(), s.end()};
}
using kv = std::vector<recompute_key>;

std::vector<recompute_pos> replayed_layers(const recompute_plan& p, recompute_pos step) {
  std::vector<recompute_pos> v;
  for (const replay_action& a : p.replays(p.backward(step))) v.push_back(a.layer);
  return v;
}
using pv = std::vector<recompute_pos>;

// ---------------------------------------------------------------------------------------------
// A chain checked by hand. Positions (tensor key = 10 * position, bytes in brackets):
//   0 data [100] ckpt      lf 100 lb   0
//   1 conv1 [100] ckpt     lf 200 lb 300   backward reads 0
//   2 a [100]              lf 200 lb 300   backward reads 10 (its input, as in the paper's
//   3 b [100]              lf 200 lb 300                      Fig. 9)
//   4 c [100]              lf 200 lb 300
//   5 conv2 [10] ckpt      lf 110 lb 210   reads 40
//   6 d [10]               lf  20 lb  30
//   7 e [10]               lf  20 lb  30
//   8 fc [10] ckpt         lf  20 lb  30   reads 70
//   9 loss [10]            lf  20 lb  20   reads its own output 90 (no gap: kept)
// Segments {a,b,c} (cost 600 + 300 > l_peak = 300: memory-centric under cost_aware) and
// {d,e} (cost 40 + 30: speed-centric), and {loss} (nothing dropped).
recompute_graph hand_chain() {
  struct row {
    const char* name;
    bool ckpt;
    std::size_t bytes, lf, lb;
  };
  const row rows[] = {{"data", true, 100, 100, 0}, {"conv1", true, 100, 200, 300},
                      {"a", false, 100, 200, 300}, {"b", false, 100, 200, 300},
                      {"c", false, 100, 200, 300}, {"conv2", true, 10, 110, 210},
                      {"d", false, 10, 20, 30},    {"e", false, 10, 20, 30},
                      {"fc", true, 10, 20, 30},    {"loss", false, 10, 20, 20}};
  recompute_graph g;
  for (std::size_t p = 0; p < std::size(rows); ++p) {
    recompute_layer l;
    l.id = 100 + p;
    l.name = rows[p].name;
    l.checkpoint = rows[p].ckpt;
    if (p > 0) l.forward_reads = {10 * (p - 1)};
    l.produces = {{10 * p, rows[p].bytes, false}};
    if (p > 0 && p < 9) l.backward_reads = {10 * (p - 1)};
    if (p == 9) l.backward_reads = {90};
    l.forward_bytes = rows[p].lf;
    l.backward_bytes = rows[p].lb;
    g.layers.push_back(l);
  }
  return g;
}

TEST(recompute_plan_test, chain_drops_and_segments_follow_the_checkpoints) {
  const recompute_graph g = hand_chain();
  const recompute_plan p = plan_of(g, recompute_strategy::speed_centric);
  EXPECT_EQ(keys(p.drops_after_forward(3)), kv{20});
  EXPECT_EQ(keys(p.drops_after_forward(4)), kv{30});
  EXPECT_EQ(keys(p.drops_after_forward(5)), kv{40});
  EXPECT_EQ(keys(p.drops_after_forward(7)), kv{60});
  EXPECT_EQ(keys(p.drops_after_forward(8)), kv{70});
  for (recompute_pos q : {0u, 1u, 2u, 6u, 9u}) EXPECT_TRUE(p.drops_after_forward(q).empty());
  EXPECT_EQ(p.dropped_bytes(), 320u);
  EXPECT_EQ(p.find(90)->fate, tensor_fate::kept);  // read by the very next step
  EXPECT_EQ(p.find(80)->fate, tensor_fate::transient);
  EXPECT_EQ(p.find(50)->fate, tensor_fate::kept);
  EXPECT_EQ(p.find(50)->last_use, 6u);
  EXPECT_EQ(p.find(10)->last_use, 2u);
  EXPECT_EQ(p.find(20)->fate, tensor_fate::dropped);
  EXPECT_EQ(p.find(20)->last_use, 3u);
  ASSERT_EQ(p.segments().size(), 3u);
  EXPECT_EQ(p.segments()[0].layers, pv({2, 3, 4}));
  EXPECT_EQ(p.segments()[0].dropped, kv({20, 30, 40}));
  EXPECT_EQ(p.segments()[0].first_need, 5u);
  EXPECT_EQ(p.segments()[0].last_need, 3u);
  EXPECT_EQ(p.segments()[0].rebuild_forward_bytes, 600u);
  EXPECT_EQ(p.segments()[0].trigger_backward_bytes, 210u);  // conv2's l^b
  EXPECT_EQ(p.segments()[0].window_backward_bytes, 300u);
  EXPECT_EQ(p.segments()[0].speed_cost(), 810u);
  EXPECT_EQ(p.segments()[1].layers, pv({6, 7}));
  EXPECT_EQ(p.segments()[1].speed_cost(), 70u);
  EXPECT_EQ(p.segments()[2].layers, pv({9}));
  EXPECT_TRUE(p.segments()[2].dropped.empty());
  EXPECT_EQ(p.segment_of(3), 0u);
  EXPECT_EQ(p.segment_of(5), no_position);
  EXPECT_EQ(p.max_layer_bytes(), 300u);
}

TEST(recompute_plan_test, speed_centric_rebuilds_a_segment_once_and_frees_after_last_reader) {
  const recompute_graph g = hand_chain();
  const recompute_plan p = plan_of(g, recompute_strategy::speed_centric);
  EXPECT_EQ(replayed_layers(p, 5), pv({2, 3, 4}));
  const auto r5 = p.replays(p.backward(5));
  EXPECT_EQ(keys(p.rebuilds(r5[0])), kv{20});
  EXPECT_EQ(keys(p.rebuilds(r5[2])), kv{40});
  for (const replay_action& a : r5) EXPECT_TRUE(p.frees(a).empty());
  EXPECT_EQ(keys(p.frees(p.backward(5))), kv{40});
  EXPECT_EQ(keys(p.frees(p.backward(4))), kv{30});
  EXPECT_EQ(keys(p.frees(p.backward(3))), kv{20});
  EXPECT_EQ(replayed_layers(p, 8), pv({6, 7}));
  EXPECT_EQ(keys(p.frees(p.backward(8))), kv{70});
  EXPECT_EQ(keys(p.frees(p.backward(7))), kv{60});
  for (recompute_pos q : {0u, 1u, 2u, 3u, 4u, 6u, 7u, 9u})
    EXPECT_TRUE(replayed_layers(p, q).empty());
  EXPECT_EQ(p.extra_forwards(), 5u);  // one per cheap layer with a dropped tensor
  // conv2's backward: lb 210 + held {20, 30, 40} 300 - its read 40 (100) = 410.
  EXPECT_EQ(p.peak_bytes(), 410u);
  EXPECT_EQ(p.peak().layer, 5u);
  EXPECT_TRUE(p.peak().backward);
  EXPECT_EQ(p.peak().replay, recompute_peak::no_replay);
  EXPECT_EQ(p.backward(5).held_bytes, 300u);
  EXPECT_EQ(check_plan(g, p), 410u);
}

TEST(recompute_plan_test, speed_centric_can_hold_to_the_segment_end_as_the_paper_does) {
  const recompute_graph g = hand_chain();
  recompute_options o;
  o.strategy = recompute_strategy::speed_centric;
  o.speed_holds_to_segment_end = true;
  const recompute_plan p(g, o);
  EXPECT_EQ(replayed_layers(p, 5), pv({2, 3, 4}));
  EXPECT_TRUE(p.frees(p.backward(5)).empty());
  EXPECT_TRUE(p.frees(p.backward(4)).empty());
  EXPECT_EQ(keys(p.frees(p.backward(3))), kv({20, 30, 40}));
  EXPECT_EQ(p.extra_forwards(), 5u);
  // c's backward: lb 300 + held 300 - its read 30 (100) = 500.
  EXPECT_EQ(p.peak_bytes(), 500u);
  EXPECT_EQ(check_plan(g, p), 500u);
}

TEST(recompute_plan_test, memory_centric_rebuilds_for_each_step_and_frees_right_after) {
  const recompute_graph g = hand_chain();
  const recompute_plan p = plan_of(g, recompute_strategy::memory_centric);
  EXPECT_EQ(replayed_layers(p, 5), pv({2, 3, 4}));
  EXPECT_EQ(replayed_layers(p, 4), pv({2, 3}));
  EXPECT_EQ(replayed_layers(p, 3), pv({2}));
  EXPECT_EQ(replayed_layers(p, 8), pv({6, 7}));
  EXPECT_EQ(replayed_layers(p, 7), pv({6}));
  const auto r5 = p.replays(p.backward(5));
  EXPECT_TRUE(p.frees(r5[0]).empty());
  EXPECT_EQ(keys(p.frees(r5[1])), kv{20});  // intermediates go after their last reader
  EXPECT_EQ(keys(p.frees(r5[2])), kv{30});
  EXPECT_EQ(keys(p.frees(p.backward(5))), kv{40});
  EXPECT_EQ(keys(p.frees(p.backward(4))), kv{30});
  EXPECT_EQ(keys(p.frees(p.backward(3))), kv{20});
  EXPECT_EQ(p.extra_forwards(), 9u);  // n(n+1)/2 per segment: 6 + 3
  EXPECT_EQ(p.peak_bytes(), 300u);    // = max l_i
  EXPECT_EQ(check_plan(g, p), 300u);
}

TEST(recompute_plan_test, cost_aware_picks_per_segment_by_its_memcost) {
  const recompute_graph g = hand_chain();
  const recompute_plan p = plan_of(g, recompute_strategy::cost_aware);
  EXPECT_EQ(p.segments()[0].mode, segment_mode::memory_centric);
  EXPECT_EQ(p.segments()[1].mode, segment_mode::speed_centric);
  EXPECT_EQ(p.speed_segments(), 1u);
  EXPECT_EQ(p.memory_segments(), 1u);
  EXPECT_EQ(replayed_layers(p, 4), pv({2, 3}));
  EXPECT_EQ(replayed_layers(p, 8), pv({6, 7}));
  EXPECT_TRUE(replayed_layers(p, 7).empty());
  EXPECT_EQ(p.extra_forwards(), 8u);  // 6 + 2
  EXPECT_EQ(p.peak_bytes(), 300u);
  EXPECT_EQ(p.threshold_bytes(), 300u);
  EXPECT_EQ(check_plan(g, p), 300u);
  // A threshold large enough for the big segment makes cost_aware speed-centric throughout.
  recompute_options o;
  o.threshold_bytes = 900;
  const recompute_plan wide(g, o);
  EXPECT_EQ(wide.extra_forwards(), 5u);
  EXPECT_EQ(wide.peak_bytes(), 410u);
}

TEST(recompute_plan_test, rebuild_order_replays_from_what_is_resident) {
  const recompute_graph g = hand_chain();
  const recompute_plan p = plan_of(g, recompute_strategy::cost_aware);
  const kv want{40};
  EXPECT_EQ(p.rebuild_order(want), pv({2, 3, 4}));
  EXPECT_EQ(p.rebuild_order(want, [](recompute_key k) { return k == 30; }), pv({4}));
  EXPECT_EQ(p.rebuild_order(want, [](recompute_key k) { return k == 40; }), pv{});
  const kv kept{10};
  EXPECT_TRUE(p.rebuild_order(kept).empty());
  EXPECT_THROW(p.rebuild_order(kv{12345}), invalid_argument);
  EXPECT_THROW(p.rebuild_order(kv{80}), invalid_argument);  // transient
}

TEST(recompute_plan_test, describe_lists_segments_drops_and_replays) {
  const recompute_plan p = plan_of(hand_chain(), recompute_strategy::cost_aware);
  const std::string d = p.describe();
  for (const char* part : {"cost_aware", "8 extra forwards", "segment 0 (memory_centric",
                           "segment 1 (speed_centric", "forward b: drop a#20",
                           "backward conv2: replay a; replay b (free a#20); replay c (free b#30); "
                           "run (free c#40)"})
    EXPECT_NE(d.find(part), std::string::npos) << part << " missing from:\n" << d;
}

TEST(recompute_plan_test, bad_graphs_are_rejected_with_the_layer_and_key) {
  auto message = [](const recompute_graph& g) -> std::string {
    try {
      recompute_plan p(g);
    } catch (const invalid_argument& e) {
      return e.what();
    }
    return "(no exception)";
  };
  EXPECT_NE(message(recompute_graph{}).find("no layers"), std::string::npos);
  recompute_graph g = hand_chain();
  g.layers[3].forward_reads = {40};  // produced later
  std::string m = message(g);
  EXPECT_NE(m.find("layer 'b'"), std::string::npos) << m;
  EXPECT_NE(m.find("key 40"), std::string::npos) << m;
  EXPECT_NE(m.find("route order"), std::string::npos) << m;
  g = hand_chain();
  g.layers[4].produces[0].key = 20;
  m = message(g);
  EXPECT_NE(m.find("produces tensor key 20"), std::string::npos) << m;
  g = hand_chain();
  g.layers[4].backward_reads = {777};
  m = message(g);
  EXPECT_NE(m.find("key 777 in its backward"), std::string::npos) << m;
  g = hand_chain();
  g.layers[4].forward_cost = -1;
  m = message(g);
  EXPECT_NE(m.find("forward cost"), std::string::npos) << m;
  EXPECT_THROW(parse_recompute_strategy("fast"), invalid_argument);
  EXPECT_EQ(parse_recompute_strategy("memory"), recompute_strategy::memory_centric);
  EXPECT_STREQ(to_string(recompute_strategy::cost_aware), "cost_aware");
}

TEST(recompute_plan_test, keep_marked_tensors_are_never_dropped) {
  recompute_graph g = hand_chain();
  g.layers[3].produces[0].keep = true;  // b's output: splits {a,b,c}'s rebuilds at b
  const recompute_plan p = plan_of(g, recompute_strategy::memory_centric);
  EXPECT_EQ(p.find(30)->fate, tensor_fate::kept);
  EXPECT_TRUE(p.drops_after_forward(4).empty());
  EXPECT_EQ(replayed_layers(p, 5), pv({4}));  // c from the kept b
  EXPECT_TRUE(replayed_layers(p, 4).empty());
  EXPECT_EQ(replayed_layers(p, 3), pv({2}));
  check_plan(g, p);
}

// Two cheap layers on two branches, both rebuilt for a join's backward: each alone fits the
// formula (Σ l^f 60 + the join's l^b 120 = 180 <= l_peak 200), but a's rebuilt output is
// still held when b's backward runs (200 + 50 > 200). cost_aware must notice by simulation
// and switch a's segment to memory-centric.
//   0 data ckpt [10]; 1 convA ckpt [10]; 2 convB ckpt [10]; 3 a [50] reads 10; 4 b [50]
//   reads 20; 5 join ckpt [10] reads 30, 40, its backward too; 6 loss [10].
recompute_graph overlapping_branches() {
  recompute_graph g;
  auto add = [&](const char* name, bool ckpt, std::vector<recompute_key> in, recompute_key out,
                 std::size_t bytes, std::vector<recompute_key> bwd, std::size_t lf,
                 std::size_t lb) {
    recompute_layer l;
    l.id = g.layers.size();
    l.name = name;
    l.checkpoint = ckpt;
    l.forward_reads = std::move(in);
    l.produces = {{out, bytes, false}};
    l.backward_reads = std::move(bwd);
    l.forward_bytes = lf;
    l.backward_bytes = lb;
    g.layers.push_back(std::move(l));
  };
  add("data", true, {}, 0, 10, {}, 10, 0);
  add("convA", true, {0}, 10, 10, {0}, 30, 40);
  add("convB", true, {0}, 20, 10, {0}, 30, 40);
  add("a", false, {10}, 30, 50, {30}, 60, 200);
  add("b", false, {20}, 40, 50, {40}, 60, 200);
  add("join", true, {30, 40}, 50, 10, {30, 40}, 110, 120);
  add("loss", false, {50}, 60, 10, {60}, 20, 20);
  return g;
}

TEST(recompute_plan_test, cost_aware_switches_segments_whose_holding_windows_overlap) {
  const recompute_graph g = overlapping_branches();
  const recompute_plan speed = plan_of(g, recompute_strategy::speed_centric);
  EXPECT_EQ(speed.peak_bytes(), 250u);  // b's backward with a's output held
  EXPECT_EQ(speed.peak().layer, 4u);
  check_plan(g, speed);
  const recompute_plan p = plan_of(g, recompute_strategy::cost_aware);
  ASSERT_EQ(p.segments().size(), 3u);
  EXPECT_EQ(p.segments()[0].layers, pv{3});
  EXPECT_LE(p.segments()[0].speed_cost(), p.threshold_bytes());   // the formula says speed...
  EXPECT_EQ(p.segments()[0].mode, segment_mode::memory_centric);  // ...the simulation did not
  EXPECT_EQ(p.segments()[1].mode, segment_mode::speed_centric);
  EXPECT_EQ(replayed_layers(p, 5), pv({3, 4}));
  EXPECT_TRUE(replayed_layers(p, 4).empty());
  EXPECT_EQ(replayed_layers(p, 3), pv{3});
  EXPECT_EQ(p.extra_forwards(), 3u);
  EXPECT_EQ(p.peak_bytes(), 200u);
  EXPECT_EQ(check_plan(g, p), 200u);
}

// ---------------------------------------------------------------------------------------------
// The zoo and random DAGs.

zoo_options small(const char* name) {
  zoo_options o;
  o.batch = 2;
  o.width_scale = 0.0625;
  o.image_side = std::max<std::int64_t>(32, zoo_min_side(name));
  o.classes = 10;
  return o;
}

void check_all_strategies(const recompute_graph& g, const std::string& what, bool fans) {
  const recompute_plan speed = plan_of(g, recompute_strategy::speed_centric, fans);
  const recompute_plan memory = plan_of(g, recompute_strategy::memory_centric, fans);
  const recompute_plan cost = plan_of(g, recompute_strategy::cost_aware, fans);
  SCOPED_TRACE(what + (fans ? " (fan checkpoints)" : " (no fan checkpoints)"));
  check_plan(g, speed);
  check_plan(g, memory);
  check_plan(g, cost);
  EXPECT_LE(memory.peak_bytes(), speed.peak_bytes());
  EXPECT_LE(cost.peak_bytes(), speed.peak_bytes());
  EXPECT_LE(speed.extra_forwards(), cost.extra_forwards());
  EXPECT_LE(cost.extra_forwards(), memory.extra_forwards());
  EXPECT_GT(speed.dropped_bytes(), 0u);
}

TEST(recompute_plan_test, every_read_is_resident_on_every_zoo_network) {
  for (const char* name : zoo)
    for (bool fans : {true, false}) {
      const engine_graph e(make_network(name, small(name)));
      check_all_strategies(e.graph, name, fans);
    }
}

TEST(recompute_plan_test, every_read_is_resident_on_random_dags) {
  for (std::uint64_t seed = 1; seed <= 40; ++seed)
    for (bool all_types : {false, true}) {
      random_dag_options o;
      o.seed = seed;
      o.layers = 20 + seed % 4 * 15;
      o.stages = 1 + seed % 3;
      o.all_types = all_types;
      const engine_graph e(make_random_dag(o));
      for (bool fans : {true, false})
        check_all_strategies(e.graph, "random dag seed " + std::to_string(seed), fans);
    }
}

TEST(recompute_plan_test, keeping_bn_statistics_is_planned_correctly) {
  for (const char* name : {"resnet50", "inception_v4", "densenet121"}) {
    adapter_options a;
    a.keep_bn_stats = true;
    const engine_graph e(make_network(name, small(name)), a);
    check_all_strategies(e.graph, name, true);
  }
}

zoo_options full(const char* name) {
  zoo_options o;
  o.batch = std::string(name) == "alexnet" ? 200 : 32;
  return o;
}

TEST(recompute_plan_test, cost_aware_peak_is_max_layer_memory_at_full_size) {
  for (const char* name : zoo) {
    const engine_graph e(make_network(name, full(name)));
    const recompute_plan p = plan_of(e.graph, recompute_strategy::cost_aware);
    check_plan(e.graph, p);
    EXPECT_EQ(p.max_layer_bytes(), e.mem.max_layer_bytes()) << name;
    EXPECT_LE(static_cast<double>(p.peak_bytes()), 1.02 * static_cast<double>(p.max_layer_bytes()))
        << name << "\n"
        << p.describe().substr(0, 2000);
    const recompute_plan speed = plan_of(e.graph, recompute_strategy::speed_centric);
    const recompute_plan memory = plan_of(e.graph, recompute_strategy::memory_centric);
    std::printf(
        "%-13s max l_i %9.2f MiB  peak speed %9.2f  memory %9.2f  cost-aware %9.2f MiB"
        "  extra %4zu / %4zu / %4zu\n",
        name, p.max_layer_bytes() / 1048576.0, speed.peak_bytes() / 1048576.0,
        memory.peak_bytes() / 1048576.0, p.peak_bytes() / 1048576.0, speed.extra_forwards(),
        memory.extra_forwards(), p.extra_forwards());
  }
}

// Table 1 of the paper (extra forwards, speed / memory / cost-aware): AlexNet 14 / 23 / 17,
// ResNet-50 84 / 118 / 85, ResNet-101 169 / 237 / 170. The paper's analysis (Fig. 9) has each
// backward step read only its input; with that reading our AlexNet gives Table 1 exactly. With
// the tensor table's real reads (max POOL and LRN read x and y, ACT its y, DROPOUT its mask,
// BN its saved statistics), memory-centric rebuilds more:
//   AlexNet: speed 14 = every cheap layer but SOFTMAX (its output is read right away), once.
//     memory: per [RELU LRN POOL] 3 (next CONV) + 3 (POOL: x, y) + 2 (LRN: x, y) + 1 (RELU)
//     = 9, twice; RELU3, RELU4 2 each; [RELU5 POOL5], [RELU6 DROPOUT1], [RELU7 DROPOUT2] 5
//     each: 37. cost-aware: only the LRN1 segment (which holds l_peak) goes memory-centric:
//     14 - 3 + 9 = 20 (paper reads: 14 - 3 + 6 = 17).
//   ResNet (fan checkpoints: each block's output RELU is kept): speed 5 per block (BN, RELU,
//     BN, RELU, and the third BN for its statistics), 1 per projection BN, 2 for the stem
//     (BN, RELU; POOL1 is a fan), 3 for the head (the last block's ADD and RELU, and POOL5:
//     the last block's output is no fan). ResNet-50: 80 + 4 + 2 + 3 = 89; ResNet-101:
//     165 + 4 + 2 + 3 = 174 (the paper: 84 and 169, i.e. 5 per block + 4, without our stem
//     and head layers). memory: 11 per block ([BN RELU] x2: 2 + 2 + 1 each; third BN 1),
//     4 projections, stem 5, head 7: 192 and 379. cost-aware: the stem's and res3a's first
//     [BN RELU] segments exceed l_peak: speed + 3 + 3.
TEST(recompute_plan_test, extra_forwards_reproduce_table_1) {
  struct row {
    const char* name;
    std::int64_t batch;
    bool paper_reads;
    std::size_t speed, memory, cost;
  };
  const row rows[] = {
      {"alexnet", 200, true, 14, 23, 17},
      {"alexnet", 200, false, 14, 37, 20},
      {"resnet50", 32, false, 89, 192, 95},
      {"resnet101", 32, false, 174, 379, 180},
  };
  for (const row& r : rows) {
    zoo_options o;
    o.batch = r.batch;
    adapter_options a;
    a.paper_reads = r.paper_reads;
    const engine_graph e(make_network(r.name, o), a);
    const recompute_plan speed = plan_of(e.graph, recompute_strategy::speed_centric);
    const recompute_plan memory = plan_of(e.graph, recompute_strategy::memory_centric);
    const recompute_plan cost = plan_of(e.graph, recompute_strategy::cost_aware);
    EXPECT_EQ(speed.extra_forwards(), r.speed) << r.name << (r.paper_reads ? " (paper reads)" : "");
    EXPECT_EQ(memory.extra_forwards(), r.memory) << r.name;
    EXPECT_EQ(cost.extra_forwards(), r.cost) << r.name;
    EXPECT_EQ(memory.peak_bytes(), memory.max_layer_bytes()) << r.name;
    EXPECT_EQ(cost.peak_bytes(), cost.max_layer_bytes()) << r.name;
    std::printf(
        "%-9s %-11s extra speed %3zu memory %3zu cost-aware %3zu; peak MiB speed %.3f "
        "memory %.3f cost-aware %.3f\n",
        r.name, r.paper_reads ? "paper reads" : "real reads", speed.extra_forwards(),
        memory.extra_forwards(), cost.extra_forwards(), speed.peak_bytes() / 1048576.0,
        memory.peak_bytes() / 1048576.0, cost.peak_bytes() / 1048576.0);
  }
  // AlexNet's l_peak is the paper's 886.23 MiB (LRN1's backward at batch 200).
  zoo_options o;
  o.batch = 200;
  const engine_graph e(make_network("alexnet", o));
  EXPECT_NEAR(plan_of(e.graph, recompute_strategy::cost_aware).max_layer_bytes() / 1048576.0,
              886.23, 0.005);
}

TEST(recompute_plan_test, fan_checkpoints_keep_memory_centric_linear_in_resnet_depth) {
  // ResNet-101 has 17 blocks more than ResNet-50, all in stage 4.
  auto extra = [](const char* name, bool fans) {
    const engine_graph e(make_network(name, small(name)));
    return plan_of(e.graph, recompute_strategy::memory_centric, fans).extra_forwards();
  };
  EXPECT_EQ(extra("resnet101", true) - extra("resnet50", true), 17u * 11u);
  // Without them, identity shortcuts chain a stage into one segment: each rebuild re-runs
  // the stage from its start, so the count grows with the square of the stage's depth.
  EXPECT_GT(extra("resnet101", false) - extra("resnet50", false), 17u * 11u * 5u);
}

TEST(recompute_plan_test, plans_a_resnet_of_ten_thousand_layers_quickly) {
  zoo_options o;
  o.batch = 2;
  o.image_side = 32;
  o.width_scale = 0.0625;
  o.classes = 10;
  const auto t0 = std::chrono::steady_clock::now();
  const engine_graph e(make_resnet({3, 4, 993, 3}, o));
  const auto t1 = std::chrono::steady_clock::now();
  ASSERT_GE(e.graph.layers.size(), 10000u);
  for (recompute_strategy s : strategies) {
    const auto a = std::chrono::steady_clock::now();
    const recompute_plan p = plan_of(e.graph, s);
    const auto b = std::chrono::steady_clock::now();
    check_plan(e.graph, p);
    std::printf(
        "%zu-layer resnet: %-14s planned in %7.2f ms, %6zu extra forwards, peak/max l_i "
        "%.4f\n",
        e.graph.layers.size(), to_string(s),
        std::chrono::duration<double, std::milli>(b - a).count(), p.extra_forwards(),
        static_cast<double>(p.peak_bytes()) / static_cast<double>(p.max_layer_bytes()));
  }
  std::printf("(building the network, route, tensor table and graph took %.2f ms)\n",
              std::chrono::duration<double, std::milli>(t1 - t0).count());
}

}  // namespace
}  // namespace memweave
