// TSPLIT's oracle: training with layer steps split into micro-batches is bit-identical to
// unsplit training, on every zoo network at small size and on random DAGs with every layer
// type, for each host convolution algorithm (each sums weight gradients image by image).
#include "engine/layers/split_step.hpp"
#include "engine_test_util.hpp"
#include "support/static_tls_reexec.hpp"

#include <cmath>
#include <random>

MEMWEAVE_REEXEC_WITH_STATIC_TLS();  // all: the host pool

namespace memweave {
namespace {

using test::expect_bit_identical;
using test::train;

executor_options split_options(const network& net, const std::string& algo, int parts_seed) {
  executor_options o;
  o.policy = executor_policy::parse("liveness");
  o.threads = 2;
  o.conv_ws = conv_ws_options::parse("fixed:" + algo, "test");
  if (parts_seed > 0) {
    // Every count from 1 to the batch, varied per step, so that micro-batches of different
    // sizes meet in one iteration.
    const std::int64_t batch = net[net.data_layer()].output_shape.n;
    const std::size_t steps = 2 * net.size();
    for (std::size_t s = 0; s < steps; ++s) {
      o.split_parts.push_back(1 + static_cast<int>((s * 7 + static_cast<std::size_t>(parts_seed)) %
                                                   static_cast<std::size_t>(batch)));
    }
  }
  return o;
}

TEST(micro_batch_bounds_test, splits_evenly_and_clamps) {
  EXPECT_EQ(layers::micro_batch_bounds(7, 3), (std::vector<std::int64_t>{0, 3, 5, 7}));
  EXPECT_EQ(layers::micro_batch_bounds(2, 5), (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_EQ(layers::micro_batch_bounds(4, 0), (std::vector<std::int64_t>{0, 4}));
}

class zoo_split_oracle_test : public ::testing::TestWithParam<std::string> {};

TEST_P(zoo_split_oracle_test, split_training_is_bit_identical_to_unsplit) {
  const network net = test::small_zoo(GetParam(), 5);
  const auto reference = train(net, split_options(net, "im2col_image", 0), 2);
  const auto split = train(net, split_options(net, "im2col_image", 3), 2);
  expect_bit_identical(reference, split, GetParam());
  for (double l : reference.losses) EXPECT_TRUE(std::isfinite(l)) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(zoo, zoo_split_oracle_test,
                         ::testing::Values("alexnet", "vgg16", "resnet50", "inception_v4",
                                           "densenet121"),
                         [](const auto& info) { return info.param; });

TEST(split_oracle_test, every_conv_algorithm_sums_weight_gradients_image_by_image) {
  const network net = test::small_zoo("resnet:1,1,2,1", 4);
  for (const char* algo : {"direct", "im2col_image"}) {
    const auto reference = train(net, split_options(net, algo, 0), 2);
    const auto split = train(net, split_options(net, algo, 1), 2);
    expect_bit_identical(reference, split, algo);
  }
  // im2col_batch's forward and backward-data GEMMs span a chunk of images: bit-identical
  // when every micro-batch is whole chunks (ARCHITECTURE.md, TSPLIT).
  executor_options halves = split_options(net, "im2col_batch:2", 0);
  halves.split_parts.assign(2 * net.size(), 2);
  const auto reference = train(net, split_options(net, "im2col_batch:2", 0), 2);
  expect_bit_identical(reference, train(net, halves, 2), "im2col_batch:2 in halves");
}

// A micro-batch that cuts a chunk changes the GEMM's column count, which OpenBLAS rounds
// differently: each output is then within the float32 bound of a K-term dot product,
// |error| <= 2 * gamma_K * sum |w||x| (gamma_K = K u / (1 - K u), u = 2^-24, both results
// being within gamma_K of the exact value).
TEST(split_oracle_test, im2col_batch_cut_inside_a_chunk_is_within_float32_rounding) {
  namespace k = kernels::host;
  const shape4 in{5, 6, 9, 9};
  conv_params p;
  p.out_channels = 7;
  p.kernel_h = p.kernel_w = 3;
  p.pad_h = p.pad_w = 1;
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(in.count())), w(7 * 6 * 9), b(7);
  for (float& v : x) v = u(gen);
  for (float& v : w) v = u(gen);
  for (float& v : b) v = u(gen);
  const std::int64_t P = 81, K = 6 * 9;
  std::vector<float> y(static_cast<std::size_t>(in.n * 7 * P)), ys(y.size());
  const k::kernel_context ctx(2);
  std::vector<float> ws(
      k::conv_workspace_bytes(k::conv_algo::im2col_batch, k::conv_pass::forward, in, p, 4) /
      sizeof(float));
  const k::conv_config cfg{k::conv_algo::im2col_batch, 4, ws.data(), ws.size() * sizeof(float)};
  k::conv_forward(ctx, cfg, in, p, x.data(), w.data(), b.data(), y.data());
  const auto bounds = layers::micro_batch_bounds(in.n, 2);  // 3 + 2 images: cuts the chunk
  for (std::size_t i = 0; i + 1 < bounds.size(); ++i) {
    shape4 part = in;
    part.n = bounds[i + 1] - bounds[i];
    k::conv_forward(ctx, cfg, part, p, x.data() + bounds[i] * in.per_image(), w.data(), b.data(),
                    ys.data() + bounds[i] * 7 * P);
  }
  const double unit = std::ldexp(1.0, -24), gamma = K * unit / (1 - K * unit);
  // sum |w||x| <= K * max|w| * max|x| = K here (inputs in [-1, 1]), plus the bias add.
  const double bound = 2 * gamma * static_cast<double>(K) + 2 * unit * (K + 1);
  double worst = 0;
  for (std::size_t i = 0; i < y.size(); ++i)
    worst = std::max(worst, std::fabs(double(y[i]) - ys[i]));
  EXPECT_LE(worst, bound);
}

TEST(split_oracle_test, random_dags_with_every_layer_type) {
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    const network net = test::random_dag_with_every_type(seed);
    const auto reference = train(net, split_options(net, "im2col_image", 0), 2);
    const auto split = train(net, split_options(net, "im2col_image", static_cast<int>(seed)), 2);
    expect_bit_identical(reference, split, net.name());
  }
}

// A replay (recompute, all) runs the whole step while the step itself ran split: the same
// bits, so dropping and rebuilding a split step's output changes nothing.
TEST(split_oracle_test, replays_of_split_steps_rebuild_the_same_bits) {
  const network net = test::small_zoo("resnet50", 4);
  const auto reference = train(net, test::policy_options("baseline"), 2);
  for (const char* policy : {"recompute", "all"}) {
    executor_options o = test::policy_options(policy);
    o.split_parts = split_options(net, "im2col_image", 2).split_parts;
    if (std::string(policy) == "all") {
      // Tight enough that the schedule drops and rebuilds.
      auto dev = test::make_test_device("null");
      executor probe(net, *dev, test::policy_options("liveness"));
      probe.run_iteration(nullptr, 0);
      o.budget_bytes = probe.report().peak_bytes / 2;
    }
    const auto split = train(net, o, 2);
    expect_bit_identical(reference, split, policy);
    // Under all the split steps are staged (split_staging_test): what they read is never
    // dropped, and the schedule is not planned, so only recompute's replays are counted.
    if (std::string(policy) == "all") continue;
    std::int64_t replays = 0;
    for (const auto& s : split.steps) replays += s.replays;
    EXPECT_GT(replays, 0) << policy << ": nothing was rebuilt";
  }
}

}  // namespace
}  // namespace memweave
