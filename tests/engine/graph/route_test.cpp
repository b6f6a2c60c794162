// route: Algorithm 1 (join counters), step numbering, validity on the zoo and random DAGs.
#include "memweave/engine/route.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "graph_fixtures.hpp"
#include "memweave/engine/zoo.hpp"

namespace memweave {
namespace {

// Algorithm 1 written as the paper writes it (recursive), as the oracle of the iterative one.
std::vector<layer_id> reference_route(const network& net) {
  std::vector<std::size_t> counter(net.size(), 0);
  std::vector<layer_id> out;
  std::function<void(layer_id)> construct = [&](layer_id l) {
    ++counter[l];
    if (counter[l] < net[l].inputs.size()) return;
    out.push_back(l);
    for (layer_id next : net[l].consumers) construct(next);
    counter[l] = 0;
  };
  construct(net.data_layer());
  return out;
}

std::size_t pos(const network& net, const route& r, const char* name) {
  return r.position(net.find(name).value());
}

TEST(route_test, fig6_join_runs_after_all_nested_fan_branches) {
  for (bool c_first : {true, false}) {
    network net = test::make_fig6(c_first);
    route r(net);
    ASSERT_TRUE(route::is_topological(net, r.order()));
    const std::size_t i = pos(net, r, "i");
    for (const char* pre : {"e", "g", "h"}) EXPECT_LT(pos(net, r, pre), i) << pre;
    EXPECT_EQ(pos(net, r, "a"), 0u);
    EXPECT_EQ(pos(net, r, "j"), 9u);
    EXPECT_EQ(pos(net, r, "i"), 8u);
    // Depth first: a branch runs to the join before the next branch starts.
    std::vector<std::string> names;
    for (layer_id l : r.order()) names.push_back(net[l].name);
    if (c_first)
      EXPECT_EQ(names,
                (std::vector<std::string>{"a", "b", "c", "e", "d", "f", "g", "h", "i", "j"}));
    else
      EXPECT_EQ(names,
                (std::vector<std::string>{"a", "b", "d", "f", "g", "h", "c", "e", "i", "j"}));
  }
}

TEST(route_test, steps_run_forward_in_route_order_then_backward_in_reverse) {
  network net = test::make_fig6();
  route r(net);
  ASSERT_EQ(r.layer_count(), 10u);
  ASSERT_EQ(r.step_count(), 20u);
  for (std::size_t s = 0; s < 10; ++s) {
    EXPECT_EQ(r.at(s), (route_step{r.order()[s], pass::forward}));
    EXPECT_EQ(r.at(19 - s), (route_step{r.order()[s], pass::backward}));
  }
  for (layer_id l = 0; l < net.size(); ++l) {
    EXPECT_EQ(r.at(r.forward_step(l)).layer, l);
    EXPECT_EQ(r.at(r.backward_step(l)).layer, l);
    EXPECT_EQ(r.forward_step(l) + r.backward_step(l), 19u);
  }
  EXPECT_EQ(r.at(0).layer, net.data_layer());
  EXPECT_EQ(r.at(9).layer, net.loss_layer());
  EXPECT_EQ(r.at(10), (route_step{net.loss_layer(), pass::backward}));
  test::expect_contains(test::error_of([&] { (void)r.at(20); }), {"step 20", "20 steps"});
  test::expect_contains(r.describe(net), {"0 a F\n", "19 a B\n", "10 j B\n"});
}

TEST(route_test, is_topological_rejects_bad_orders) {
  network net = test::make_fig6();
  route r(net);
  std::vector<layer_id> o(r.order().begin(), r.order().end());
  EXPECT_TRUE(route::is_topological(net, o));
  std::swap(o[0], o[1]);
  EXPECT_FALSE(route::is_topological(net, o));
  std::swap(o[0], o[1]);
  o.pop_back();
  EXPECT_FALSE(route::is_topological(net, o));
  o.push_back(o[0]);
  EXPECT_FALSE(route::is_topological(net, o));
}

TEST(route_test, zoo_routes_are_topological_and_match_the_recursive_algorithm) {
  zoo_options o;
  o.batch = 2;
  o.width_scale = 0.125;
  o.classes = 10;
  for (const char* name : {"alexnet", "vgg16", "resnet50", "resnet101", "resnet152", "inception_v4",
                           "densenet121", "resnet:1,1,2,1"}) {
    o.image_side = zoo_min_side(name) < 32 ? 32 : zoo_min_side(name);
    network net = make_network(name, o);
    route r(net);
    EXPECT_TRUE(route::is_topological(net, r.order())) << name;
    EXPECT_EQ(std::vector<layer_id>(r.order().begin(), r.order().end()), reference_route(net))
        << name;
  }
}

TEST(route_test, random_dag_routes_are_topological_and_match_the_recursive_algorithm) {
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    random_dag_options o;
    o.seed = seed;
    o.layers = 10 + seed % 50;
    o.stages = 1 + seed % 3;
    o.all_types = seed % 2 == 0;
    network net = make_random_dag(o);
    route r(net);
    ASSERT_TRUE(route::is_topological(net, r.order())) << "seed " << seed;
    ASSERT_EQ(std::vector<layer_id>(r.order().begin(), r.order().end()), reference_route(net))
        << "seed " << seed;
  }
}

TEST(route_test, constructing_twice_gives_the_same_route) {
  network net = make_network("inception_v4", {2, 75, 0.125, 10, 3});
  route a(net), b(net);
  EXPECT_EQ(std::vector<layer_id>(a.order().begin(), a.order().end()),
            std::vector<layer_id>(b.order().begin(), b.order().end()));
}

}  // namespace
}  // namespace memweave
