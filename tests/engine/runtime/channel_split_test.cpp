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
#include "engine_test_util.hpp"

namespace memweave {
namespace {

namespace k = kernels::host;
using std::int64_t;

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
    t.x = test::random_floats(gen, in.count());
    t.w = test::random_floats(gen, out.c * wrow());
    t.b = test::random_floats(gen, out.c);
    t.dy = test::random_floats(gen, out.count());
    t.y = test::random_floats(gen, out.count());  // garbage: the step overwrites it
    t.dx = test::random_floats(gen, in.count());
    t.dw = test::random_floats(gen, out.c * wrow());
    t.db = test::random_floats(gen, out.c);
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

// A stand-in for the solver: element-wise, as SGD is.
void toy_update(std::size_t count, const float* g, float* w, float* v) {
  for (std::size_t i = 0; i < count; ++i) {
    v[i] = 0.5f * v[i] + g[i];
    w[i] -= 0.125f * v[i];
  }
}

// TSPLIT below the largest layer: the step's output, output gradient, weights, bias, their
// gradients and momenta stay in "host" vectors and only one group's rows pass through micro
// buffers; in `parts` micro-batches the input and its gradient are staged too. Forward, then
// backward with the updates group by group.
struct staged_outcome {
  step_tensors t;
  std::vector<float> vw, vb;  // momenta
};

staged_outcome run_staged(step_case& c, step_tensors t, std::vector<float> vw,
                          std::vector<float> vb, int groups, int parts) {
  const k::kernel_context ctx(2);
  const shape4& in = c.in;
  const shape4& out = c.l.output_shape;
  const int64_t K = out.c;
  std::vector<std::vector<float>> micro;  // the "device" buffers, freshly garbage each
  std::vector<layers::staged_tensor> staged;
  const int64_t images = (in.n + parts - 1) / parts, rows = (K + groups - 1) / groups;
  const auto add = [&](std::vector<float>& whole, int64_t n, bool read, bool written,
                       bool channels) {
    layers::staged_tensor m;
    m.whole = whole.data();
    m.n = n;
    m.per_image = static_cast<int64_t>(whole.size()) / n;
    m.read = read;
    m.written = written;
    m.channels = channels ? K : 0;
    int64_t floats = (n > 1 ? images : 1) * m.per_image;
    if (channels) floats = floats / K * rows;
    micro.emplace_back(static_cast<std::size_t>(floats), -7.0f);
    m.micro = micro.back().data();
    staged.push_back(m);
  };
  micro.reserve(16);
  layers::step_io io;
  io.l = &c.l;
  io.input_shapes = {in};
  io.inputs = {t.x.data()};
  io.output = t.y.data();
  io.output_grad = t.dy.data();
  io.input_grads = {k::grad_out{t.dx.data(), c.dx_accumulate}};
  io.params = {t.w.data(), t.b.data()};
  io.param_grads = {t.dw.data(), t.db.data()};
  io.workspace = c.workspace.empty() ? nullptr : c.workspace.data();
  io.workspace_bytes = c.workspace.size() * sizeof(float);
  io.algo = io.data_algo = io.filter_algo = c.algo;
  const layers::update_fn update = toy_update;
  // Forward: x read (by micro-batch when split), W and b read, y written.
  if (parts > 1) add(t.x, in.n, true, false, false);
  add(t.w, 1, true, false, true);
  add(t.b, 1, true, false, true);
  add(t.y, in.n, false, true, true);
  layers::run_channel_split_step(ctx, io, true, groups, parts, staged, {}, update);
  staged.clear();
  micro.clear();
  // Backward: x and dy read, dx accumulated or written, W/b and momenta updated, dW/db
  // written (and read back across micro-batches).
  if (parts > 1) {
    add(t.x, in.n, true, false, false);
    add(t.dx, in.n, c.dx_accumulate, true, false);
  }
  add(t.dy, in.n, true, false, true);
  add(t.w, 1, true, true, true);
  add(t.b, 1, true, true, true);
  add(t.dw, 1, parts > 1, true, true);
  add(t.db, 1, parts > 1, true, true);
  add(vw, 1, true, true, true);
  add(vb, 1, true, true, true);
  const std::vector<layers::param_update> updates = {
      {t.dw.data(), t.w.data(), vw.data(), t.w.size()},
      {t.db.data(), t.b.data(), vb.data(), t.b.size()}};
  layers::run_channel_split_step(ctx, io, false, groups, parts, staged, updates, update);
  return {std::move(t), std::move(vw), std::move(vb)};
}

TEST(channel_split_test, staged_groups_with_their_updates_are_bit_identical) {
  std::mt19937 gen(11);
  const auto pick = [&gen](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen);
  };
  for (int trial = 0; trial < 40; ++trial) {
    step_case c;
    if (trial % 2 == 0) {
      c = conv_case(gen, k::conv_algo::direct);
    } else {
      c.in = {pick(1, 3), pick(1, 3), pick(1, 4), pick(1, 6)};
      fc_params p;
      p.out_features = pick(1, 13);
      p.bias = true;
      c.l.type = layer_type::fc;
      c.l.params = p;
      c.l.output_shape = {c.in.n, p.out_features, 1, 1};
      c.dx_accumulate = pick(0, 1) == 1;
    }
    if (c.l.type == layer_type::conv) {
      auto p = std::get<conv_params>(c.l.params);
      p.bias = true;  // the bias's rows are staged too
      c.l.params = p;
    }
    c.param_accumulate = false;  // micro-batches after the first add (split_step.hpp)
    const int groups = static_cast<int>(pick(2, 5));
    const int parts = static_cast<int>(pick(1, c.in.n));
    const step_tensors t = c.inputs(gen);
    const std::vector<float> vw = test::random_floats(gen, static_cast<int64_t>(t.w.size()));
    const std::vector<float> vb = test::random_floats(gen, static_cast<int64_t>(t.b.size()));
    // Whole: forward, backward, then one update after the step.
    step_tensors whole = c.run(t, 1);
    std::vector<float> wvw = vw, wvb = vb;
    toy_update(whole.w.size(), whole.dw.data(), whole.w.data(), wvw.data());
    toy_update(whole.b.size(), whole.db.data(), whole.b.data(), wvb.data());
    const staged_outcome s = run_staged(c, t, vw, vb, groups, parts);
    const std::string what = std::string(c.l.type == layer_type::fc ? "FC" : "direct") + " trial " +
                             std::to_string(trial) + ", " + std::to_string(c.l.output_shape.c) +
                             " channels in " + std::to_string(groups) + " groups, " +
                             std::to_string(parts) + " micro-batches";
    expect_all_same_bits(whole, s.t, what);
    expect_same_bits(whole.w, s.t.w, what + ": w");
    expect_same_bits(whole.b, s.t.b, what + ": b");
    expect_same_bits(wvw, s.vw, what + ": momentum of w");
    expect_same_bits(wvb, s.vb, what + ": momentum of b");
  }
}

// The bytes the null device charges for a step's staging copies: a tensor with images once
// each way, one without (weights) once per micro-batch.
TEST(channel_split_test, staged_copy_bytes_count_weights_once_per_micro_batch) {
  layers::staged_tensor y;  // 4 images of 8 floats, written
  y.n = 4, y.per_image = 8, y.written = true, y.channels = 2;
  layers::staged_tensor w;  // 16 floats, read and written
  w.n = 1, w.per_image = 16, w.read = w.written = true, w.channels = 2;
  const std::vector<layers::staged_tensor> staged = {y, w};
  EXPECT_EQ(layers::staged_copy_bytes(layer_type::fc, false, staged, 1), (32 + 32) * 4u);
  EXPECT_EQ(layers::staged_copy_bytes(layer_type::fc, false, staged, 3), (32 + 3 * 32) * 4u);
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
