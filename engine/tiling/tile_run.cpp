// One tile's member steps on region buffers (tile_run.hpp).
//
// Backward: a tile back-propagates only its share of the output gradient. Every region
// holds the tile's whole receptive field, so each member's region backward is the exact
// adjoint of its region forward, and the gradient a tile leaves in an intermediate (halo
// included) is that position's partial derivative of the tile's outputs; the partials of
// all tiles add up to the untiled gradient (the tiles partition the output). BN couples
// every position through its statistics: its input gradient
//   dx = gamma * invstd / m * (m * dy - sum(dy) - x_hat * sum(dy * x_hat))
// splits into the part linear in the position's own dy, which each tile adds for its
// partial dy, and the part of the whole image's sums, which the tile owning the position
// (grid_part) adds once.
// Thread safety: a tile_run writes its workspace and the io's outputs; one at a time.
#include "engine/tiling/tile_run.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "engine/kernels/host/parallel.hpp"
#include "memweave/core/error.hpp"

namespace memweave::tiling::detail {

namespace k = kernels::host;

namespace {

// Tiled CONV runs the direct algorithm: its per-element sum order does not depend on the
// map's extent, so a tile's outputs have the untiled bits (im2col's GEMM tiling does).
k::conv_config direct() {
  return {k::conv_algo::direct, 0, nullptr, 0};
}

}  // namespace

std::vector<member_slots> slots_of(const tiled_segment& s) {
  std::vector<member_slots> slots(s.layers.size());
  member_slots next;
  for (std::size_t l = 0; l < s.layers.size(); ++l) {
    slots[l] = next;
    for (const param_tensor_spec& p : s.layers[l].param_tensors) {
      ++next.param;
      if (p.trained) ++next.grad;
    }
    next.aux += s.layers[l].aux_tensors.size();
  }
  return slots;
}

tile_run::tile_run(const k::kernel_context& ctx, const tiled_segment& s, const layers::step_io& io,
                   const std::vector<member_slots>& slots, const std::vector<region>& regions,
                   const tile_layout& layout, float* workspace, std::int64_t tile)
    : ctx_(ctx),
      s_(s),
      io_(io),
      slots_(slots),
      regions_(regions),
      layout_(layout),
      ws_(workspace),
      tile_(tile) {}

void tile_run::load_input() const {
  const shape4& in = s_.layers[0].output_shape;
  copy_rect(ctx_, in.n * in.c, io_.inputs[0], whole(in), value(0), reg(0), reg(0), false);
}

float* tile_run::scratch_slot(std::size_t m, std::size_t input_index, bool for_grad) const {
  // Value crops first, then gradient crops, each input's after the earlier cropped ones'.
  const layer& l = s_.layers[m];
  std::size_t offset = 0;
  const std::size_t end = for_grad ? l.inputs.size() + input_index : input_index;
  for (std::size_t j = 0; j < end; ++j) {
    const layer_id in = l.inputs[j % l.inputs.size()];
    if (!(reg(in) == reg(m))) {
      offset += static_cast<std::size_t>(region_shape(s_, in, reg(m)).count());
    }
  }
  return ws_ + layout_.scratch + offset;
}

const float* tile_run::input_at(std::size_t m, std::size_t input_index) const {
  const layer_id in = s_.layers[m].inputs[input_index];
  if (reg(in) == reg(m)) return value(in);
  float* crop = scratch_slot(m, input_index, false);
  const shape4& o = s_.layers[in].output_shape;
  copy_rect(ctx_, o.n * o.c, value(in), reg(in), crop, reg(m), reg(m), false);
  return crop;
}

k::map_window tile_run::window(std::size_t m) const {
  const layer_id in = s_.layers[m].inputs[0];
  const shape4& map = s_.layers[in].output_shape;
  const region& r = reg(m);
  return {map.h, map.w, reg(in).y0, reg(in).x0, r.y0, r.x0, r.height(), r.width()};
}

void tile_run::forward(std::size_t m) const {
  const layer& l = s_.layers[m];
  if (reg(m).empty()) return;
  float* y = value(m);
  float* const* params = io_.params.data() + slots_[m].param;
  switch (l.type) {
    case layer_type::conv: {
      const auto& p = std::get<conv_params>(l.params);
      const layer_id in = l.inputs[0];
      k::conv_forward_window(ctx_, direct(), shape(in), p, window(m), value(in), params[0],
                             p.bias ? params[1] : nullptr, y);
      break;
    }
    case layer_type::pool:
      k::pool_forward_window(ctx_, shape(l.inputs[0]), std::get<pool_params>(l.params), window(m),
                             value(l.inputs[0]), y);
      break;
    case layer_type::act:
      k::act_forward(ctx_, shape(m), std::get<act_params>(l.params), input_at(m, 0), y);
      break;
    case layer_type::lrn:
      k::lrn_forward(ctx_, shape(m), std::get<lrn_params>(l.params), input_at(m, 0), y);
      break;
    case layer_type::bn: {
      const auto& p = std::get<bn_params>(l.params);
      if (io_.inference) {
        k::bn_forward_inference(ctx_, shape(m), p, input_at(m, 0), params[0], params[1], params[2],
                                params[3], y);
      } else {
        float* const* aux = io_.aux.data() + slots_[m].aux;
        k::bn_normalize(ctx_, shape(m), input_at(m, 0), params[0], params[1], aux[0], aux[1], y);
      }
      break;
    }
    case layer_type::add:
    case layer_type::concat: {
      std::vector<const float*> xs;
      std::vector<shape4> shapes;
      for (std::size_t i = 0; i < l.inputs.size(); ++i) {
        xs.push_back(input_at(m, i));
        shapes.push_back(region_shape(s_, l.inputs[i], reg(m)));
      }
      if (l.type == layer_type::add) {
        k::add_forward(ctx_, shape(m), xs, y);
      } else {
        k::concat_forward(ctx_, shapes, xs, y);
      }
      break;
    }
    default:
      break;  // make_segment admits no other type
  }
}

void tile_run::seed_output_grad() const {
  const std::size_t last = s_.layers.size() - 1;
  const shape4& out = s_.layers[last].output_shape;
  copy_rect(ctx_, out.n * out.c, io_.output_grad, whole(out), grad(last), reg(last), reg(last),
            false);
}

k::grad_out tile_run::grad_target(std::size_t m, std::size_t input_index, bool input_grad) const {
  const layer_id in = s_.layers[m].inputs[input_index];
  if (in == 0 && !input_grad) return {};
  if (reg(in) == reg(m)) return {grad(in), true};
  return {scratch_slot(m, input_index, true), false};
}

void tile_run::finish_grad(std::size_t m, std::size_t input_index, const k::grad_out& g) const {
  if (g.data == nullptr || g.accumulate) return;  // none, or added in place
  const layer_id in = s_.layers[m].inputs[input_index];
  const shape4& o = s_.layers[in].output_shape;
  copy_rect(ctx_, o.n * o.c, g.data, reg(m), grad(in), reg(in), reg(m), true);
}

void tile_run::backward(std::size_t m, bool input_grad, bool params, const bn_sums* sums) const {
  const layer& l = s_.layers[m];
  // An input's gradient buffer starts here, at its last reader's backward (it may share
  // memory with gradients already consumed: tile_buffers.hpp).
  for (const layer_id in : l.inputs) {
    if (last_reader(s_, in) == m && (in != 0 || input_grad)) {
      std::fill_n(grad(in), shape(in).count(), 0.0f);
    }
  }
  if (reg(m).empty()) return;
  const float* dy = grad(m);
  float* const* ps = io_.params.data() + slots_[m].param;
  float* const* gs = io_.param_grads.data() + slots_[m].grad;
  switch (l.type) {
    case layer_type::conv: {
      const auto& p = std::get<conv_params>(l.params);
      const layer_id in = l.inputs[0];
      if (in != 0 || input_grad) {
        k::conv_backward_data_window(ctx_, direct(), shape(in), p, window(m), ps[0], dy, grad(in),
                                     true);
      }
      // The tiles' contributions add in tile order onto gradients zeroed (or kept, when
      // accumulating) before the sweep: a fixed order, whatever the thread count.
      if (params) {
        k::conv_backward_filter_window(ctx_, direct(), shape(in), p, window(m), value(in), dy,
                                       gs[0], p.bias ? gs[1] : nullptr, true);
      }
      break;
    }
    case layer_type::pool: {
      const layer_id in = l.inputs[0];
      if (in != 0 || input_grad) {
        k::pool_backward_window(ctx_, shape(in), std::get<pool_params>(l.params), window(m),
                                value(in), value(m), dy, grad(in), true);
      }
      break;
    }
    case layer_type::act: {
      const k::grad_out g = grad_target(m, 0, input_grad);
      if (g.data == nullptr) break;
      k::act_backward(ctx_, shape(m), std::get<act_params>(l.params), value(m), dy, g.data,
                      g.accumulate);
      finish_grad(m, 0, g);
      break;
    }
    case layer_type::lrn: {
      const k::grad_out g = grad_target(m, 0, input_grad);
      if (g.data == nullptr) break;
      k::lrn_backward(ctx_, shape(m), std::get<lrn_params>(l.params), input_at(m, 0), value(m), dy,
                      g.data, g.accumulate);
      finish_grad(m, 0, g);
      break;
    }
    case layer_type::bn:
      bn_backward(m, input_grad, *sums);
      break;
    case layer_type::add:
    case layer_type::concat: {
      std::vector<k::grad_out> gs_in;
      std::vector<shape4> shapes;
      for (std::size_t i = 0; i < l.inputs.size(); ++i) {
        gs_in.push_back(grad_target(m, i, input_grad));
        shapes.push_back(region_shape(s_, l.inputs[i], reg(m)));
      }
      if (l.type == layer_type::add) {
        k::add_backward(ctx_, shape(m), dy, gs_in);
      } else {
        k::concat_backward(ctx_, shapes, dy, gs_in);
      }
      for (std::size_t i = 0; i < l.inputs.size(); ++i) finish_grad(m, i, gs_in[i]);
      break;
    }
    default:
      break;
  }
}

void tile_run::bn_backward(std::size_t m, bool input_grad, const bn_sums& sums) const {
  const k::grad_out g = grad_target(m, 0, input_grad);
  if (g.data == nullptr) return;
  const shape4 sh = shape(m);
  const shape4& map = s_.layers[m].output_shape;
  const std::int64_t count = map.n * map.h * map.w;  // the statistics' m
  float* const* ps = io_.params.data() + slots_[m].param;
  float* const* aux = io_.aux.data() + slots_[m].aux;
  const float* gamma = ps[0];
  const float* mean = aux[0];
  const float* invstd = aux[1];
  const float* x = input_at(m, 0);
  // The part linear in dy: the kernel's formula with zero sums.
  const std::vector<double> zeros(static_cast<std::size_t>(sh.c), 0.0);
  k::bn_backward_data(ctx_, sh, count, x, mean, invstd, gamma, zeros.data(), zeros.data(), grad(m),
                      g.data, g.accumulate);
  // The part of the sums, once per position: by the tile owning it.
  const region own = grid_part(s_, tile_, map.h, map.w);
  const region& r = reg(m);
  const double md = static_cast<double>(count);
  float* dx = g.data;  // region r either way (a crop, or the input's own equal region)
  k::detail::parallel_for(
      ctx_, sh.n * sh.c, k::detail::grain_for(own.height() * own.width()),
      [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t t = lo; t < hi; ++t) {
          const std::int64_t c = t % sh.c;
          const double scale = static_cast<double>(gamma[c]) * invstd[c] / md;
          const double sdy = sums.dy[static_cast<std::size_t>(c)];
          const double sdx = sums.dy_xhat[static_cast<std::size_t>(c)];
          for (std::int64_t y = own.y0; y < own.y1; ++y) {
            const std::int64_t row = (t * r.height() + (y - r.y0)) * r.width() - r.x0;
            for (std::int64_t xi = own.x0; xi < own.x1; ++xi) {
              const float xhat = (x[row + xi] - mean[c]) * invstd[c];
              dx[row + xi] += static_cast<float>(scale * (-sdy - static_cast<double>(xhat) * sdx));
            }
          }
        }
      });
  finish_grad(m, 0, g);
}

