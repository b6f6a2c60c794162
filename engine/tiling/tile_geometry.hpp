// Private to engine/tiling: the geometry behind tile_regions, shared by the execution, the
// workspace and the cost. A tile's regions are derived from its share of the segment's
// output, layer by layer in reverse topological order:
//   region(l) = bounding box of { need(c, l, region(c)) : c consumes l }  [ + owned(l) ]
// where need() is the part of l's output that c reads to compute region(c), clamped to
// l's map. owned(l) is added for BN only: BN's statistics (and its backward's sums) run
// over every position of its map, so each BN position must belong to exactly one tile; the
// tile that owns it computes it, even when nothing downstream in that tile reads it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/tiling/tiled_segment.hpp"

namespace memweave::tiling::detail {

/// Part `i` of `parts` near-equal consecutive parts of [0, extent): [lo, hi).
struct span {
  std::int64_t lo, hi;
};
span cut(std::int64_t extent, std::int64_t parts, std::int64_t i);

/// Tile `tile`'s (row-major) part of a map of `h` x `w` cut by the segment's grid; empty
/// when the map has fewer rows or columns than the grid has tiles.
region grid_part(const tiled_segment& s, std::int64_t tile, std::int64_t h, std::int64_t w);

/// The region of input `in_shape` (the producer's map) that layer `c` reads to compute
/// region `out` of its output, clamped to the map; empty when `out` is empty or only reads
/// the padding.
region need(const layer& c, const shape4& in_shape, const region& out);

/// The regions of one tile, indexed by local layer (see tile_regions).
std::vector<region> regions_of_tile(const tiled_segment& s, std::int64_t tile);

/// The number of tiles.
inline std::int64_t tile_count(const tiled_segment& s) {
  return s.tiles_h * s.tiles_w;
}

/// The shape (n, c, rows, columns) of local layer l's buffer for region r.
inline shape4 region_shape(const tiled_segment& s, std::size_t l, const region& r) {
  const shape4& o = s.layers[l].output_shape;
  return {o.n, o.c, r.height(), r.width()};
}

/// The last member that reads local layer l; for the segment's output, one past the last
/// member (it is read after them: copied out, or its gradient seeded).
inline std::size_t last_reader(const tiled_segment& s, std::size_t l) {
  if (l + 1 == s.layers.size()) return s.layers.size();
  std::size_t last = l;
  for (const layer_id c : s.layers[l].consumers) last = std::max<std::size_t>(last, c);
  return last;
}

/// Whether the member computes its output element-wise from the same position of each
/// input (ACT, BN, LRN, ADD, CONCAT: its input regions equal its own), rather than from a
/// window (CONV, POOL).
inline bool pointwise(const layer& l) {
  return l.type != layer_type::conv && l.type != layer_type::pool;
}

}  // namespace memweave::tiling::detail
