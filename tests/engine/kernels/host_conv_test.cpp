// Host convolution: the three algorithms against naive double-precision loops, against
// each other, against finite differences; workspace sizes; determinism; accumulate.
#include <gtest/gtest.h>

#include "kernel_test_util.hpp"

namespace memweave::kernels::host::test {
namespace {

constexpr conv_algo k_algos[] = {conv_algo::direct, conv_algo::im2col_image,
                                 conv_algo::im2col_batch};

struct conv_case {
  shape4 in;
  conv_params p;
  // conv_params::output, restated (the kernels do not link the engine library).
  shape4 out() const {
    const std::int64_t eh = p.dilation_h * (p.kernel_h - 1) + 1;
    const std::int64_t ew = p.dilation_w * (p.kernel_w - 1) + 1;
    return {in.n, p.out_channels, (in.h + 2 * p.pad_h - eh) / p.stride_h + 1,
            (in.w + 2 * p.pad_w - ew) / p.stride_w + 1};
  }
  std::size_t w_count() const {
    return static_cast<std::size_t>(p.out_channels * in.c / p.groups * p.kernel_h * p.kernel_w);
  }
};

std::string describe(const conv_case& c) {
  return "in " + shape_text(c.in) + " k=" + std::to_string(c.p.out_channels) +
         " g=" + std::to_string(c.p.groups) + " kernel " + std::to_string(c.p.kernel_h) + "x" +
         std::to_string(c.p.kernel_w) + " stride " + std::to_string(c.p.stride_h) + "x" +
         std::to_string(c.p.stride_w) + " pad " + std::to_string(c.p.pad_h) + "x" +
         std::to_string(c.p.pad_w) + " dil " + std::to_string(c.p.dilation_h) + "x" +
         std::to_string(c.p.dilation_w) + (c.p.bias ? " bias" : "");
}

// A random convolution with strides, padding, dilation and groups whose output is non-empty.
conv_case random_case(std::mt19937& gen) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); };
  for (;;) {
    conv_case c;
    const int groups = std::array<int, 4>{1, 1, 2, 3}[static_cast<std::size_t>(pick(0, 3))];
    c.in = {pick(1, 3), groups * pick(1, 4), pick(1, 10), pick(1, 10)};
    c.p.groups = groups;
    c.p.out_channels = groups * pick(1, 4);
    c.p.kernel_h = pick(1, 3), c.p.kernel_w = pick(1, 3);
    c.p.stride_h = pick(1, 3), c.p.stride_w = pick(1, 3);
    c.p.pad_h = pick(0, 2), c.p.pad_w = pick(0, 2);
    c.p.dilation_h = pick(1, 2), c.p.dilation_w = pick(1, 2);
    c.p.bias = pick(0, 1) == 1;
    const std::int64_t eh = c.p.dilation_h * (c.p.kernel_h - 1) + 1;
    const std::int64_t ew = c.p.dilation_w * (c.p.kernel_w - 1) + 1;
    if (c.in.h + 2 * c.p.pad_h >= eh && c.in.w + 2 * c.p.pad_w >= ew) return c;
  }
}

// Naive loops in double: y, dx, dw, db of one convolution, and for each value the sum of
// the magnitudes of its terms (the scale of its rounding error).
struct reference {
  std::vector<double> y, y_abs, dx, dx_abs, dw, dw_abs, db;
};

