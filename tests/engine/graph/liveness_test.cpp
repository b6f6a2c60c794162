// liveness: intervals, in/out sets, the baseline and liveness plans, and the paper's §3.2
// cost model on a network built so its assumptions hold.
#include "memweave/engine/liveness.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "graph_fixtures.hpp"
#include "memweave/engine/layer_memory.hpp"
#include "memweave/engine/zoo.hpp"
#include "plan_checks.hpp"

namespace memweave {
namespace {

struct analysed {
  network net;
  route r;
  tensor_table t;
  liveness lv;
  explicit analysed(network n) : net(std::move(n)), r(net), t(net, r), lv(t) {}
  tensor_id id(const std::string& name) const {
    for (const tensor_info& i : t.tensors())
      if (i.name == name) return i.id;
    ADD_FAILURE() << "no tensor " << name;
    return invalid_tensor;
  }
  std::size_t fwd(const char* layer) const { return r.forward_step(net.find(layer).value()); }
  std::size_t bwd(const char* layer) const { return r.backward_step(net.find(layer).value()); }
};

// data -> conv -> relu -> fc -> loss
network make_chain() {
  network_builder b("chain");
  auto x = b.data({4, 3, 8, 8}, 5, "data");
  auto c = b.conv(x, test::conv3x3(6), "conv");
  auto r = b.relu(c, "relu");
  auto f = b.fc(r, fc_params{5, true}, "fc");
  b.softmax_loss(f, "loss");
  return std::move(b).build();
}

TEST(liveness_test, tensors_live_from_first_write_to_last_read) {
  analysed a(make_chain());
  // The conv's output is read by the relu's forward only: ACT's backward reads y, CONV's
  // backward reads x. So it dies right after the relu forward.
  EXPECT_EQ(a.lv.first_use(a.id("conv.y")), a.fwd("conv"));
  EXPECT_EQ(a.lv.last_use(a.id("conv.y")), a.fwd("relu"));
  // The images are read again by the conv's backward (dW = dy x^T).
  EXPECT_EQ(a.lv.last_use(a.id("data.y")), a.bwd("conv"));
  // The relu output: fc forward, fc backward (x), relu backward (y).
  EXPECT_EQ(a.lv.last_use(a.id("relu.y")), a.bwd("relu"));
  // Labels: made at step 0, last read by the loss's backward.
  EXPECT_EQ(a.lv.first_use(a.id("data.labels")), 0u);
  EXPECT_EQ(a.lv.last_use(a.id("data.labels")), a.bwd("loss"));
  // Gradients: written by the consumer's backward, read by the owner's backward.
  EXPECT_EQ(a.lv.first_use(a.id("relu.dy")), a.bwd("fc"));
  EXPECT_EQ(a.lv.last_use(a.id("relu.dy")), a.bwd("relu"));
  auto dies = a.lv.dies_after(a.fwd("relu"));
  EXPECT_NE(std::find(dies.begin(), dies.end(), a.id("conv.y")), dies.end());
  // The out set of the relu forward lacks conv.y; its in set has it.
  auto in = a.lv.in_set(a.fwd("relu")), out = a.lv.out_set(a.fwd("relu"));
  EXPECT_NE(std::find(in.begin(), in.end(), a.id("conv.y")), in.end());
  EXPECT_EQ(std::find(out.begin(), out.end(), a.id("conv.y")), out.end());
  // Empty in set at step 0 and empty out set at the last step, as in Fig. 4.
  EXPECT_TRUE(a.lv.in_set(0).empty());
  EXPECT_TRUE(a.lv.out_set(a.t.step_count() - 1).empty());
  test::check_sets(a.t, a.lv, "chain");
}

TEST(liveness_test, plans_keep_every_touched_tensor_resident_and_count_exactly) {
  analysed a(make_chain());
  for (memory_policy p : {memory_policy::baseline, memory_policy::liveness})
    test::check_plan(a.t, a.lv.plan(p), "chain");
  for (bool c_first : {true, false}) {
    analysed f(test::make_fig6(c_first));
    test::check_sets(f.t, f.lv, "fig6");
    for (memory_policy p : {memory_policy::baseline, memory_policy::liveness})
      test::check_plan(f.t, f.lv.plan(p), "fig6");
  }
}

TEST(liveness_test, baseline_allocates_everything_at_start_and_frees_at_end) {
  analysed a(make_chain());
  memory_plan b = a.lv.plan(memory_policy::baseline);
  std::size_t transient = 0;
  for (const tensor_info& i : a.t.tensors())
    if (!i.persistent && i.bytes > 0) ++transient;
  EXPECT_EQ(b.steps.front().allocate.size(), transient);
  EXPECT_EQ(b.steps.back().free.size(), transient);
  for (const step_plan& s : b.steps) {
    EXPECT_EQ(s.bytes_live, a.t.transient_bytes() + a.t.persistent_bytes());
    EXPECT_EQ(s.transient_bytes_live, a.t.transient_bytes());
  }
  EXPECT_EQ(b.peak_bytes, a.t.transient_bytes() + a.t.persistent_bytes());
  EXPECT_EQ(b.peak_step, 0u);
  memory_plan l = a.lv.plan(memory_policy::liveness);
  EXPECT_LT(l.peak_bytes, b.peak_bytes);
  EXPECT_EQ(l.persistent, b.persistent);
}

TEST(liveness_test, zero_byte_workspaces_are_left_out_until_sized) {
  analysed a(make_chain());
  const tensor_id ws = a.t.of(a.net.find("conv").value()).fwd_workspace;
  memory_plan before = a.lv.plan(memory_policy::liveness);
  for (const step_plan& s : before.steps)
    EXPECT_EQ(std::count(s.allocate.begin(), s.allocate.end(), ws), 0);
  a.t.set_workspace_bytes(ws, 1 << 20);
  memory_plan after = a.lv.plan(memory_policy::liveness);
  const std::size_t s = a.fwd("conv");
  EXPECT_EQ(std::count(after.steps[s].allocate.begin(), after.steps[s].allocate.end(), ws), 1);
  EXPECT_EQ(std::count(after.steps[s].free.begin(), after.steps[s].free.end(), ws), 1);
  EXPECT_EQ(after.steps[s].bytes_live, before.steps[s].bytes_live + (1 << 20));
  EXPECT_EQ(after.steps[s + 1].bytes_live, before.steps[s + 1].bytes_live);
  test::check_plan(a.t, after, "chain with workspace");
}

// The paper's §3.2 model on a chain where every forward output is read by a backward step
// (footnote 2's simplification) and every activation has the same size.
TEST(liveness_test, paper_cost_model_holds_on_a_chain_that_meets_its_assumptions) {
  const int k = 6;
  analysed a(test::make_lrn_chain(k));
  layer_memory lm(a.t);
  memory_plan base = a.lv.plan(memory_policy::baseline);
  memory_plan live = a.lv.plan(memory_policy::liveness);
  test::check_plan(a.t, base, "lrn chain");
  test::check_plan(a.t, live, "lrn chain");

  // Baseline: sum over layers of what each forward and backward step makes.
  EXPECT_EQ(base.peak_bytes - base.persistent_bytes, lm.new_baseline_bytes());
  // Liveness: Σ n_i^f + n_N^b, reached at the loss's backward (step N).
  EXPECT_EQ(live.peak_bytes - live.persistent_bytes, lm.new_liveness_bytes());
  EXPECT_EQ(live.steps[a.bwd("loss")].transient_bytes_live, lm.new_liveness_bytes());

  // cost_k^f = Σ_{i<=k} n_i^f at every forward step (nothing dies in the forward pass)...
  const auto order = a.r.order();
  std::size_t sum_f = 0;
  for (std::size_t s = 0; s < order.size(); ++s) {
    sum_f += lm.of(order[s]).forward_new_bytes;
    EXPECT_EQ(live.steps[s].transient_bytes_live, sum_f) << "forward step " << s;
  }
  // ...and cost_k^b = Σ_{i<=k} n_i^f + l_k^b(gradients) at each LRN's backward: the
  // forward results of the layers after k are gone, its dy and dx are live.
  for (int i = 1; i <= k; ++i) {
    const std::string name = "lrn" + std::to_string(i);
    const layer_id id = a.net.find(name).value();
    // The labels are the one forward result read by the last layer rather than its own
    // layer: they died after the loss's backward.
    std::size_t prefix = 0;
    for (std::size_t s = 0; s <= a.r.position(id); ++s) prefix += lm.of(order[s]).forward_new_bytes;
    prefix -= a.t[a.t.labels()].bytes;
    const std::size_t grads = 2 * a.net[id].output_shape.bytes();  // dy_k and dy_{k-1}
    EXPECT_EQ(live.steps[a.r.backward_step(id)].transient_bytes_live, prefix + grads) << name;
  }
  // The saving is Σ n_i^b - n_N^b: positive, and at most half of the baseline (the paper's
  // "up to 50%"), since every backward step makes no more than its forward step did.
  const std::size_t saving = lm.new_baseline_bytes() - lm.new_liveness_bytes();
  EXPECT_GT(saving, 0u);
  EXPECT_LE(2 * saving, lm.new_baseline_bytes());
}

TEST(liveness_test, zoo_plans_are_exact_and_liveness_beats_baseline) {
  zoo_options o{2, 0, 0.125, 10, 3};
  for (const char* name : {"alexnet", "vgg16", "resnet50", "inception_v4", "densenet121"}) {
    o.image_side = std::max<std::int64_t>(32, zoo_min_side(name));
    analysed a(make_network(name, o));
    memory_plan base = a.lv.plan(memory_policy::baseline);
    memory_plan live = a.lv.plan(memory_policy::liveness);
    test::check_plan(a.t, base, name);
    test::check_plan(a.t, live, name);
    EXPECT_LT(live.peak_bytes, base.peak_bytes) << name;
    layer_memory lm(a.t);
    EXPECT_GE(live.peak_bytes, lm.max_layer_bytes()) << name;
  }
}

TEST(liveness_test, random_dag_plans_and_sets_are_exact) {
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    random_dag_options o;
    o.seed = seed;
    o.layers = 5 + seed % 40;
    o.stages = 1 + seed % 3;
    o.all_types = seed % 3 == 0;
    analysed a(make_random_dag(o));
    const std::string what = "seed " + std::to_string(seed);
    test::check_sets(a.t, a.lv, what);
    test::check_plan(a.t, a.lv.plan(memory_policy::liveness), what);
    test::check_plan(a.t, a.lv.plan(memory_policy::baseline), what);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace memweave
