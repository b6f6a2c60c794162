// The fused backward of a tiled segment on the host. Every pass recomputes each tile's
// forward (with the BN statistics the forward saved in io.aux, so the recomputation has the
// forward's bits) and back-propagates the tile's share of the output gradient:
//   per BN, last first: a sums pass, down to that BN, gathering the whole image's
//     sum(dy) and sum(dy * x_hat) over every tile's partial dy (they are linear in dy),
//     which are BN's beta and gamma gradients and what its input gradient needs;
//   then the final pass through every member, adding the CONV weight gradients' and the
//     input gradient's contributions tile by tile, in tile order.
// The weight gradients thus sum the same products as untiled, grouped by tile: they differ
// only by the summation order. Thread safety: one call at a time per io.
#include <algorithm>
#include <vector>

#include "engine/tiling/tile_run.hpp"
#include "memweave/core/error.hpp"

namespace memweave::tiling {

namespace k = kernels::host;

namespace {

void store(float* dst, const std::vector<double>& sums, bool accumulate) {
  for (std::size_t c = 0; c < sums.size(); ++c) {
    const auto v = static_cast<float>(sums[c]);
    dst[c] = accumulate ? dst[c] + v : v;
  }
}

}  // namespace

void tiled_backward(const k::kernel_context& ctx, const tiled_segment& s,
                    const layers::step_io& io) {
  const detail::sweep sw(ctx, s, io, true);
  MEMWEAVE_EXPECTS(io.output_grad != nullptr, "tiled_backward: the output gradient is null");
  const std::size_t last = s.layers.size() - 1;
  const std::vector<std::size_t> bns = detail::bn_members(s);
  // Indexed by local id; BN members' entries are filled, last BN first.
  std::vector<detail::bn_sums> sums(s.layers.size());

  for (auto it = bns.rbegin(); it != bns.rend(); ++it) {
    const std::size_t b = *it;
    const layer& l = s.layers[b];
    const auto c = static_cast<std::size_t>(l.output_shape.c);
    detail::bn_sums& own = sums[b];
    own.dy.assign(c, 0.0);
    own.dy_xhat.assign(c, 0.0);
    float* const* aux = io.aux.data() + sw.slots[b].aux;
    for (std::int64_t t = 0; t < detail::tile_count(s); ++t) {
      const detail::tile_run run = sw.tile(t);
      run.load_input();
      for (std::size_t m = 1; m <= last; ++m) run.forward(m);
      run.seed_output_grad();
      for (std::size_t m = last; m > b; --m) run.backward(m, false, false, &sums[m]);
      if (run.reg(b).empty()) continue;
      k::bn_backward_sums(ctx, run.shape(b), run.input_at(b, 0), aux[0], aux[1], run.grad(b),
                          own.dy.data(), own.dy_xhat.data());
    }
    float* const* grads = io.param_grads.data() + sw.slots[b].grad;
    store(grads[0], own.dy_xhat, io.accumulate_param_grads);  // gamma
    store(grads[1], own.dy, io.accumulate_param_grads);       // beta
  }

  // CONV weight gradients: zeroed unless accumulating, then every tile adds its share.
  if (!io.accumulate_param_grads) {
    for (std::size_t m = 1; m <= last; ++m) {
      const layer& l = s.layers[m];
      if (l.type != layer_type::conv) continue;
      std::size_t g = sw.slots[m].grad;
      for (const param_tensor_spec& p : l.param_tensors) {
        if (!p.trained) continue;
        std::fill_n(io.param_grads[g++], p.shape.count(), 0.0f);
      }
    }
  }
  const bool input_grad = !io.input_grads.empty() && io.input_grads[0].data != nullptr;
  const shape4& in = s.layers[0].output_shape;
  if (input_grad && !io.input_grads[0].accumulate) {
    std::fill_n(io.input_grads[0].data, in.count(), 0.0f);
  }
  for (std::int64_t t = 0; t < detail::tile_count(s); ++t) {
    const detail::tile_run run = sw.tile(t);
    run.load_input();
    for (std::size_t m = 1; m <= last; ++m) run.forward(m);
    run.seed_output_grad();
    for (std::size_t m = last; m >= 1; --m) run.backward(m, input_grad, true, &sums[m]);
    if (input_grad) {
      detail::copy_rect(ctx, in.n * in.c, run.grad(0), run.reg(0), io.input_grads[0].data,
                        detail::whole(in), run.reg(0), true);
    }
  }
}

}  // namespace memweave::tiling