reference naive(const conv_case& c, const std::vector<float>& x, const std::vector<float>& w,
                const std::vector<float>& b, const std::vector<float>& dy) {
  const shape4 o = c.out();
  const auto& p = c.p;
  const std::int64_t cg = c.in.c / p.groups, kg = p.out_channels / p.groups;
  reference r;
  r.y.assign(static_cast<std::size_t>(o.count()), 0.0);
  r.y_abs = r.y;
  r.dx.assign(x.size(), 0.0);
  r.dx_abs = r.dx;
  r.dw.assign(w.size(), 0.0);
  r.dw_abs = r.dw;
  r.db.assign(static_cast<std::size_t>(p.out_channels), 0.0);
  for (std::int64_t n = 0; n < o.n; ++n) {
    for (std::int64_t k = 0; k < o.c; ++k) {
      const std::int64_t g = k / kg;
      for (std::int64_t oh = 0; oh < o.h; ++oh) {
        for (std::int64_t ow = 0; ow < o.w; ++ow) {
          const auto yi = static_cast<std::size_t>(((n * o.c + k) * o.h + oh) * o.w + ow);
          if (p.bias) {
            r.y[yi] += b[static_cast<std::size_t>(k)];
            r.y_abs[yi] += std::abs(b[static_cast<std::size_t>(k)]);
          }
          r.db[static_cast<std::size_t>(k)] += dy[yi];
          for (std::int64_t ci = 0; ci < cg; ++ci) {
            for (std::int64_t kh = 0; kh < p.kernel_h; ++kh) {
              for (std::int64_t kw = 0; kw < p.kernel_w; ++kw) {
                const std::int64_t ih = oh * p.stride_h - p.pad_h + kh * p.dilation_h;
                const std::int64_t iw = ow * p.stride_w - p.pad_w + kw * p.dilation_w;
                if (ih < 0 || ih >= c.in.h || iw < 0 || iw >= c.in.w) continue;
                const auto xi = static_cast<std::size_t>(
                    ((n * c.in.c + g * cg + ci) * c.in.h + ih) * c.in.w + iw);
                const auto wi =
                    static_cast<std::size_t>(((k * cg + ci) * p.kernel_h + kh) * p.kernel_w + kw);
                r.y[yi] += double(w[wi]) * x[xi];
                r.y_abs[yi] += std::abs(double(w[wi]) * x[xi]);
                r.dx[xi] += double(w[wi]) * dy[yi];
                r.dx_abs[xi] += std::abs(double(w[wi]) * dy[yi]);
                r.dw[wi] += double(x[xi]) * dy[yi];
                r.dw_abs[wi] += std::abs(double(x[xi]) * dy[yi]);
              }
            }
          }
        }
      }
    }
  }
  return r;
}

// A workspace for one call, with a guard zone after it that must stay untouched.
struct workspace {
  static constexpr std::size_t guard = 64;
  std::vector<float> buf;
  std::size_t floats = 0;
  workspace(conv_algo a, conv_pass pass, const conv_case& c, std::int64_t chunk)
      : floats(conv_workspace_bytes(a, pass, c.in, c.p, chunk) / sizeof(float)) {
    buf.assign(floats + guard, 1234.5f);
  }
  conv_config config(conv_algo a, std::int64_t chunk) {
    return {a, chunk, floats ? buf.data() : nullptr, floats * sizeof(float)};
  }
  bool guard_intact() const {
    for (std::size_t i = floats; i < buf.size(); ++i) {
      if (buf[i] != 1234.5f) return false;
    }
    return true;
  }
};

struct results {
  std::vector<float> y, dx, dw, db;
};

results run_all(const conv_case& c, conv_algo a, std::int64_t chunk, const std::vector<float>& x,
                const std::vector<float>& w, const std::vector<float>& b,
                const std::vector<float>& dy, const kernel_context& ctx = context()) {
  results r;
  r.y.assign(static_cast<std::size_t>(c.out().count()), std::nanf(""));
  r.dx.assign(x.size(), std::nanf(""));
  r.dw.assign(w.size(), std::nanf(""));
  r.db.assign(static_cast<std::size_t>(c.p.out_channels), std::nanf(""));
  workspace f(a, conv_pass::forward, c, chunk), d(a, conv_pass::backward_data, c, chunk),
      fl(a, conv_pass::backward_filter, c, chunk);
  conv_forward(ctx, f.config(a, chunk), c.in, c.p, x.data(), w.data(), b.data(), r.y.data());
  conv_backward_data(ctx, d.config(a, chunk), c.in, c.p, w.data(), dy.data(), r.dx.data(), false);
  conv_backward_filter(ctx, fl.config(a, chunk), c.in, c.p, x.data(), dy.data(), r.dw.data(),
                       r.db.data());
  EXPECT_TRUE(f.guard_intact() && d.guard_intact() && fl.guard_intact())
      << to_string(a) << " wrote past its workspace";
  return r;
}

// |got - ref| <= 1e-5 * (sum of |terms|) + 1e-6 for every element.
void expect_near_reference(const std::string& what, const std::vector<float>& got,
                           const std::vector<double>& ref, const std::vector<double>& abs) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double tol = 1e-5 * abs[i] + 1e-6;
    if (!(std::abs(got[i] - ref[i]) <= tol) && bad++ < 3) {
      ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", reference " << ref[i];
    }
  }
}

