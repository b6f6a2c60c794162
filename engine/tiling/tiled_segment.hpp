// Segmented fused-tiled execution (SFT, ../shared/papers/segmented-fused-tiled.txt §3-5): a
// segment of consecutive spatially-local layers runs tile by tile over the image, so that its
// full-size intermediate tensors never exist; only the segment's output (and its input) do.
//
// In the network a segment is one fused layer (layer_type::tiled, whose tiled_params point to
// a tiled_segment): the route, the tensor table, liveness, the memory schedule and the
// executor see one layer whose step reads the segment's input and writes its output, with a
// workspace holding one tile's buffers. Its parameter, gradient and aux tensors are the
// members' own, concatenated (see "Layout" below).
//
// Layout of the fused layer's step_io (engine/layers/layer_step.hpp):
//   inputs[0] / input_shapes[0]  the segment's input (the output of local layer 0's stand-in)
//   output / output_grad         the last member's output and its gradient
//   input_grads[0]               the gradient of the segment's input (data null: none wanted)
//   params                       every member's param_tensors, members in local-id order
//   param_grads                  every member's trained parameters' gradients, same order
//   aux                          every member's aux_tensors (BN's saved mean and inverse
//                                std, whole-image per-channel statistics), same order
//   workspace                    tiled_workspace_bytes(segment, forward or backward) bytes
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "memweave/engine/layer.hpp"
#include "memweave/engine/network.hpp"

namespace memweave::layers {
struct step_io;
}
namespace memweave::kernels::host {
class kernel_context;
}

namespace memweave::tiling {

/// A half-open rectangle of one feature map: rows [y0, y1), columns [x0, x1).
struct region {
  std::int64_t y0 = 0, y1 = 0, x0 = 0, x1 = 0;
  std::int64_t height() const noexcept { return y1 - y0; }
  std::int64_t width() const noexcept { return x1 - x0; }
  bool empty() const noexcept { return y1 <= y0 || x1 <= x0; }
  friend bool operator==(const region&, const region&) = default;
};

/// A segment and its tile grid. `layers` are copies of the network's layers renumbered
/// locally (layer::id = index, layer::inputs local ids): local layer 0 stands for the
/// segment's input (type DATA, output_shape = the input's shape, no parameters); 1..k are
/// the members in topological order; the last one's output is the segment's output, the
/// only member output read outside the segment. Members are CONV, POOL (not global), ACT,
/// BN, LRN, ADD and CONCAT. The grid cuts the segment's output into tiles_h x tiles_w tiles
/// (row-major), every output pixel in exactly one tile.
struct tiled_segment {
  std::vector<layer> layers;
  std::int64_t tiles_h = 1, tiles_w = 1;
};

/// Whether layer `l` may be a member of a segment: its output element (y, x) depends only on
/// a bounded window of its inputs around (y, x) (CONV, POOL but global or adaptive, ACT, BN,
/// LRN, ADD, CONCAT).
bool spatially_local(const layer& l);

/// The segment of `net` whose input is layer `input`'s output and whose members are
/// `members` (ids in increasing order; the last is the output), cut into tiles_h x tiles_w
/// tiles. Throws invalid_argument naming the layer when a member is not a spatially-local
/// type, reads a layer outside the segment other than `input`, or (all but the last) is
/// read outside it, or when the grid is not in [1, output height] x [1, output width].
tiled_segment make_segment(const network& net, layer_id input, const std::vector<layer_id>& members,
                           std::int64_t tiles_h, std::int64_t tiles_w);

/// For each tile (row-major), for each local layer, the region of that layer's output the
/// tile computes (layer 0: the region of the segment's input it reads), clamped to the
/// feature map: the tile's share of the segment output propagated back through every
/// member by its kernel, stride, padding and dilation (the union over a layer's consumers).
std::vector<std::vector<region>> tile_regions(const tiled_segment& s);

/// Workspace bytes of the fused forward (backward) step: the largest tile's buffers.
std::size_t tiled_workspace_bytes(const tiled_segment& s, bool backward);

/// The null device's cost of the fused steps in floating-point operations: every member's
/// work over its tile regions (halos recomputed), BN's extra statistics pass, and in
/// backward the recomputed tile forward.
double tiled_forward_flops(const tiled_segment& s);
double tiled_backward_flops(const tiled_segment& s);

/// The fused forward / backward on the host (io laid out as above). Forward writes the
/// segment's output bit-identically to running the members untiled; backward recomputes
/// each tile's forward and accumulates the members' weight gradients over the tiles in a
/// fixed order.
void tiled_forward(const kernels::host::kernel_context& ctx, const tiled_segment& s,
                   const layers::step_io& io);
void tiled_backward(const kernels::host::kernel_context& ctx, const tiled_segment& s,
                    const layers::step_io& io);

}  // namespace memweave::tiling
