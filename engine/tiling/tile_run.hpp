// Private to engine/tiling: one tile of a fused segment step — its buffers in the workspace
// (tile_buffers.hpp) and each member's host kernel run on region-sized buffers. The passes
// over the tiles (tiled_forward.cpp, tiled_backward.cpp) drive it.
//
// Forward exactness: CONV (direct algorithm) and POOL run through their map_window entry
// points, which skip the positions outside the map exactly as the whole-map kernels skip
// the padding; the point-wise members run their ordinary kernels on the region. Every
// element a tile computes therefore sums the same products in the same order as untiled.
#pragma once

#include <vector>

#include "engine/layers/layer_step.hpp"
#include "engine/tiling/tile_buffers.hpp"

namespace memweave::tiling::detail {

/// The first index of each local layer's tensors in the fused step's io.params,
/// io.param_grads and io.aux (members in local-id order; layer 0 has none).
struct member_slots {
  std::size_t param = 0, grad = 0, aux = 0;
};
std::vector<member_slots> slots_of(const tiled_segment& s);

/// BN's per-channel sums of the backward (whole image, every tile's share), in double.
struct bn_sums {
  std::vector<double> dy, dy_xhat;
};

class tile_run {
 public:
  /// Tile `tile` of `s` with `regions` laid out as `layout` in `workspace`.
  tile_run(const kernels::host::kernel_context& ctx, const tiled_segment& s,
           const layers::step_io& io, const std::vector<member_slots>& slots,
           const std::vector<region>& regions, const tile_layout& layout, float* workspace,
           std::int64_t tile);

  const region& reg(std::size_t l) const { return regions_[l]; }
  float* value(std::size_t l) const { return ws_ + layout_.value[l]; }
  float* grad(std::size_t l) const { return ws_ + layout_.grad[l]; }
  shape4 shape(std::size_t l) const { return region_shape(s_, l, regions_[l]); }

  /// Copies the tile's region of the segment's input into layer 0's buffer.
  void load_input() const;
  /// Member m's forward over its region (BN: normalised with the saved statistics in
  /// io.aux, or the running ones when io.inference).
  void forward(std::size_t m) const;
  /// Layer l's buffer cropped to member m's region (l's own buffer when the regions agree).
  const float* input_at(std::size_t m, std::size_t input_index) const;

  /// Copies the tile's share of the output gradient into the last member's buffer.
  void seed_output_grad() const;
  /// Member m's backward over its region: adds its inputs' gradient contributions to their
  /// buffers (zeroed first when m is their last reader; layer 0's only when `input_grad`), and with
  /// `params` its parameter gradients' contributions to io.param_grads (CONV; BN's come from the
  /// sums). BN needs `sums`, the whole image's, complete.
  void backward(std::size_t m, bool input_grad, bool params, const bn_sums* sums) const;

 private:
  kernels::host::grad_out grad_target(std::size_t m, std::size_t input_index,
                                      bool input_grad) const;
  void finish_grad(std::size_t m, std::size_t input_index, const kernels::host::grad_out& g) const;
  float* scratch_slot(std::size_t m, std::size_t input_index, bool for_grad) const;
  kernels::host::map_window window(std::size_t m) const;
  void bn_backward(std::size_t m, bool input_grad, const bn_sums& sums) const;

  const kernels::host::kernel_context& ctx_;
  const tiled_segment& s_;
  const layers::step_io& io_;
  const std::vector<member_slots>& slots_;
  const std::vector<region>& regions_;
  const tile_layout& layout_;
  float* ws_;
  std::int64_t tile_;
};

/// What every pass over the tiles shares: the tiles' regions and workspace layouts and the
/// tensor slots, after checking the io against the segment.
struct sweep {
  sweep(const kernels::host::kernel_context& ctx, const tiled_segment& s, const layers::step_io& io,
        bool backward);
  /// Tile t, row-major.
  tile_run tile(std::int64_t t) const;

  const kernels::host::kernel_context& ctx;
  const tiled_segment& s;
  const layers::step_io& io;
  std::vector<std::vector<region>> regions;
  std::vector<tile_layout> layouts;
  std::vector<member_slots> slots;
};

/// Which local layers member `m`'s output depends on (itself included), by local id.
std::vector<bool> ancestors(const tiled_segment& s, std::size_t m);

/// The local ids of the segment's BN members, ascending.
std::vector<std::size_t> bn_members(const tiled_segment& s);

}  // namespace memweave::tiling::detail