TEST(host_conv, forward_and_backward_of_every_algorithm_match_naive_loops_on_random_shapes) {
  std::mt19937 gen(2024);
  for (int trial = 0; trial < 150; ++trial) {
    const conv_case c = random_case(gen);
    const auto x = random_vector(static_cast<std::size_t>(c.in.count()), 10 + trial);
    const auto w = random_vector(c.w_count(), 20 + trial);
    const auto b = random_vector(static_cast<std::size_t>(c.p.out_channels), 30 + trial);
    const auto dy = random_vector(static_cast<std::size_t>(c.out().count()), 40 + trial);
    const reference ref = naive(c, x, w, b, dy);
    for (conv_algo a : k_algos) {
      for (std::int64_t chunk : {0, 1, 2}) {
        if (a != conv_algo::im2col_batch && chunk != 0) continue;
        SCOPED_TRACE(describe(c) + " " + to_string(a) + " chunk " + std::to_string(chunk));
        const results r = run_all(c, a, chunk, x, w, b, dy);
        expect_near_reference("y", r.y, ref.y, ref.y_abs);
        expect_near_reference("dx", r.dx, ref.dx, ref.dx_abs);
        expect_near_reference("dw", r.dw, ref.dw, ref.dw_abs);
        std::vector<double> db_abs(ref.db.size(), 1e-1 * static_cast<double>(c.out().count()));
        expect_near_reference("db", r.db, ref.db, db_abs);
      }
    }
  }
}

// The GEMM algorithms agree with direct to 1e-5 * (1 + max |direct|) on each output.
TEST(host_conv, gemm_algorithms_agree_with_direct_on_forward_backward_data_and_filter) {
  std::mt19937 gen(77);
  for (int trial = 0; trial < 100; ++trial) {
    const conv_case c = random_case(gen);
    const auto x = random_vector(static_cast<std::size_t>(c.in.count()), 100 + trial);
    const auto w = random_vector(c.w_count(), 200 + trial);
    const auto b = random_vector(static_cast<std::size_t>(c.p.out_channels), 300 + trial);
    const auto dy = random_vector(static_cast<std::size_t>(c.out().count()), 400 + trial);
    const results d = run_all(c, conv_algo::direct, 0, x, w, b, dy);
    for (auto [a, chunk] : {std::pair{conv_algo::im2col_image, 0},
                            {conv_algo::im2col_batch, 0},
                            {conv_algo::im2col_batch, 2}}) {
      SCOPED_TRACE(describe(c) + " " + to_string(a) + " chunk " + std::to_string(chunk));
      const results r = run_all(c, a, chunk, x, w, b, dy);
      EXPECT_LE(max_abs_diff(r.y, d.y), 1e-5 * (1 + max_abs(d.y)));
      EXPECT_LE(max_abs_diff(r.dx, d.dx), 1e-5 * (1 + max_abs(d.dx)));
      EXPECT_LE(max_abs_diff(r.dw, d.dw), 1e-5 * (1 + max_abs(d.dw)));
      EXPECT_TRUE(same_bits(r.db, d.db)) << "the bias gradient is shared by every algorithm";
    }
  }
}

// Central differences of sum(y * r) w.r.t. x, w and b (h = 1e-2, tolerance 1e-3 + 1e-3 *
// |analytic|: y is linear in each) match backward data, filter and bias of each algorithm.
TEST(host_conv, gradients_of_every_algorithm_match_finite_differences) {
  std::vector<conv_case> cases(3);
  cases[0].in = {2, 4, 6, 5};
  cases[0].p = {.out_channels = 4,
                .kernel_h = 3,
                .kernel_w = 3,
                .stride_h = 2,
                .stride_w = 1,
                .pad_h = 1,
                .pad_w = 1,
                .groups = 2,
                .bias = true};
  cases[1].in = {1, 3, 7, 7};
  cases[1].p = {.out_channels = 2,
                .kernel_h = 2,
                .kernel_w = 3,
                .stride_h = 1,
                .stride_w = 2,
                .pad_h = 2,
                .pad_w = 0,
                .dilation_h = 2,
                .dilation_w = 2,
                .bias = true};
  cases[2].in = {2, 3, 4, 4};
  cases[2].p = {.out_channels = 3, .kernel_h = 1, .kernel_w = 1, .bias = false};
  std::uint32_t seed = 5;
  for (const conv_case& c : cases) {
    for (conv_algo a : k_algos) {
      SCOPED_TRACE(describe(c) + " " + to_string(a));
      auto x = random_vector(static_cast<std::size_t>(c.in.count()), seed++);
      auto w = random_vector(c.w_count(), seed++);
      auto b = random_vector(static_cast<std::size_t>(c.p.out_channels), seed++);
      const auto r = random_vector(static_cast<std::size_t>(c.out().count()), seed++);
      const results g = run_all(c, a, 1, x, w, b, r);
      auto loss = [&] {
        workspace ws(a, conv_pass::forward, c, 1);
        std::vector<float> y(static_cast<std::size_t>(c.out().count()));
        conv_forward(context(), ws.config(a, 1), c.in, c.p, x.data(), w.data(), b.data(), y.data());
        return dot(y, r);
      };
      expect_gradient("dx", x, g.dx, loss, k_linear);
      expect_gradient("dw", w, g.dw, loss, k_linear);
      if (c.p.bias) expect_gradient("db", b, g.db, loss, k_linear);
    }
  }
}

