// Tiled segments' geometry: make_segment's checks, the tile regions (a partition of the
// output, halos by kernel, stride, padding and dilation, a hand-computed case), the
// workspace and the cost.
#include <gtest/gtest.h>

#include "memweave/core/error.hpp"
#include "tiling_test_util.hpp"

namespace memweave::tiling {
namespace {

using test::conv;
using test::wrap;
using zoo_detail::pool_p;

// DATA 1x2x20x20 -> conv 3x3 s1 p1 -> relu -> conv 3x3 s2 p1 -> maxpool 3 s2 p1, FC, loss.
network chain() {
  return wrap({1, 2, 20, 20}, [](network_builder& b, layer_handle x) {
    x = b.conv(x, conv(3, 3, 1, 1));
    x = b.relu(x);
    x = b.conv(x, conv(4, 3, 2, 1));
    return b.pool(x, pool_p(pool_mode::max, 3, 2, 1));
  });
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

TEST(MakeSegment, RenumbersTheMembersBehindAStandInForTheInput) {
  const network net = chain();
  const tiled_segment s = make_segment(net, 0, {1, 2, 3, 4}, 2, 3);
  ASSERT_EQ(s.layers.size(), 5u);
  EXPECT_EQ(s.layers[0].type, layer_type::data);
  EXPECT_EQ(s.layers[0].output_shape, (shape4{1, 2, 20, 20}));
  EXPECT_EQ(s.layers[0].consumers, std::vector<layer_id>{1});
  for (layer_id l = 1; l < 5; ++l) {
    EXPECT_EQ(s.layers[l].id, l);
    EXPECT_EQ(s.layers[l].inputs, std::vector<layer_id>{l - 1});
    EXPECT_EQ(s.layers[l].name, net[l].name);
  }
  EXPECT_TRUE(s.layers[4].consumers.empty());  // the FC outside is not part of the segment
  EXPECT_EQ(s.tiles_h, 2);
  EXPECT_EQ(s.tiles_w, 3);
  // A segment starting in the middle of the network.
  const tiled_segment mid = make_segment(net, 2, {3, 4}, 1, 1);
  EXPECT_EQ(mid.layers[0].name, net[2].name);
  EXPECT_EQ(mid.layers[1].inputs, std::vector<layer_id>{0});
}

TEST(MakeSegment, RejectsWhatTilingCannotRun) {
  const network net = chain();
  // FC (layer 5) is not spatially local.
  EXPECT_NE(error_of([&] {
              make_segment(net, 0, {1, 2, 3, 4, 5}, 1, 1);
            }).find("not spatially"),
            std::string::npos);
  // Layer 2 reads layer 1, outside the segment whose input is layer 0.
  EXPECT_NE(error_of([&] {
              make_segment(net, 0, {2, 3}, 1, 1);
            }).find("outside the segment"),
            std::string::npos);
  // In x -> conv a, conv c -> add(a, c): a (layer 1) is read by the ADD outside {1, 2};
  // only the last member may be read outside.
  const network dag = wrap({1, 2, 8, 8}, [](network_builder& b, layer_handle x) {
    return b.add({b.conv(x, conv(2, 3, 1, 1)), b.conv(x, conv(2, 1, 1, 0))});
  });
  EXPECT_NE(error_of([&] {
              make_segment(dag, 0, {1, 2}, 1, 1);
            }).find("is read by"),
            std::string::npos);
  EXPECT_NO_THROW(make_segment(dag, 0, {1, 2, 3}, 1, 1));
  // Out of order, empty, and grids outside [1, 5] x [1, 5] (the pool's output is 5x5).
  EXPECT_NE(error_of([&] {
              make_segment(net, 0, {2, 1}, 1, 1);
            }).find("increasing"),
            std::string::npos);
  EXPECT_NE(error_of([&] { make_segment(net, 0, {}, 1, 1); }).find("no members"),
            std::string::npos);
  for (const auto& [h, w] : std::vector<std::pair<int, int>>{{0, 1}, {1, 0}, {6, 1}, {1, 6}}) {
    const std::string e = error_of([&] { make_segment(net, 0, {1, 2, 3, 4}, h, w); });
    EXPECT_NE(e.find("tiles_h"), std::string::npos) << h << "x" << w << ": " << e;
    EXPECT_NE(e.find("5 x 5"), std::string::npos) << e;
  }
  EXPECT_NO_THROW(make_segment(net, 0, {1, 2, 3, 4}, 5, 5));
  // A global pooling is not local.
  const network global = wrap({1, 2, 8, 8}, [](network_builder& b, layer_handle x) {
    pool_params p;
    p.mode = pool_mode::average;
    p.global = true;
    return b.pool(b.conv(x, conv(2, 3, 1, 1)), p);
  });
  EXPECT_NE(error_of([&] {
              make_segment(global, 0, {1, 2}, 1, 1);
            }).find("not spatially"),
            std::string::npos);
}

TEST(TileRegions, TheTilesPartitionTheOutputAndCoverTheirReceptiveFields) {
  const network net = chain();
  for (const auto& [th, tw] : std::vector<std::pair<int, int>>{{1, 1}, {2, 3}, {4, 4}, {5, 5}}) {
    const tiled_segment s = make_segment(net, 0, {1, 2, 3, 4}, th, tw);
    const auto regions = tile_regions(s);
    ASSERT_EQ(regions.size(), static_cast<std::size_t>(th * tw));
    const shape4 out = s.layers.back().output_shape;
    std::vector<int> hits(static_cast<std::size_t>(out.h * out.w), 0);
    for (const auto& r : regions) {
      ASSERT_EQ(r.size(), s.layers.size());
      const region& o = r.back();
      EXPECT_FALSE(o.empty());
      for (std::int64_t y = o.y0; y < o.y1; ++y) {
        for (std::int64_t x = o.x0; x < o.x1; ++x) ++hits[static_cast<std::size_t>(y * out.w + x)];
      }
      // Every region lies inside its map.
      for (std::size_t l = 0; l < r.size(); ++l) {
        const shape4& m = s.layers[l].output_shape;
        EXPECT_TRUE(r[l].y0 >= 0 && r[l].y1 <= m.h && r[l].x0 >= 0 && r[l].x1 <= m.w);
      }
    }
    for (const int h : hits) EXPECT_EQ(h, 1) << th << "x" << tw;
    // The near-equal cut: sides differ by at most one.
    std::int64_t lo = out.h, hi = 0;
    for (const auto& r : regions) {
      lo = std::min(lo, r.back().height());
      hi = std::max(hi, r.back().height());
    }
    EXPECT_LE(hi - lo, 1);
  }
}

TEST(TileRegions, HalosFollowKernelStridePaddingAndDilation) {
  // Hand-computed, rows only (the columns are the same by symmetry of the setup):
  // 20x20 input, conv 3x3 s1 p1 (20), relu (20), conv 3x3 s2 p1 (10), maxpool 3 s2 p1 (5).
  // Tile row 0 of a 2-row grid owns output rows [0, 2):
  //   pool rows [0,2) read conv2 rows [0*2-1, 1*2-1+2] = [-1, 3] -> [0, 4)
  //   conv2 rows [0,4) read relu rows [0*2-1, 3*2-1+2] = [-1, 7] -> [0, 8)
  //   relu = its input conv1's region [0, 8); conv1 rows [0,8) read [-1, 8] -> [0, 9)
  // Tile row 1 owns [2, 5): pool reads [2*2-1, 4*2-1+2] = [3, 9] -> [3, 10); conv2 rows
  // [3, 10) read [5, 19] -> [5, 20); conv1 rows [5, 20) read [4, 20] -> [4, 20).
  const tiled_segment s = make_segment(chain(), 0, {1, 2, 3, 4}, 2, 1);
  const auto r = tile_regions(s);
  const std::vector<std::pair<int, int>> top{{0, 9}, {0, 8}, {0, 8}, {0, 4}, {0, 2}};
  const std::vector<std::pair<int, int>> bottom{{4, 20}, {5, 20}, {5, 20}, {3, 10}, {2, 5}};
  for (std::size_t l = 0; l < 5; ++l) {
    EXPECT_EQ(r[0][l], (region{top[l].first, top[l].second, 0, s.layers[l].output_shape.w}))
        << "layer " << l;
    EXPECT_EQ(r[1][l], (region{bottom[l].first, bottom[l].second, 0, s.layers[l].output_shape.w}))
        << "layer " << l;
  }
  // Dilation 2, kernel 3, pad 2, stride 1 on a 9-wide map cut in 3 columns [0,3) [3,6) [6,9):
  // the middle tile reads [3-2, 5-2+4] = [1, 7] -> [1, 8).
  const network dil = wrap({1, 1, 9, 9}, [](network_builder& b, layer_handle x) {
    return b.conv(x, conv(1, 3, 1, 2, 2));
  });
  const auto d = tile_regions(make_segment(dil, 0, {1}, 1, 3));
  EXPECT_EQ(d[1][0], (region{0, 9, 1, 8}));
  EXPECT_EQ(d[1][1], (region{0, 9, 3, 6}));
}

TEST(TileRegions, AResidualJoinTakesTheBoundingBoxOfItsConsumersNeeds) {
  // x -> conv 5x5 p2 (a) and conv 1x1 (b) -> add(a, b): x's region is the union of the two
  // needs, the wider 5x5 one.
  const network net = wrap({1, 2, 12, 12}, [](network_builder& b, layer_handle x) {
    const layer_handle a = b.conv(x, conv(2, 5, 1, 2));
    const layer_handle c = b.conv(x, conv(2, 1, 1, 0));
    return b.add({a, c});
  });
  const auto r = tile_regions(make_segment(net, 0, {1, 2, 3}, 3, 1));
  EXPECT_EQ(r[1][3], (region{4, 8, 0, 12}));
  EXPECT_EQ(r[1][2], (region{4, 8, 0, 12}));
  EXPECT_EQ(r[1][1], (region{4, 8, 0, 12}));
  EXPECT_EQ(r[1][0], (region{2, 10, 0, 12}));
}

TEST(TileRegions, BnOwnsItsShareOfTheMapEvenWhereNothingDownstreamReadsIt) {
  // A 1x1 conv of stride 2 reads only the even rows of BN's output; BN's statistics need
  // every row, so each tile's BN region also holds its grid part of BN's map.
  const network net = wrap({1, 1, 8, 8}, [](network_builder& b, layer_handle x) {
    return b.conv(b.bn(x), conv(1, 1, 2, 0));
  });
  const auto r = tile_regions(make_segment(net, 0, {1, 2}, 2, 1));
  EXPECT_EQ(r[0][2], (region{0, 2, 0, 4}));
  EXPECT_EQ(r[0][1], (region{0, 4, 0, 8}));  // needs [0, 3), owns [0, 4)
  EXPECT_EQ(r[1][1], (region{4, 8, 0, 8}));  // needs [4, 7), owns [4, 8)
}

TEST(TiledCost, WorkspaceShrinksWithTheTilesAndFlopsCountTheHalos) {
  const network net = chain();
  const tiled_segment one = make_segment(net, 0, {1, 2, 3, 4}, 1, 1);
  const tiled_segment four = make_segment(net, 0, {1, 2, 3, 4}, 4, 4);
  // One tile: whole maps. The chain's buffers (floats): input 800, conv 1200, relu 1200,
  // conv 400, pool 100. Forward, a value lives from its step to its reader's: the peak is
  // input + conv + relu while the relu runs (the second conv and the pool reuse the
  // input's and the first conv's memory). Backward, a value also lives until the last
  // backward reading it (CONV reads its input, ReLU its output, max POOL both) and a gradient
  // from its reader's backward to its own: the peak is at the ReLU's backward, which reads
  // its output and its gradient and writes the first CONV's gradient, while the input waits
  // for that CONV's weight gradient; the first CONV's output is long gone (no backward
  // reads it).
  auto bytes = [&](std::size_t l) { return one.layers[l].output_shape.bytes(); };
  EXPECT_EQ(tiled_workspace_bytes(one, false), bytes(0) + bytes(1) + bytes(2));
  EXPECT_EQ(tiled_workspace_bytes(one, true), bytes(0) + 2 * bytes(2) + bytes(1));
  // The largest of 16 tiles (2x2 outputs, 12x12 input rows and columns) with its halos.
  EXPECT_LT(tiled_workspace_bytes(four, false), tiled_workspace_bytes(one, false) / 2);
  EXPECT_LT(tiled_workspace_bytes(four, true), tiled_workspace_bytes(one, true) / 2);
  // Untiled flops equal the members' own; the halos add recomputed work.
  double untiled = 0;
  for (std::size_t l = 1; l < one.layers.size(); ++l) {
    untiled += layers::forward_flops(one.layers[l], {one.layers[l - 1].output_shape});
  }
  EXPECT_DOUBLE_EQ(tiled_forward_flops(one), untiled);
  EXPECT_GT(tiled_forward_flops(four), untiled);
  // Backward: the recomputed forward plus the backward (twice the forward here).
  EXPECT_DOUBLE_EQ(tiled_backward_flops(one), 3 * untiled);
}

TEST(TiledCost, BnAddsItsStatisticsPassAndTheBackwardRecomputes) {
  // x (1x1x8x8) -> BN (8 flops per element: 512) -> conv 1x1 s2 (4x4 outputs, 2 flops each:
  // 32). Forward: 544, plus BN's statistics pass (the sums of x and x^2): its ancestors'
  // forward (the input only: 0) and 2 flops per element (128). Backward: the recomputed forward
  // (544), the backward (twice the forward: 1088), and BN's sums pass: a recomputed forward, the
  // conv's backward (64) and the sums (128).
  const network net = wrap({1, 1, 8, 8}, [](network_builder& b, layer_handle x) {
    return b.conv(b.bn(x), conv(1, 1, 2, 0));
  });
  const tiled_segment s = make_segment(net, 0, {1, 2}, 1, 1);
  EXPECT_DOUBLE_EQ(tiled_forward_flops(s), 544 + 128);
  EXPECT_DOUBLE_EQ(tiled_backward_flops(s), 544 + 1088 + 544 + 64 + 128);
}

}  // namespace
}  // namespace memweave::tiling
