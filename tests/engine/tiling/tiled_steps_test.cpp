// The fused tiled steps against the members run untiled with the ordinary host layer steps:
// forward bit-identical (memcmp) on chains, a residual ADD/CONCAT DAG and random chains
// (strides, padding, dilation, pooling windows that do not divide the tiles) for grids from
// 1x1 to one tile per output pixel, BN segments (training and evaluation) included;
// backward within a bound derived from float32 rounding and the number of tiles (through
// BN and LRN within a stated tolerance), and bit-identical across runs and thread counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "tiling_test_util.hpp"

namespace memweave::tiling {
namespace {

using test::conv;
using test::run_tiled;
using test::run_untiled;
using test::same_bits;
using test::wrap;
using zoo_detail::pool_p;

// 2x3x41x37 -> conv 3x3 p1 (41x37) -> relu -> conv 3x3 s2 p2 dilation 2 (21x19) -> max pool
// 3 s2 p1 (11x10) -> conv 5x5 p2 (11x10) -> average pool 3 s2 p1 (6x5) -> tanh.
network conv_pool_chain() {
  return wrap({2, 3, 41, 37}, [](network_builder& b, layer_handle x) {
    x = b.relu(b.conv(x, conv(4, 3, 1, 1)));
    x = b.conv(x, conv(5, 3, 2, 2, 2));
    x = b.pool(x, pool_p(pool_mode::max, 3, 2, 1));
    x = b.conv(x, conv(4, 5, 1, 2));
    x = b.pool(x, pool_p(pool_mode::average, 3, 2, 1));
    return b.act(x, {act_mode::tanh});
  });
}

// A residual block and a concatenation: x (1x4x30x30) -> conv 3x3 p1 -> relu -> conv 3x3
// p1, plus conv 1x1 of x; ADD -> relu -> max pool 2 s2 (15x15); CONCAT with conv 3x3 s2 p1
// of x (15x15); conv 3x3 p1 (15x15).
network residual() {
  return wrap({1, 4, 30, 30}, [](network_builder& b, layer_handle x) {
    const layer_handle a = b.conv(b.relu(b.conv(x, conv(4, 3, 1, 1))), conv(4, 3, 1, 1));
    const layer_handle c = b.conv(x, conv(4, 1, 1, 0));
    const layer_handle j = b.pool(b.relu(b.add({a, c})), pool_p(pool_mode::max, 2, 2, 0));
    const layer_handle f = b.conv(x, conv(3, 3, 2, 1));
    return b.conv(b.concat({j, f}), conv(3, 3, 1, 1));
  });
}

// x (2x3x20x18) -> conv 3x3 p1 -> BN -> relu (r) -> conv 3x3 s2 p1 -> BN, ADD max pool 3 s2 p1
// of r (10x9) -> relu -> conv 1x1 s2 (5x5): the last CONV reads only the even positions,
// so BN's statistics need the positions each tile owns beyond what it reads.
network bn_segment() {
  return wrap({2, 3, 20, 18}, [](network_builder& b, layer_handle x) {
    const layer_handle r = b.relu(b.bn(b.conv(x, conv(4, 3, 1, 1))));
    const layer_handle a = b.bn(b.conv(r, conv(4, 3, 2, 1)));
    const layer_handle j = b.relu(b.add({a, b.pool(r, pool_p(pool_mode::max, 3, 2, 1))}));
    return b.conv(j, conv(3, 1, 2, 0));
  });
}

// Output of a window of `k` taps `d` apart, stride s, padding p over `in`; < 1 when none.
std::int64_t window_out(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p,
                        std::int64_t d = 1) {
  const std::int64_t span = in + 2 * p - (d * (k - 1) + 1);
  return span < 0 ? 0 : span / s + 1;
}

// A random chain of 3 to 6 CONV, POOL, ACT and (with `lrn`) LRN layers on a random input,
// keeping every map at least 3x3.
network random_chain(std::uint32_t seed, bool lrn) {
  std::mt19937 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const shape4 in{pick(1, 2), pick(1, 3), pick(18, 34), pick(18, 34)};
  return wrap(in, [&](network_builder& b, layer_handle x) {
    const int count = pick(3, 6);
    for (int i = 0; i < count; ++i) {
      const shape4 s = b.shape(x);
      const int kind = pick(0, lrn ? 3 : 2);
      if (kind == 0) {
        conv_params p;
        p.out_channels = pick(1, 4);
        p.kernel_h = pick(1, 4), p.kernel_w = pick(1, 4);
        p.stride_h = pick(1, 2), p.stride_w = pick(1, 2);
        p.dilation_h = pick(1, 2), p.dilation_w = pick(1, 2);
        p.pad_h = pick(0, static_cast<int>(p.kernel_h)), p.pad_w = pick(0, 2);
        p.bias = pick(0, 1) == 1;
        if (window_out(s.h, p.kernel_h, p.stride_h, p.pad_h, p.dilation_h) < 3 ||
            window_out(s.w, p.kernel_w, p.stride_w, p.pad_w, p.dilation_w) < 3)
          continue;
        x = b.conv(x, p);
      } else if (kind == 1) {
        pool_params p;
        p.mode = pick(0, 1) == 0 ? pool_mode::max : pool_mode::average;
        p.kernel_h = pick(2, 3), p.kernel_w = pick(1, 3);
        p.stride_h = pick(1, 3), p.stride_w = pick(1, 2);
        p.pad_h = pick(0, static_cast<int>(p.kernel_h) - 1);
        p.pad_w = pick(0, static_cast<int>(p.kernel_w) - 1);
        if (window_out(s.h, p.kernel_h, p.stride_h, p.pad_h) < 3 ||
            window_out(s.w, p.kernel_w, p.stride_w, p.pad_w) < 3)
          continue;
        x = b.pool(x, p);
      } else if (kind == 2) {
        x = b.act(x, {pick(0, 1) == 0 ? act_mode::relu : act_mode::tanh});
      } else {
        x = b.lrn(x, {3, 1e-2f, 0.75f, 2.0f});
      }
    }
    return b.relu(x);
  });
}

// The grids of a test: 1x1, 2x3, 4x4 (when the output allows) and one tile per pixel.
std::vector<std::pair<std::int64_t, std::int64_t>> grids(const shape4& out) {
  std::vector<std::pair<std::int64_t, std::int64_t>> g{{1, 1}, {out.h, out.w}};
  if (out.h >= 2 && out.w >= 3) g.emplace_back(2, 3);
  if (out.h >= 4 && out.w >= 4) g.emplace_back(4, 4);
  return g;
}

// Forward: the tiled output has the untiled bits, for every grid.
void expect_forward_bit_identical(const network& net, std::uint32_t seed) {
  const tiled_segment one = test::whole_body(net, 1, 1);
  const test::segment_data d = test::random_data(one, seed);
  const test::segment_result untiled = run_untiled(one, d, false);
  for (const auto& [th, tw] : grids(one.layers.back().output_shape)) {
    const tiled_segment s = test::whole_body(net, th, tw);
    EXPECT_TRUE(same_bits(run_tiled(s, d, false).output, untiled.output))
        << net.summary() << "grid " << th << "x" << tw;
  }
}

TEST(TiledForward, ChainIsBitIdenticalToUntiled) {
  expect_forward_bit_identical(conv_pool_chain(), 1);
}

TEST(TiledForward, ResidualAddConcatDagIsBitIdenticalToUntiled) {
  expect_forward_bit_identical(residual(), 2);
}

TEST(TiledForward, RandomChainsAreBitIdenticalToUntiled) {
  for (std::uint32_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE("random chain " + std::to_string(seed));
    expect_forward_bit_identical(random_chain(seed, true), seed);
  }
}

// ---- backward ------------------------------------------------------------------------------

// The bound on |tiled - untiled| of each gradient element. Both sum the same products,
// rounded to float32 (u = 2^-24) along chains of at most L additions per member (L: the
// members' longest per-element sum: CONV k/groups*kh*kw (data) or output rows + images
// (weights), POOL kh*kw, 2 for the rest) plus, tiled, one per tile whose partial sums meet
// in the element (at most T, the number of tiles); the error compounds over the D members a
// gradient passes. Each rounding errs by at most u times the sum of the absolute values of
// the terms, A, which the untiled backward computes when run on |w|, |x| and |dy| (every
// member's gradient map is then a non-negative combination). So
//   |tiled - untiled| <= 2 * D * (L + T) * u * A.
double rounding_factor(const tiled_segment& s) {
  std::int64_t longest = 2;
  for (std::size_t m = 1; m < s.layers.size(); ++m) {
    const layer& l = s.layers[m];
    if (l.type == layer_type::conv) {
      const auto& p = std::get<conv_params>(l.params);
      longest = std::max({longest, p.out_channels / p.groups * p.kernel_h * p.kernel_w,
                          l.output_shape.h + l.output_shape.n});
    } else if (l.type == layer_type::pool) {
      const auto& p = std::get<pool_params>(l.params);
      longest = std::max(longest, p.kernel_h * p.kernel_w);
    }
  }
  const auto depth = static_cast<double>(s.layers.size() - 1);
  return 2.0 * depth * static_cast<double>(longest + s.tiles_h * s.tiles_w) * std::ldexp(1.0, -24);
}

void expect_within(const std::vector<float>& tiled, const std::vector<float>& untiled,
                   const std::vector<float>& bound, double factor, const std::string& what) {
  const long at =
      test::first_beyond(tiled, untiled, [&](std::size_t i) { return factor * bound[i] + 1e-30; });
  EXPECT_EQ(at, -1) << what << ": element " << at << " tiled " << tiled[std::max(at, 0L)]
                    << " untiled " << untiled[std::max(at, 0L)] << " bound "
                    << factor * bound[std::max(at, 0L)];
}

void expect_backward_within_bound(const network& net, std::uint32_t seed) {
  const tiled_segment one = test::whole_body(net, 1, 1);
  const test::segment_data d = test::random_data(one, seed);
  const test::segment_result untiled = run_untiled(one, d);
  const test::segment_result bound = test::run_untiled_abs(one, d);
  for (const auto& [th, tw] : grids(one.layers.back().output_shape)) {
    const tiled_segment s = test::whole_body(net, th, tw);
    const test::segment_result tiled = run_tiled(s, d);
    const double f = rounding_factor(s);
    const std::string grid = "grid " + std::to_string(th) + "x" + std::to_string(tw);
    for (std::size_t i = 0; i < tiled.param_grads.size(); ++i) {
      expect_within(tiled.param_grads[i], untiled.param_grads[i], bound.param_grads[i], f,
                    grid + " parameter gradient " + std::to_string(i));
    }
    expect_within(tiled.input_grad, untiled.input_grad, bound.input_grad, f,
                  grid + " input gradient");
  }
}

TEST(TiledBackward, ChainIsWithinTheRoundingBoundOfUntiled) {
  expect_backward_within_bound(conv_pool_chain(), 3);
}

TEST(TiledBackward, ResidualDagIsWithinTheRoundingBoundOfUntiled) {
  expect_backward_within_bound(residual(), 4);
}

TEST(TiledBackward, RandomChainsAreWithinTheRoundingBoundOfUntiled) {
  for (std::uint32_t seed = 21; seed <= 26; ++seed) {
    SCOPED_TRACE("random chain " + std::to_string(seed));
    expect_backward_within_bound(random_chain(seed, false), seed);
  }
}

TEST(TiledBackward, IsBitIdenticalAcrossRunsAndThreadCounts) {
  for (const network& net : {conv_pool_chain(), residual(), bn_segment()}) {
    const tiled_segment s = test::whole_body(net, 2, 3);
    const test::segment_data d = test::random_data(s, 5);
    const test::segment_result a = run_tiled(s, d, true, 2);
    for (const int threads : {2, 1, 4}) {
      const test::segment_result b = run_tiled(s, d, true, threads);
      EXPECT_TRUE(same_bits(a.output, b.output)) << threads;
      EXPECT_TRUE(same_bits(a.input_grad, b.input_grad)) << threads;
      for (std::size_t i = 0; i < a.param_grads.size(); ++i) {
        EXPECT_TRUE(same_bits(a.param_grads[i], b.param_grads[i])) << threads << " " << i;
      }
    }
  }
}

// ---- BN and LRN ----------------------------------------------------------------------------

// BN's whole-image statistics are exact sums (exact_sum.hpp): summed over the tiles' owned
// positions they have the untiled bits, and so has everything after them.
TEST(TiledForward, BnSegmentIsBitIdenticalToUntiled) {
  const network net = bn_segment();
  const tiled_segment one = test::whole_body(net, 1, 1);
  const test::segment_data d = test::random_data(one, 7);
  const test::segment_result untiled = run_untiled(one, d, false);
  for (const auto& [th, tw] : grids(one.layers.back().output_shape)) {
    const tiled_segment s = test::whole_body(net, th, tw);
    const test::segment_result tiled = run_tiled(s, d, false);
    const std::string grid = "grid " + std::to_string(th) + "x" + std::to_string(tw);
    EXPECT_TRUE(same_bits(tiled.output, untiled.output)) << grid;
    for (std::size_t i = 0; i < tiled.aux.size(); ++i) {  // saved mean and inverse std
      EXPECT_TRUE(same_bits(tiled.aux[i], untiled.aux[i])) << grid << " aux " << i;
    }
    for (std::size_t i = 0; i < tiled.params.size(); ++i) {  // running statistics
      EXPECT_TRUE(same_bits(tiled.params[i], untiled.params[i])) << grid << " parameter " << i;
    }
  }
}

TEST(TiledForward, BnInferenceIsBitIdenticalToUntiled) {
  // Evaluation normalises with the running statistics: point-wise, no passes.
  const network net = bn_segment();
  const tiled_segment one = test::whole_body(net, 1, 1);
  test::segment_data d = test::random_data(one, 8);
  std::mt19937 rng(8);
  std::size_t i = 0;
  for (std::size_t m = 1; m < one.layers.size(); ++m) {
    for (const param_tensor_spec& p : one.layers[m].param_tensors) {
      if (p.name == "running_mean" || p.name == "running_var") {
        d.params[i] = test::random_values(d.params[i].size(), rng, 0.5f, 1.5f);
      }
      ++i;
    }
  }
  const std::vector<float> untiled = run_untiled(one, d, false, 2, false, true).output;
  for (const auto& [th, tw] : grids(one.layers.back().output_shape)) {
    const tiled_segment s = test::whole_body(net, th, tw);
    EXPECT_TRUE(same_bits(run_tiled(s, d, false, 2, true).output, untiled)) << th << "x" << tw;
  }
}

// Backward through BN and LRN: their gradients mix signs (no bound from absolute values),
// and BN divides by the batch's standard deviation, which scales rounding up; checked
// against untiled at 1e-4 (about 2^10 u) of the largest gradient magnitude of the segment,
// far below what a missing or doubled tile contribution gives (order 1). The scale is the
// segment's, not each tensor's: a CONV bias before a BN has a true gradient of 0 (BN
// removes the mean), so its own magnitude is rounding noise.
void expect_backward_near(const network& net, std::uint32_t seed) {
  const tiled_segment one = test::whole_body(net, 1, 1);
  const test::segment_data d = test::random_data(one, seed);
  const test::segment_result untiled = run_untiled(one, d);
  double scale = 0;
  auto widen = [&](const std::vector<float>& g) {
    for (const float v : g) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  };
  for (const auto& g : untiled.param_grads) widen(g);
  widen(untiled.input_grad);
  const auto tol = [&](std::size_t) { return 1e-4 * scale; };
  for (const auto& [th, tw] : grids(one.layers.back().output_shape)) {
    const test::segment_result tiled = run_tiled(test::whole_body(net, th, tw), d);
    const std::string grid = "grid " + std::to_string(th) + "x" + std::to_string(tw);
    for (std::size_t i = 0; i < tiled.param_grads.size(); ++i) {
      EXPECT_EQ(test::first_beyond(tiled.param_grads[i], untiled.param_grads[i], tol), -1)
          << grid << " parameter gradient " << i << " scale " << scale;
    }
    EXPECT_EQ(test::first_beyond(tiled.input_grad, untiled.input_grad, tol), -1)
        << grid << " input gradient, scale " << scale;
  }
}

TEST(TiledBackward, BnSegmentIsNearUntiled) {
  expect_backward_near(bn_segment(), 9);
}

TEST(TiledBackward, LrnChainsAreNearUntiled) {
  for (std::uint32_t seed = 31; seed <= 34; ++seed) {
    SCOPED_TRACE("random chain " + std::to_string(seed));
    expect_backward_near(random_chain(seed, true), seed);
  }
}

}  // namespace
}  // namespace memweave::tiling