TEST(host_conv, workspace_sizes_follow_the_documented_formulas) {
  const shape4 in{2, 6, 8, 8};
  conv_params p{
      .out_channels = 4, .kernel_h = 3, .kernel_w = 3, .pad_h = 1, .pad_w = 1, .groups = 2};
  // c/g*kh*kw = 27, oh*ow = 64, k/g = 2.
  for (conv_pass pass :
       {conv_pass::forward, conv_pass::backward_data, conv_pass::backward_filter}) {
    EXPECT_EQ(conv_workspace_bytes(conv_algo::direct, pass, in, p), 0u);
    EXPECT_EQ(conv_workspace_bytes(conv_algo::im2col_image, pass, in, p), 27u * 64 * 4);
    EXPECT_EQ(conv_workspace_bytes(conv_algo::im2col_batch, pass, in, p), 29u * 2 * 64 * 4);
    EXPECT_EQ(conv_workspace_bytes(conv_algo::im2col_batch, pass, in, p, 1), 29u * 64 * 4);
    EXPECT_EQ(conv_workspace_bytes(conv_algo::im2col_batch, pass, in, p, 9), 29u * 2 * 64 * 4);
  }
  EXPECT_EQ(conv_batch_chunk_for(in, p, 29u * 64 * 4 * 3 / 2), 1);
  EXPECT_EQ(conv_batch_chunk_for(in, p, 29u * 64 * 4 - 1), 0);
  EXPECT_EQ(conv_batch_chunk_for(in, p, std::size_t{1} << 40), 2);

  // A 1x1, stride-1, unpadded convolution reads its input as the im2col matrix.
  conv_params one{.out_channels = 5, .groups = 1};
  EXPECT_EQ(conv_workspace_bytes(conv_algo::im2col_image, conv_pass::forward, in, one), 0u);
  EXPECT_EQ(conv_workspace_bytes(conv_algo::im2col_image, conv_pass::backward_filter, in, one), 0u);
  EXPECT_EQ(conv_workspace_bytes(conv_algo::im2col_image, conv_pass::backward_data, in, one),
            6u * 64 * 4);
}

TEST(host_conv, bad_arguments_are_rejected_with_invalid_argument) {
  const shape4 in{1, 4, 5, 5};
  conv_params p{.out_channels = 2, .kernel_h = 3, .kernel_w = 3};
  std::vector<float> x(100), w(72), b(2), y(18);
  const std::size_t need = conv_workspace_bytes(conv_algo::im2col_image, conv_pass::forward, in, p);
  std::vector<float> ws(need / 4);
  // too small a workspace, a null workspace, a null tensor, groups that do not divide c
  EXPECT_THROW(conv_forward(context(), {conv_algo::im2col_image, 0, ws.data(), need - 4}, in, p,
                            x.data(), w.data(), b.data(), y.data()),
               invalid_argument);
  EXPECT_THROW(conv_forward(context(), {conv_algo::im2col_batch, 0, nullptr, 0}, in, p, x.data(),
                            w.data(), b.data(), y.data()),
               invalid_argument);
  EXPECT_THROW(conv_forward(context(), {}, in, p, nullptr, w.data(), b.data(), y.data()),
               invalid_argument);
  EXPECT_THROW(conv_forward(context(), {}, in, p, x.data(), w.data(), nullptr, y.data()),
               invalid_argument);
  conv_params bad = p;
  bad.groups = 3;
  EXPECT_THROW(conv_workspace_bytes(conv_algo::direct, conv_pass::forward, in, bad),
               invalid_argument);
  bad = p;
  bad.kernel_h = 9;
  EXPECT_THROW(conv_workspace_bytes(conv_algo::direct, conv_pass::forward, in, bad),
               invalid_argument);
  EXPECT_NO_THROW(conv_forward(context(), {conv_algo::im2col_image, 0, ws.data(), need}, in, p,
                               x.data(), w.data(), b.data(), y.data()));
}

