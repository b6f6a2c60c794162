// The correctness oracle: training with any memory policy gives bit-identical losses and
// weights to the baseline on (effectively) unlimited memory, on every zoo network at small
// size and on random DAGs with fans and joins.
#include "engine_test_util.hpp"

namespace memweave {
namespace {

using test::expect_bit_identical;
using test::train;

executor_options with_policy(const std::string& p, std::size_t budget = 0) {
  executor_options o;
  o.policy = executor_policy::parse(p);
  o.budget_bytes = budget;
  o.threads = 2;
  // One algorithm everywhere: different algorithms sum in different orders.
  o.conv_ws = conv_ws_options::parse("fixed:im2col_image", "test");
  return o;
}

class zoo_oracle_test : public ::testing::TestWithParam<std::string> {};

TEST_P(zoo_oracle_test, liveness_is_bit_identical_to_baseline) {
  const network net = test::small_zoo(GetParam());
  const auto reference = train(net, with_policy("baseline"), 2);
  const auto live = train(net, with_policy("liveness"), 2);
  expect_bit_identical(reference, live, GetParam());
  for (double l : reference.losses) EXPECT_TRUE(std::isfinite(l)) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(zoo, zoo_oracle_test,
                         ::testing::Values("alexnet", "vgg16", "resnet50", "resnet:1,1,2,1",
                                           "inception_v4", "densenet121"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return n;
                         });

TEST(random_dag_oracle_test, liveness_under_tight_budget_is_bit_identical_to_baseline) {
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    const network net = test::oracle_random_dag(seed);
    const auto reference = train(net, with_policy("baseline"), 3);
    // The liveness plan's own peak plus a little slack for block rounding: as tight as it
    // can run.
    auto dev = test::make_test_device("null");
    executor probe(net, *dev, with_policy("liveness"));
    probe.run_iteration(nullptr, 0);
    const std::size_t tight = probe.report().peak_bytes + 64 * 1024;
    const auto live = train(net, with_policy("liveness", tight), 3);
    expect_bit_identical(reference, live, net.name());
  }
}

}  // namespace
}  // namespace memweave
