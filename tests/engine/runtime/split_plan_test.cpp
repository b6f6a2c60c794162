// TSPLIT's planner: the fewest parts per step that fit, no split where the budget holds every
// step, a clear error below the smallest micro-step, and the plan's splits run on the host
// give the unsplit bits.
#include "memweave/engine/split_plan.hpp"

#include "engine_test_util.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"
#include "memweave/engine/layer_memory.hpp"
#include "memweave/engine/route.hpp"

namespace memweave {
namespace {

constexpr std::size_t k_block = 1024;

struct planned {
  network net;
  route r;
  tensor_table table;
  layer_memory memory;
  explicit planned(network n) : net(std::move(n)), r(net), table(net, r), memory(table) {}
  split_plan at(std::size_t budget) const {
    return plan_splits(net, table, memory, cost_model{}, budget, k_block, "--budget");
  }
};

TEST(split_plan_test, no_split_where_the_budget_holds_every_step) {
  const planned p(test::small_zoo("resnet50", 8));
  const split_plan plan = p.at(p.at(std::size_t{1} << 40).max_layer_bytes);
  EXPECT_EQ(plan.split_count(), 0u);
  EXPECT_EQ(plan.split_seconds(), plan.whole_seconds());
  EXPECT_EQ(plan.link_seconds(), 0.0);
  for (int parts : plan.parts(p.table.step_count())) EXPECT_EQ(parts, 1);
}

TEST(split_plan_test, fewest_parts_that_fit_below_the_largest_layer) {
  for (const char* name : {"vgg16", "resnet50", "inception_v4", "densenet121"}) {
    const planned p(test::small_zoo(name, 8));
    const split_plan unlimited = p.at(std::size_t{1} << 40);
    // Half of max(l_i), or the floor where FC weights (which a batch split cannot cut) keep
    // it higher (VGG at small size).
    const std::size_t budget = std::max(unlimited.max_layer_bytes / 2, unlimited.floor_bytes);
    ASSERT_LT(budget, unlimited.max_layer_bytes) << name;
    const split_plan plan = p.at(budget);
    EXPECT_GT(plan.split_count(), 0u) << name;
    for (const split_step& s : plan.steps) {
      EXPECT_LE(s.micro_bytes, budget) << name << " step " << s.step;
      EXPECT_EQ(s.micro_bytes,
                micro_step_bytes(p.table, s.step, s.parts, k_block, s.channel_parts));
      if (s.parts > 1) {
        EXPECT_GT(micro_step_bytes(p.table, s.step, s.parts - 1, k_block, s.channel_parts), budget)
            << name << " step " << s.step << ": fewer parts would fit";
      }
      if (s.channel_parts > 1) {
        EXPECT_GT(micro_step_bytes(p.table, s.step, 8, k_block, s.channel_parts - 1), budget)
            << name << " step " << s.step << ": fewer channel groups would fit";
      }
      if (s.parts > 1 || s.channel_parts > 1) {
        EXPECT_GE(s.split_s, s.whole_s) << name;
        EXPECT_GT(s.link_s, 0.0) << name;
      }
    }
  }
}

// At batch 1 a sample split cannot help: the planner cuts CONV/FC steps along their output
// channels, and the floor falls below the largest whole step.
TEST(split_plan_test, batch_one_splits_conv_and_fc_along_output_channels) {
  for (const char* name : {"vgg16", "resnet50"}) {
    const planned p(test::small_zoo(name, 1));
    const split_plan unlimited = p.at(std::size_t{1} << 40);
    ASSERT_LT(unlimited.floor_bytes, unlimited.max_layer_bytes / 2) << name;
    const std::size_t budget = unlimited.max_layer_bytes / 2;
    const split_plan plan = p.at(budget);
    EXPECT_EQ(plan.split_count(), 0u) << name << ": one image cannot be split";
    EXPECT_GT(plan.channel_split_count(), 0u) << name;
    for (const split_step& s : plan.steps) {
      EXPECT_LE(s.micro_bytes, budget) << name << " step " << s.step;
      if (s.channel_parts == 1) continue;
      const layer& l = p.net[s.layer];
      EXPECT_TRUE(l.type == layer_type::conv || l.type == layer_type::fc) << l.name;
      EXPECT_LE(s.channel_parts, splittable_channels(l)) << l.name;
      EXPECT_GT(micro_step_bytes(p.table, s.step, 1, k_block, s.channel_parts - 1), budget)
          << name << " step " << s.step << ": fewer channel groups would fit";
    }
  }
}

TEST(split_plan_test, budget_below_the_smallest_micro_step_is_a_clear_error) {
  const planned p(test::small_zoo("resnet50", 8));
  const split_plan unlimited = p.at(std::size_t{1} << 40);
  const std::size_t floor = unlimited.floor_bytes;
  EXPECT_NO_THROW(p.at(floor));
  try {
    p.at(floor - 1);
    FAIL() << "a budget below the floor was planned";
  } catch (const budget_too_small& e) {
    const std::string what = e.what();
    const std::string step = "step " + std::to_string(unlimited.floor_step + 1) + " (";
    EXPECT_NE(what.find(step), std::string::npos) << what;
    EXPECT_NE(what.find(p.net[p.r.at(unlimited.floor_step).layer].name), std::string::npos) << what;
    EXPECT_NE(what.find("--budget"), std::string::npos) << what;
    EXPECT_NE(what.find(format_bytes(floor)), std::string::npos) << what;
  }
}

TEST(split_plan_test, the_plans_splits_train_bit_identically) {
  for (const char* name : {"alexnet", "resnet50", "inception_v4"}) {
    const planned p(test::small_zoo(name, 6));
    const split_plan unlimited = p.at(std::size_t{1} << 40);
    const split_plan plan = p.at(std::max(unlimited.max_layer_bytes / 2, unlimited.floor_bytes));
    ASSERT_GT(plan.split_count(), 0u) << name;
    executor_options o;
    o.policy = executor_policy::parse("liveness");
    o.threads = 2;
    o.conv_ws = conv_ws_options::parse("fixed:im2col_image", "test");
    const auto whole = test::train(p.net, o, 2);
    o.split_parts = plan.parts(p.table.step_count());
    test::expect_bit_identical(whole, test::train(p.net, o, 2), name);
  }
}

}  // namespace
}  // namespace memweave
