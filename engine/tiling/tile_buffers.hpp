// Private to engine/tiling: where one tile's buffers sit in the fused step's workspace, the
// one layout both tiled_workspace_bytes and the execution use.
//
// Every local layer gets a buffer of its region for all images of the batch (n, c, region
// rows, region columns). Looping over the images inside a tile would divide the buffers by
// n, but huge images are trained at batch 1, where it buys nothing, and it would cut the
// kernels' parallelism (they parallelise over images x channels). Buffers share memory when
// their lifetimes do not meet (first fit in order of their first step) on one timeline: the
// (recomputed) forward, then the backward, last member first. A value lives from its step to
// its last reader, forward or backward (a backward reads its own output for ACT, LRN and max
// POOL, its input for CONV, BN, LRN and max POOL); a gradient from its last reader's
// backward (the first to add to it) to its own. The scratch
// holds the crops of a point-wise member's inputs (and of their gradients) whose producer's
// region is larger than the member's, and BN's owned part during its statistics pass.
#pragma once

#include <cstddef>
#include <vector>

#include "engine/kernels/host/kernel_context.hpp"
#include "engine/tiling/tile_geometry.hpp"

namespace memweave::tiling::detail {

/// Offsets in floats from the workspace's start.
struct tile_layout {
  std::vector<std::size_t> value;  ///< per local layer: its output's region
  std::vector<std::size_t> grad;   ///< backward: per local layer, its region's gradient
  std::size_t scratch = 0;         ///< crops (see above)
  std::size_t floats = 0;          ///< the total
};

/// The layout of one tile whose regions are `regions`.
tile_layout layout_tile(const tiled_segment& s, const std::vector<region>& regions, bool backward);

/// Copies (add: adds) rectangle `r` of `planes` planes from a buffer holding region `from`
/// of its map to one holding region `to` of the same map (r inside both).
void copy_rect(const kernels::host::kernel_context& ctx, std::int64_t planes, const float* src,
               const region& from, float* dst, const region& to, const region& r, bool add);

/// The whole map of a layer as a region.
inline region whole(const shape4& s) {
  return {0, s.h, 0, s.w};
}

}  // namespace memweave::tiling::detail
