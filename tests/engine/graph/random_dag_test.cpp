// make_random_dag: valid, deterministic, with fans and joins.
#include <gtest/gtest.h>

#include "graph_fixtures.hpp"
#include "memweave/engine/route.hpp"
#include "memweave/engine/zoo.hpp"

namespace memweave {
namespace {

TEST(random_dag_test, same_seed_gives_the_same_network) {
  random_dag_options o;
  o.seed = 42;
  o.layers = 60;
  o.stages = 3;
  o.all_types = true;
  network a = make_random_dag(o), b = make_random_dag(o);
  EXPECT_EQ(a.summary(), b.summary());
  EXPECT_EQ(a.name(), "random_42");
  o.seed = 43;
  EXPECT_NE(make_random_dag(o).summary(), a.summary());
}

TEST(random_dag_test, networks_are_valid_with_fans_joins_and_every_type) {
  std::size_t with_fan = 0, with_join = 0, n = 0;
  std::vector<std::size_t> types(static_cast<std::size_t>(layer_type::add) + 1, 0);
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    random_dag_options o;
    o.seed = seed;
    o.layers = 5 + seed % 60;
    o.stages = 1 + seed % 4;
    o.all_types = seed % 2 == 1;
    network net = make_random_dag(o);  // build() validated it
    ++n;
    route r(net);
    ASSERT_TRUE(route::is_topological(net, r.order()));
    bool fan = false, join = false;
    for (const layer& l : net.layers()) {
      fan |= l.consumers.size() > 1;
      join |= l.inputs.size() > 1;
      ++types[static_cast<std::size_t>(l.type)];
    }
    with_fan += fan;
    with_join += join;
    EXPECT_EQ(net[net.loss_layer()].type, layer_type::softmax_loss);
    EXPECT_EQ(net[net[net.loss_layer()].inputs[0]].type, layer_type::fc);
  }
  EXPECT_GT(with_fan, n * 3 / 4);
  EXPECT_GT(with_join, n * 3 / 4);
  for (std::size_t t = 0; t < types.size(); ++t)
    EXPECT_GT(types[t], 0u) << to_string(static_cast<layer_type>(t));
}

TEST(random_dag_test, impossible_options_are_rejected) {
  random_dag_options o;
  o.stages = 5;
  o.image_side = 8;  // cannot halve 4 times
  test::expect_contains(test::error_of([&] { make_random_dag(o); }),
                        {"image_side 8", "2^(stages-1)"});
  o = random_dag_options{};
  o.batch = 0;
  test::expect_contains(test::error_of([&] { make_random_dag(o); }), {"batch 0"});
}

}  // namespace
}  // namespace memweave