// A shape large enough for several GEMM tiles and several tasks per loop.
conv_case determinism_case() {
  conv_case c;
  c.in = {3, 8, 17, 19};
  c.p = {.out_channels = 16,
         .kernel_h = 3,
         .kernel_w = 3,
         .stride_h = 1,
         .stride_w = 2,
         .pad_h = 1,
         .pad_w = 1,
         .groups = 2,
         .bias = true};
  return c;
}

TEST(host_conv, every_algorithm_is_bit_identical_across_runs_addresses_and_thread_counts) {
  const conv_case c = determinism_case();
  const auto x = random_vector(static_cast<std::size_t>(c.in.count()), 1);
  const auto w = random_vector(c.w_count(), 2);
  const auto b = random_vector(static_cast<std::size_t>(c.p.out_channels), 3);
  const auto dy = random_vector(static_cast<std::size_t>(c.out().count()), 4);
  const auto dx0 = random_vector(x.size(), 5);
  for (conv_algo a : k_algos) {
    for (std::int64_t chunk : {0, 2}) {
      if (a != conv_algo::im2col_batch && chunk != 0) continue;
      const std::string what = std::string(to_string(a)) + " chunk " + std::to_string(chunk);
      auto ws_floats = [&](conv_pass pass) {
        return conv_workspace_bytes(a, pass, c.in, c.p, chunk) / sizeof(float);
      };
      // The workspace is an output too: its contents on entry must not matter.
      expect_deterministic(
          what + " forward",
          [&](const kernel_context& ctx, const auto& in, const auto& out) {
            conv_forward(ctx, {a, chunk, out[1], ws_floats(conv_pass::forward) * 4}, c.in, c.p,
                         in[0], in[1], in[2], out[0]);
          },
          {x, w, b},
          {std::vector<float>(dy.size()), random_vector(ws_floats(conv_pass::forward), 9)});
      for (bool acc : {false, true}) {
        expect_deterministic(what + " backward data" + (acc ? " (accumulate)" : ""),
                             [&](const kernel_context& ctx, const auto& in, const auto& out) {
                               conv_backward_data(
                                   ctx, {a, chunk, out[1], ws_floats(conv_pass::backward_data) * 4},
                                   c.in, c.p, in[0], in[1], out[0], acc);
                             },
                             {w, dy}, {dx0, random_vector(ws_floats(conv_pass::backward_data), 8)});
      }
      expect_deterministic(what + " backward filter",
                           [&](const kernel_context& ctx, const auto& in, const auto& out) {
                             conv_backward_filter(
                                 ctx, {a, chunk, out[2], ws_floats(conv_pass::backward_filter) * 4},
                                 c.in, c.p, in[0], in[1], out[0], out[1]);
                           },
                           {x, dy},
                           {std::vector<float>(w.size()), std::vector<float>(b.size()),
                            random_vector(ws_floats(conv_pass::backward_filter), 7)});
    }
  }
}

TEST(host_conv, backward_data_accumulate_adds_the_overwritten_gradient) {
  const conv_case c = determinism_case();
  const auto w = random_vector(c.w_count(), 2);
  const auto dy = random_vector(static_cast<std::size_t>(c.out().count()), 4);
  for (conv_algo a : k_algos) {
    std::vector<float> ws(conv_workspace_bytes(a, conv_pass::backward_data, c.in, c.p) / 4);
    expect_accumulate_adds(
        to_string(a),
        [&](const kernel_context& ctx, float* dx, bool acc) {
          conv_backward_data(ctx, {a, 0, ws.data(), ws.size() * 4}, c.in, c.p, w.data(), dy.data(),
                             dx, acc);
        },
        static_cast<std::size_t>(c.in.count()));
  }
}

