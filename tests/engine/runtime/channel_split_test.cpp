// TSPLIT along the output channels: a CONV (groups 1) or FC step run channel group by
// channel group gives the whole step's bits for FC and CONV `direct` (forward, dx, dW, db),
// and stays within float32 rounding of it for CONV's im2col algorithms, whose GEMMs round
// an element differently with the matrix sizes (ARCHITECTURE.md, TSPLIT).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/layers/split_step.hpp"

namespace memweave {
namespace {

namespace k = kernels::host;
using std::int64_t;

std::vector<float> random_values(std::mt19937& gen, int64_t count) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(count));
  for (float& x : v) x = u(gen);
  return v;
}

// The tensors of one CONV or FC step, and the step's results.
struct step_tensors {
  std::vector<float> x, w, b, dy, y, dx, dw, db;
};

struct step_case {
  layer l;
  shape4 in;
  k::conv_algo algo = k::conv_algo::direct;
  bool dx_accumulate = false;     // the step adds to a gradient another consumer wrote
  bool param_accumulate = false;  // a micro-batch after the first
  std::vector<float> workspace;

  // Runs forward and backward, whole (parts 1) or in `parts` channel groups, from the
  // same inputs (t's x, w, b, dy, and dx/dw/db's initial contents).
  step_tensors run(step_tensors t, int parts) {
    const k::kernel_context ctx(2);
    layers::step_io io;
    io.l = &l;
    io.input_shapes = {in};
    io.inputs = {t.x.data()};
    io.output = t.y.data();
    io.output_grad = t.dy.data();
    io.input_grads = {k::grad_out{t.dx.data(), dx_accumulate}};
    io.params = {t.w.data(), t.b.data()};
    io.param_grads = {t.dw.data(), t.db.data()};
    io.workspace = workspace.empty() ? nullptr : workspace.data();
    io.workspace_bytes = workspace.size() * sizeof(float);
    io.algo = io.data_algo = io.filter_algo = algo;
    io.accumulate_param_grads = param_accumulate;
    layers::run_channel_split_step(ctx, io, true, parts);
    layers::run_channel_split_step(ctx, io, false, parts);
    return t;
  }

  step_tensors inputs(std::mt19937& gen) const {
    const shape4& out = l.output_shape;
    step_tensors t;
    t.x = random_values(gen, in.count());
    t.w = random_values(gen, out.c * wrow());
    t.b = random_values(gen, out.c);
    t.dy = random_values(gen, out.count());
    t.y = random_values(gen, out.count());  // garbage: the step overwrites it
    t.dx = random_values(gen, in.count());
    t.dw = random_values(gen, out.c * wrow());
    t.db = random_values(gen, out.c);
    return t;
  }

  int64_t wrow() const {
    if (l.type == layer_type::fc) return in.per_image();
    const auto& p = std::get<conv_params>(l.params);
    return in.c * p.kernel_h * p.kernel_w;
  }
};

step_case conv_case(std::mt19937& gen, k::conv_algo algo) {
  const auto pick = [&gen](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen);
  };
  step_case c;
  c.in = {pick(1, 2), pick(1, 4), pick(3, 7), pick(3, 7)};
  conv_params p;
  p.out_channels = pick(1, 13);
  p.kernel_h = pick(1, 3), p.kernel_w = pick(1, 3);
  p.stride_h = pick(1, 2), p.stride_w = pick(1, 2);
  p.pad_h = pick(0, 1), p.pad_w = pick(0, 1);
  p.bias = pick(0, 3) > 0;
  c.l.type = layer_type::conv;
  c.l.params = p;
  c.l.output_shape = p.output(c.in);
  c.algo = algo;
  c.dx_accumulate = pick(0, 1) == 1;
  c.param_accumulate = pick(0, 1) == 1;
  std::size_t bytes = 0;
  for (auto pass :
       {k::conv_pass::forward, k::conv_pass::backward_data, k::conv_pass::backward_filter}) {
    bytes = std::max(bytes, k::conv_workspace_bytes(algo, pass, c.in, p, c.in.n));
  }
  c.workspace.resize(bytes / sizeof(float) + 1);
  return c;
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b,
                      const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what;
}

void expect_all_same_bits(const step_tensors& whole, const step_tensors& split,
                          const std::string& what) {
  expect_same_bits(whole.y, split.y, what + ": y");
  expect_same_bits(whole.dx, split.dx, what + ": dx");
  expect_same_bits(whole.dw, split.dw, what + ": dw");
  expect_same_bits(whole.db, split.db, what + ": db");
}

