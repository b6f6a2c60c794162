// The fused forward of a tiled segment on the host: one pass over the tiles computing each
// tile's regions and writing its share of the output, preceded in training by one pass per
// BN member (in topological order) that gathers its whole-image statistics: the sums of x
// and of x^2 over the positions each tile owns, then the saved mean and inverse std (the
// variance exact from the two sums, exact_sum::variance). Each pass runs only the BN's
// ancestors; the BNs before it normalise with their finished
// statistics. The output has the untiled bits (tile_run.hpp), BN included: its sums are
// exact (exact_sum.hpp), so summing the owned positions tile by tile instead of the images'
// rows in order gives the untiled statistics. Thread safety: one call at a time per io.
#include <vector>

#include "engine/tiling/tile_run.hpp"
#include "memweave/core/error.hpp"

namespace memweave::tiling {

namespace k = kernels::host;

namespace {

// x of BN `b` on the positions tile `t` owns, in the workspace's scratch: (n, c, owned
// rows, owned columns), or nothing when it owns none.
struct owned_part {
  const float* x = nullptr;
  shape4 shape;
};

owned_part owned_input(const detail::sweep& sw, const detail::tile_run& run, std::size_t b,
                       std::int64_t t) {
  const layer& l = sw.s.layers[b];
  const region own = detail::grid_part(sw.s, t, l.output_shape.h, l.output_shape.w);
  if (own.empty()) return {};
  const layer_id in = l.inputs[0];
  float* crop =
      static_cast<float*>(sw.io.workspace) + sw.layouts[static_cast<std::size_t>(t)].scratch;
  const shape4& o = l.output_shape;
  detail::copy_rect(sw.ctx, o.n * o.c, run.value(in), run.reg(in), crop, own, own, false);
  return {crop, {o.n, o.c, own.height(), own.width()}};
}

// The statistics pass of one BN (the sums of x and x^2 over every tile's owned part): its
// saved statistics in io.aux.
void bn_statistics(const detail::sweep& sw, std::size_t b) {
  const layer& l = sw.s.layers[b];
  const std::vector<bool> up = detail::ancestors(sw.s, b);
  const auto c = static_cast<std::size_t>(l.output_shape.c);
  const std::int64_t m = l.output_shape.n * l.output_shape.h * l.output_shape.w;
  std::vector<k::exact_sum> sum(c);
  std::vector<k::exact_square_sum> squares(c);
  for (std::int64_t t = 0; t < detail::tile_count(sw.s); ++t) {
    const detail::tile_run run = sw.tile(t);
    run.load_input();
    for (std::size_t j = 1; j < b; ++j) {
      if (up[j]) run.forward(j);
    }
    const owned_part part = owned_input(sw, run, b, t);
    if (part.x == nullptr) continue;
    k::bn_sum_moments(sw.ctx, part.shape, part.x, sum.data(), squares.data());
  }
  float* const* aux = sw.io.aux.data() + sw.slots[b].aux;
  k::bn_finish_statistics(l.output_shape.c, m, std::get<bn_params>(l.params), sum.data(),
                          squares.data(), aux[0], aux[1]);
}

}  // namespace

void tiled_forward(const k::kernel_context& ctx, const tiled_segment& s,
                   const layers::step_io& io) {
  const detail::sweep sw(ctx, s, io, false);
  MEMWEAVE_EXPECTS(io.output != nullptr, "tiled_forward: the output is null");
  const std::vector<std::size_t> bns = detail::bn_members(s);
  if (!io.inference) {
    for (const std::size_t b : bns) bn_statistics(sw, b);
  }
  const std::size_t last = s.layers.size() - 1;
  const shape4& out = s.layers[last].output_shape;
  for (std::int64_t t = 0; t < detail::tile_count(s); ++t) {
    const detail::tile_run run = sw.tile(t);
    run.load_input();
    for (std::size_t m = 1; m <= last; ++m) run.forward(m);
    detail::copy_rect(ctx, out.n * out.c, run.value(last), run.reg(last), io.output,
                      detail::whole(out), run.reg(last), false);
  }
  if (!io.inference && io.update_running_stats) {
    for (const std::size_t b : bns) {
      const layer& l = s.layers[b];
      float* const* params = io.params.data() + sw.slots[b].param;
      float* const* aux = io.aux.data() + sw.slots[b].aux;
      k::bn_update_running(l.output_shape, std::get<bn_params>(l.params), aux[0], aux[1], params[2],
                           params[3]);
    }
  }
}

}  // namespace memweave::tiling