TEST(host_conv, backward_filter_overwrites_parameter_gradients) {
  const conv_case c = determinism_case();
  const auto x = random_vector(static_cast<std::size_t>(c.in.count()), 1);
  const auto dy = random_vector(static_cast<std::size_t>(c.out().count()), 4);
  for (conv_algo a : k_algos) {
    std::vector<float> ws(conv_workspace_bytes(a, conv_pass::backward_filter, c.in, c.p) / 4);
    const conv_config cfg{a, 0, ws.data(), ws.size() * 4};
    std::vector<float> dw1(c.w_count(), std::nanf("")), db1(16, std::nanf(""));
    std::vector<float> dw2(c.w_count(), 5.0f), db2(16, 5.0f);
    conv_backward_filter(context(), cfg, c.in, c.p, x.data(), dy.data(), dw1.data(), db1.data());
    conv_backward_filter(context(), cfg, c.in, c.p, x.data(), dy.data(), dw2.data(), db2.data());
    EXPECT_TRUE(same_bits(dw1, dw2) && same_bits(db1, db2)) << to_string(a);
  }
}

// ---- map windows (tiled segments) ------------------------------------------------------------

// Rows [r0, r1) and columns [c0, c1) of every plane of an (n, c, h, w) tensor.
std::vector<float> crop(const std::vector<float>& t, const shape4& s, std::int64_t r0,
                        std::int64_t r1, std::int64_t c0, std::int64_t c1) {
  std::vector<float> out;
  for (std::int64_t p = 0; p < s.n * s.c; ++p) {
    for (std::int64_t y = r0; y < r1; ++y) {
      for (std::int64_t x = c0; x < c1; ++x) out.push_back(t[(p * s.h + y) * s.w + x]);
    }
  }
  return out;
}

TEST(host_conv, a_window_has_the_whole_maps_bits_and_one_outside_the_map_is_refused) {
  // 13x11 input, 3x3 kernel, stride 2, padding 2, dilation 2: output 7x6. The window's
  // output rows [3, 6) x columns [0, 4) read input rows [4, 13) and columns [0, 9) (the
  // left padding skipped); the buffer holds rows [3, 13) (one more than read, as a tile's
  // union of needs can) and columns [0, 9).
  const shape4 in{2, 3, 13, 11};
  conv_params p;
  p.out_channels = 4, p.kernel_h = p.kernel_w = 3, p.stride_h = p.stride_w = 2;
  p.pad_h = p.pad_w = 2, p.dilation_h = p.dilation_w = 2;
  const shape4 out{2, 4, 7, 6};
  const auto x = random_vector(static_cast<std::size_t>(in.count()), 1);
  const auto w = random_vector(4 * 3 * 9, 2), b = random_vector(4, 3);
  std::vector<float> y(static_cast<std::size_t>(out.count()));
  const conv_config direct{};
  conv_forward(context(), direct, in, p, x.data(), w.data(), b.data(), y.data());
  const auto xs = crop(x, in, 3, 13, 0, 9);
  const map_window win{13, 11, 3, 0, 3, 0, 3, 4};
  std::vector<float> ys(2 * 4 * 3 * 4);
  conv_forward_window(context(), direct, {2, 3, 10, 9}, p, win, xs.data(), w.data(), b.data(),
                      ys.data());
  EXPECT_TRUE(same_bits(ys, crop(y, out, 3, 6, 0, 4)));
  // The same for max and average pooling 3x3, stride 2, padding 1 (output 7x6; the window
  // reads rows [5, 12) and columns [0, 8)).
  for (const pool_mode mode : {pool_mode::max, pool_mode::average}) {
    const pool_params q{mode, 3, 3, 2, 2, 1, 1, false};
    const shape4 pout{2, 3, 7, 6};
    std::vector<float> py(static_cast<std::size_t>(pout.count()));
    pool_forward(context(), in, q, x.data(), py.data());
    std::vector<float> pys(2 * 3 * 3 * 4);
    pool_forward_window(context(), {2, 3, 10, 9}, q, win, xs.data(), pys.data());
    EXPECT_TRUE(same_bits(pys, crop(py, pout, 3, 6, 0, 4)));
  }
  // Output rows [5, 8) do not exist.
  const map_window outside{13, 11, 3, 0, 5, 0, 3, 4};
  try {
    conv_forward_window(context(), direct, {2, 3, 10, 9}, p, outside, xs.data(), w.data(), b.data(),
                        ys.data());
    ADD_FAILURE() << "accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("expected both inside their maps"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace memweave::kernels::host::test
