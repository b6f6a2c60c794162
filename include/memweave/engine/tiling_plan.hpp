// SFT's planner (segmented fused-tiled execution, issue 14): which layers of a network run as
// tiled segments, and in how many tiles, so that every step fits a budget.
//
// A layer "must tile" when the tensors one of its steps touches exceed the budget (its l_i,
// layer_memory.hpp, each tensor rounded to heap blocks as the executor counts them). Its
// segment starts at the nearest cut point before it (a layer whose output is the only
// tensor crossing from the layers up to it to the layers after it: the DATA layer, or the
// end of a residual block) and ends at the first cut point after it for which some tile
// grid fits; the grid is the smallest square power of two per side (clamped to the
// segment's output) whose fused step fits, i.e. the least halo recomputation. A segment
// holds only spatially-local layers (CONV, POOL but global, ACT, BN, LRN, ADD, CONCAT); the
// fused network runs every other layer as before, under any memory policy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "memweave/conv_workspace/conv_workspace_selector.hpp"
#include "memweave/engine/network.hpp"

namespace memweave {

/// One tiled segment of a network.
struct tiled_segment_choice {
  layer_id input = invalid_layer;  ///< the layer whose output the segment reads (untiled ids)
  std::vector<layer_id> members;   ///< in id order; the last one's output leaves the segment
  std::int64_t tiles_h = 1, tiles_w = 1;
  std::string first, last;             ///< the first and last members' names
  std::size_t untiled_bytes = 0;       ///< the largest l_i among the members' steps, untiled
  std::size_t step_bytes = 0;          ///< the fused layer's l_i
  std::size_t forward_workspace = 0;   ///< one tile's buffers in forward
  std::size_t backward_workspace = 0;  ///< and in backward
};

/// A network with its tiled segments fused.
struct tiling_plan {
  network net;  ///< the fused network (the input's layers when no segment was needed)
  std::vector<tiled_segment_choice> segments;
  std::size_t max_layer_bytes = 0;        ///< max l_i of the untiled network (blocks)
  std::size_t tiled_max_layer_bytes = 0;  ///< max l_i of the fused one
};

/// `net` with each segment fused into one TILED layer (named as its last member, so the
/// segment's output keeps its tensor name). Segments must not overlap; throws
/// invalid_argument naming the layer that breaks a segment (tiling::make_segment's checks).
network tile_network(const network& net, std::span<const tiled_segment_choice> segments);

/// Plans the segments of `net` for `budget_bytes` (tensors rounded to `block_bytes`). No
/// layer over the budget: no segment. Throws budget_too_small naming the segment and its
/// smallest tile when even the finest grid does not fit, or the layer that must tile but
/// cannot (a non-spatial layer over the budget, such as an FC on a huge feature map, or the
/// input batch itself); `knob` names the flag or variable that set the budget. Which layers
/// must tile, and so the segments, change with the budget, so the smallest step seen at this
/// one bounds nothing: with `name_least_budget` the message names instead the least budget
/// at which every layer tiles, found by bisection up to the untiled max(l_i) (where none
/// must; a search calling this at many budgets leaves it off).
/// `conv_ws` (nullptr: none): a convolution mode that names its algorithm (fixed, max), whose
/// workspace an untiled CONV step holds whole beside its tensors (promised_workspace_bytes),
/// as the executor's floor check counts it.
tiling_plan plan_tiling(const network& net, std::size_t budget_bytes, std::size_t block_bytes,
                        const std::string& knob, bool name_least_budget = false,
                        const conv_ws_options* conv_ws = nullptr);

}  // namespace memweave
