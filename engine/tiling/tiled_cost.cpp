// What a fused segment step costs: its workspace (the largest tile's buffers, laid out as
// the execution lays them out) and its floating-point operations for the null device (the
// members' own cost model, layers::forward_flops/backward_flops, applied to region-sized
// shapes, so halos count as recomputed work). Pure; thread-safe.
#include <algorithm>
#include <set>

#include "engine/layers/layer_step.hpp"
#include "engine/tiling/tile_buffers.hpp"
#include "engine/tiling/tile_run.hpp"

namespace memweave::tiling {

namespace {

// Member m's forward (backward) flops over region r[m] of one tile.
double member_flops(const tiled_segment& s, const std::vector<region>& r, std::size_t m,
                    bool backward) {
  if (r[m].empty()) return 0.0;
  layer l = s.layers[m];
  l.output_shape = detail::region_shape(s, m, r[m]);
  std::vector<shape4> in;
  for (const layer_id p : l.inputs) {
    in.push_back(detail::region_shape(s, p, detail::pointwise(l) ? r[m] : r[p]));
  }
  return backward ? layers::backward_flops(l, in) : layers::forward_flops(l, in);
}

// One sweep's forward flops of the members marked in `run` (all when empty), all tiles.
double sweep_flops(const tiled_segment& s, const std::vector<std::vector<region>>& regions,
                   const std::vector<bool>& run, bool backward, std::size_t from = 1) {
  double f = 0.0;
  for (const auto& r : regions) {
    for (std::size_t m = from; m < s.layers.size(); ++m) {
      if (run.empty() || run[m]) f += member_flops(s, r, m, backward);
    }
  }
  return f;
}

// BN's statistics over its whole map: one pass summing x and x^2, or (backward) one summing dy
// and dy * x_hat: about two flops per element.
double statistics_flops(const layer& bn) {
  return 2.0 * static_cast<double>(bn.output_shape.count());
}

}  // namespace

std::size_t tiled_workspace_bytes(const tiled_segment& s, bool backward) {
  // A layout depends only on the regions' sizes, which a near-equal grid repeats for most
  // tiles: lay out each distinct set of sizes once (thousands of tiles, a handful of sets).
  std::set<std::vector<std::int64_t>> seen;
  std::size_t floats = 0;
  for (const auto& r : tile_regions(s)) {
    std::vector<std::int64_t> sizes;
    sizes.reserve(2 * r.size());
    for (const region& x : r) sizes.insert(sizes.end(), {x.height(), x.width()});
    if (!seen.insert(std::move(sizes)).second) continue;
    floats = std::max(floats, detail::layout_tile(s, r, backward).floats);
  }
  return floats * sizeof(float);
}

double tiled_forward_flops(const tiled_segment& s) {
  const auto regions = tile_regions(s);
  double f = sweep_flops(s, regions, {}, false);
  for (const std::size_t b : detail::bn_members(s)) {
    std::vector<bool> up = detail::ancestors(s, b);
    up[b] = false;  // the statistics pass stops at the BN's input
    f += sweep_flops(s, regions, up, false) + statistics_flops(s.layers[b]);
  }
  return f;
}

double tiled_backward_flops(const tiled_segment& s) {
  const auto regions = tile_regions(s);
  const double recompute = sweep_flops(s, regions, {}, false);
  double f = recompute + sweep_flops(s, regions, {}, true);
  for (const std::size_t b : detail::bn_members(s)) {
    // A sums pass: the recomputed forward, the backward of the members after b, the sums.
    f += recompute + sweep_flops(s, regions, {}, true, b + 1) + statistics_flops(s.layers[b]);
  }
  return f;
}

}  // namespace memweave::tiling