TEST(channel_split_test, fc_forward_and_backward_are_bit_identical_for_any_parts) {
  std::mt19937 gen(5);
  const auto pick = [&gen](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen);
  };
  for (int trial = 0; trial < 40; ++trial) {
    step_case c;
    c.in = {pick(1, 3), pick(1, 3), pick(1, 4), pick(1, 6)};  // 1..72 features: lane tails
    fc_params p;
    p.out_features = pick(1, 13);
    p.bias = pick(0, 3) > 0;
    c.l.type = layer_type::fc;
    c.l.params = p;
    c.l.output_shape = {c.in.n, p.out_features, 1, 1};
    c.dx_accumulate = pick(0, 1) == 1;
    c.param_accumulate = pick(0, 1) == 1;
    const int parts = static_cast<int>(pick(2, 6));
    const step_tensors t = c.inputs(gen);
    const step_tensors whole = c.run(t, 1);
    expect_all_same_bits(whole, c.run(t, parts),
                         "FC trial " + std::to_string(trial) + ", " +
                             std::to_string(p.out_features) + " features in " +
                             std::to_string(parts) + " parts");
  }
}

TEST(channel_split_test, conv_direct_is_bit_identical_for_any_parts) {
  std::mt19937 gen(7);
  for (int trial = 0; trial < 40; ++trial) {
    step_case c = conv_case(gen, k::conv_algo::direct);
    const int parts = 2 + trial % 5;
    const step_tensors t = c.inputs(gen);
    const step_tensors whole = c.run(t, 1);
    expect_all_same_bits(whole, c.run(t, parts),
                         "direct trial " + std::to_string(trial) + ", " +
                             std::to_string(c.l.output_shape.c) + " channels in " +
                             std::to_string(parts) + " parts");
  }
}

// im2col's GEMMs sum an element's K terms in an order OpenBLAS picks by the matrix sizes:
// whole and split results are each within gamma_T * sum |a||b| <= gamma_T * T of the exact
// sum of T terms in [-1, 1] (u = 2^-24, gamma_T = T u / (1 - T u)); T counts every term
// and add of the element (dx: the channel groups' partial sums add to dx too). The bias,
// per channel, is exact either way.
TEST(channel_split_test, conv_im2col_is_within_float32_rounding) {
  std::mt19937 gen(9);
  const double unit = std::ldexp(1.0, -24);
  const auto bound = [unit](double terms) {
    const double t = terms + 2;  // the initial value and the final add
    return 2 * (t * unit / (1 - t * unit)) * t;
  };
  for (auto algo : {k::conv_algo::im2col_image, k::conv_algo::im2col_batch}) {
    for (int trial = 0; trial < 20; ++trial) {
      step_case c = conv_case(gen, algo);
      const auto& p = std::get<conv_params>(c.l.params);
      const shape4& out = c.l.output_shape;
      const int parts = 2 + trial % 4;
      const step_tensors t = c.inputs(gen);
      const step_tensors whole = c.run(t, 1);
      const step_tensors split = c.run(t, parts);
      const std::string what = std::string(k::to_string(algo)) + " trial " + std::to_string(trial);
      const auto worst = [](const std::vector<float>& a, const std::vector<float>& b) {
        double m = 0;
        for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
        return m;
      };
      const double rs = static_cast<double>(p.kernel_h * p.kernel_w);
      EXPECT_LE(worst(whole.y, split.y), bound(c.in.c * rs + 1)) << what << ": y";
      EXPECT_LE(worst(whole.dx, split.dx), bound(out.c * rs + parts)) << what << ": dx";
      EXPECT_LE(worst(whole.dw, split.dw), bound(double(c.in.n * out.h * out.w))) << what;
      expect_same_bits(whole.db, split.db, what + ": db");
    }
  }
}

TEST(channel_split_test, other_layers_and_one_part_run_the_whole_step) {
  std::mt19937 gen(3);
  step_case c = conv_case(gen, k::conv_algo::direct);
  const step_tensors t = c.inputs(gen);
  expect_all_same_bits(c.run(t, 1), c.run(t, 0), "parts 0");
  auto p = std::get<conv_params>(c.l.params);  // grouped: runs whole, same bits
  c.in.c = 2;
  p.out_channels = 4;
  p.groups = 2;
  c.l.params = p;
  c.l.output_shape = p.output(c.in);
  const step_tensors g = c.inputs(gen);
  expect_all_same_bits(c.run(g, 1), c.run(g, 3), "groups 2");
}

}  // namespace
}  // namespace memweave