sweep::sweep(const k::kernel_context& c, const tiled_segment& seg, const layers::step_io& step,
             bool backward)
    : ctx(c), s(seg), io(step), regions(tile_regions(seg)), slots(slots_of(seg)) {
  std::size_t floats = 0;
  for (const auto& r : regions) {
    layouts.push_back(layout_tile(s, r, backward));
    floats = std::max(floats, layouts.back().floats);
  }
  const char* what = backward ? "tiled_backward" : "tiled_forward";
  const shape4& in = s.layers[0].output_shape;
  MEMWEAVE_EXPECTS(io.inputs.size() == 1 && io.input_shapes.size() == 1 &&
                       io.input_shapes[0] == in && io.inputs[0] != nullptr,
                   std::string(what) + ": expected one input of shape " + to_string(in) +
                       " (the segment's input '" + s.layers[0].name + "')");
  MEMWEAVE_EXPECTS(
      io.workspace_bytes >= floats * sizeof(float) && (floats == 0 || io.workspace != nullptr),
      std::string(what) + ": a workspace of " + std::to_string(io.workspace_bytes) +
          " bytes; expected at least " + std::to_string(floats * sizeof(float)) +
          " (tiled_workspace_bytes)");
  MEMWEAVE_EXPECTS(reinterpret_cast<std::uintptr_t>(io.workspace) % alignof(float) == 0,
                   std::string(what) + ": the workspace is not aligned for float");
  const member_slots& end = slots.back();
  const layer& last = s.layers.back();
  std::size_t params = end.param + last.param_tensors.size(),
              aux = end.aux + last.aux_tensors.size();
  std::size_t grads = end.grad;
  for (const auto& p : last.param_tensors) grads += p.trained ? 1 : 0;
  MEMWEAVE_EXPECTS(io.params.size() == params && io.aux.size() == aux &&
                       (!backward || io.param_grads.size() == grads),
                   std::string(what) + ": " + std::to_string(io.params.size()) + " parameter, " +
                       std::to_string(io.param_grads.size()) + " gradient and " +
                       std::to_string(io.aux.size()) + " aux tensors; expected the members' " +
                       std::to_string(params) + ", " + std::to_string(grads) + " and " +
                       std::to_string(aux));
}

tile_run sweep::tile(std::int64_t t) const {
  const auto i = static_cast<std::size_t>(t);
  return {ctx, s, io, slots, regions[i], layouts[i], static_cast<float*>(io.workspace), t};
}

std::vector<bool> ancestors(const tiled_segment& s, std::size_t m) {
  std::vector<bool> up(s.layers.size(), false);
  up[m] = true;
  for (std::size_t l = m + 1; l-- > 0;) {
    if (!up[l]) continue;
    for (const layer_id in : s.layers[l].inputs) up[in] = true;
  }
  return up;
}

std::vector<std::size_t> bn_members(const tiled_segment& s) {
  std::vector<std::size_t> bns;
  for (std::size_t l = 1; l < s.layers.size(); ++l) {
    if (s.layers[l].type == layer_type::bn) bns.push_back(l);
  }
  return bns;
}

}  // namespace memweave::tiling::detail
