// SFT's planner and the network rewrite; see memweave/engine/tiling_plan.hpp.
#include "memweave/engine/tiling_plan.hpp"

#include <algorithm>
#include <memory>
#include <optional>
#include <unordered_map>

#include "engine/tiling/tiled_segment.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"
#include "memweave/engine/network_builder.hpp"
#include "memweave/engine/route.hpp"
#include "memweave/engine/split_plan.hpp"
#include "memweave/engine/tensor_table.hpp"

namespace memweave {

namespace {

// The finest grid tried per side: the paper's experiments go to 32; beyond 128 a tile's
// halo outweighs its interior on every zoo network's early layers.
constexpr std::int64_t k_max_tiles_per_side = 128;

// l_i of every layer (the larger of its two steps), each tensor rounded to heap blocks and
// parameters counted, with the workspace a convolution mode that names its algorithm takes
// whole beside an untiled CONV step (`conv_ws`, nullptr: none), as the executor's floor check
// counts them under utp and all. (Left out, a fixed im2col's workspace made a CONV pass the
// planner untiled and fail the check at each budget that check then named; session 44.)
std::vector<std::size_t> step_bytes(const network& net, std::size_t block,
                                    const conv_ws_options* conv_ws) {
  const route r(net);
  const tensor_table table(net, r);
  const std::vector<std::size_t> workspace =
      conv_ws != nullptr ? promised_workspace_bytes(table, *conv_ws) : std::vector<std::size_t>{};
  std::vector<std::size_t> bytes(net.size(), 0);
  for (std::size_t s = 0; s < table.step_count(); ++s) {
    std::size_t b = 0;
    for (const tensor_access& a : table.accesses(s)) {
      b += (table[a.tensor].bytes + block - 1) / block * block;
    }
    if (s < workspace.size()) b += (workspace[s] + block - 1) / block * block;
    const layer_id l = r.at(s).layer;
    bytes[l] = std::max(bytes[l], b);
  }
  return bytes;
}

// Cut points: layers v whose output is the only tensor crossing from layers <= v to layers
// > v (ids are a topological order).
std::vector<char> cut_points(const network& net) {
  std::vector<char> cut(net.size(), 0);
  layer_id reach = 0;  // the furthest consumer of any layer before v
  for (const layer& l : net.layers()) {
    cut[l.id] = reach <= l.id;
    for (layer_id c : l.consumers) reach = std::max(reach, c);
  }
  return cut;
}

tiled_segment_choice make_choice(const network& net, layer_id input, layer_id last) {
  tiled_segment_choice c;
  c.input = input;
  for (layer_id id = input + 1; id <= last; ++id) c.members.push_back(id);
  c.first = net[input + 1].name;
  c.last = net[last].name;
  return c;
}

}  // namespace

namespace {

// tile_network; `costs`: also the fused layers' flops and input tile bytes (a sweep over
// every tile of every member, which the planner's probes, sizing memory only, skip).
network fuse(const network& net, std::span<const tiled_segment_choice> segments, bool costs) {
  // The segment each layer belongs to, and which members are their segment's last.
  std::vector<const tiled_segment_choice*> owner(net.size(), nullptr);
  for (const tiled_segment_choice& s : segments) {
    MEMWEAVE_EXPECTS(!s.members.empty(), "tile_network: a segment without members");
    for (layer_id m : s.members) {
      MEMWEAVE_EXPECTS(
          m < net.size() && owner[m] == nullptr,
          "tile_network: layer " + std::to_string(m) + " is out of range or in two segments");
      owner[m] = &s;
    }
  }
  network_builder b(net.name());
  std::vector<layer_handle> handle(net.size());
  for (const layer& l : net.layers()) {
    if (l.type == layer_type::data) {
      const auto& p = std::get<data_params>(l.params);
      handle[l.id] = b.data(p.shape, p.classes, l.name);
      continue;
    }
    const tiled_segment_choice* s = owner[l.id];
    if (s != nullptr && l.id != s->members.back()) continue;  // inside a segment
    if (s != nullptr) {
      tiled_params p;
      auto seg = std::make_shared<tiling::tiled_segment>(
          tiling::make_segment(net, s->input, s->members, s->tiles_h, s->tiles_w));
      p.forward_workspace_bytes = tiling::tiled_workspace_bytes(*seg, false);
      p.backward_workspace_bytes = tiling::tiled_workspace_bytes(*seg, true);
      if (costs) {
        p.forward_flops = tiling::tiled_forward_flops(*seg);
        p.backward_flops = tiling::tiled_backward_flops(*seg);
        const shape4& in_shape = net[s->input].output_shape;
        for (const std::vector<tiling::region>& t : tiling::tile_regions(*seg)) {
          p.input_tile_bytes += static_cast<std::size_t>(t[0].height() * t[0].width()) *
                                static_cast<std::size_t>(in_shape.n * in_shape.c) * sizeof(float);
        }
      }
      p.segment = std::move(seg);
      const layer_handle in[] = {handle[s->input]};
      handle[l.id] = b.add_layer(layer_type::tiled, std::move(p), in, l.name);
      continue;
    }
    std::vector<layer_handle> in;
    for (layer_id i : l.inputs) {
      MEMWEAVE_EXPECTS(owner[i] == nullptr || owner[i]->members.back() == i,
                       "tile_network: layer '" + l.name + "' reads '" + net[i].name +
                           "', inside a tiled segment; a segment's last member is the only "
                           "one read outside it");
      in.push_back(handle[i]);
    }
    handle[l.id] = b.add_layer(l.type, l.params, in, l.name);
  }
  return std::move(b).build();
}

}  // namespace

network tile_network(const network& net, std::span<const tiled_segment_choice> segments) {
  return fuse(net, segments, true);
}

namespace {

tiling_plan plan_tiling_at(const network& net, std::size_t budget_bytes, std::size_t block_bytes,
                           const std::string& knob, const conv_ws_options* conv_ws) {
  MEMWEAVE_EXPECTS(block_bytes > 0, "plan_tiling: block_bytes is 0; expected a positive size");
  MEMWEAVE_EXPECTS(budget_bytes > 0, "plan_tiling: " + knob + " is 0; tiling needs a budget");
  const std::vector<std::size_t> untiled = step_bytes(net, block_bytes, conv_ws);
  const std::vector<char> cut = cut_points(net);
  tiling_plan plan;
  plan.max_layer_bytes = *std::max_element(untiled.begin(), untiled.end());

  // The fused layer's l_i with `candidate` added to the segments chosen so far.
  auto fused_bytes = [&](const tiled_segment_choice& candidate) {
    std::vector<tiled_segment_choice> all = plan.segments;
    all.push_back(candidate);
    const network tiled = fuse(net, all, false);
    const std::vector<std::size_t> bytes = step_bytes(tiled, block_bytes, conv_ws);
    return bytes[*tiled.find(candidate.last)];
  };

  // The segment (a, b] holding must-tile layer m with the first cut point b >= m for which
  // some grid fits, in the fewest tiles; the smallest step seen when none fits.
  std::size_t least = 0;
  std::string least_at;
  auto rounded = [block_bytes](std::size_t b) {
    return (b + block_bytes - 1) / block_bytes * block_bytes;
  };
  auto place = [&](layer_id a, layer_id m) -> std::optional<tiled_segment_choice> {
    // The batch a segment reads straight from the DATA layer stays on the host.
    const std::size_t in = a == net.data_layer() && net[a].consumers.size() == 1
                               ? 0
                               : rounded(net[a].output_shape.bytes());
    for (layer_id b = m; b + 1 < net.size() && tiling::spatially_local(net[b]); ++b) {
      if (!cut[b]) continue;
      // Its input and output are whole whatever the grid: skip what they alone exceed.
      const std::size_t whole = in + rounded(net[b].output_shape.bytes());
      if (whole > budget_bytes) {
        if (least == 0 || whole < least) {
          least = whole;
          least_at = "'" + net[a + 1].name + "'..'" + net[b].name +
                     "' (its input and output alone, in any grid)";
        }
        continue;
      }
      tiled_segment_choice c = make_choice(net, a, b);
      for (layer_id i : c.members) c.untiled_bytes = std::max(c.untiled_bytes, untiled[i]);
      const shape4& out = net[b].output_shape;
      // The fewest tiles: 2^e per side (clamped to the output), e found by bisection (a
      // finer grid never needs more).
      auto probe = [&](int e) {
        const std::int64_t k = std::int64_t{1} << e;
        c.tiles_h = std::min(k, out.h);
        c.tiles_w = std::min(k, out.w);
        c.step_bytes = fused_bytes(c);
        if (c.step_bytes > budget_bytes && (least == 0 || c.step_bytes < least)) {
          least = c.step_bytes;
          least_at = "'" + c.first + "'..'" + c.last + "' in " + std::to_string(c.tiles_h) + "x" +
                     std::to_string(c.tiles_w) + " tiles";
        }
        return c.step_bytes <= budget_bytes;
      };
      int top = 0;
      while ((std::int64_t{1} << top) < std::min(std::max(out.h, out.w), k_max_tiles_per_side))
        ++top;
      if (!probe(top)) continue;
      int lo = 0, hi = top;  // hi fits
      while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (probe(mid)) {
          hi = mid;
        } else {
          lo = mid + 1;
        }
      }
      (void)probe(hi);
      const tiling::tiled_segment seg =
          tiling::make_segment(net, c.input, c.members, c.tiles_h, c.tiles_w);
      c.forward_workspace = tiling::tiled_workspace_bytes(seg, false);
      c.backward_workspace = tiling::tiled_workspace_bytes(seg, true);
      return c;
    }
    return std::nullopt;
  };

  // The layers over the budget. The batch itself may be: a segment reading it straight
  // from the DATA layer leaves it on the host, so DATA's one consumer must start one.
  std::vector<char> must(net.size(), 0);
  for (layer_id i = 0; i < net.size(); ++i) must[i] = untiled[i] > budget_bytes;
  const layer& data = net[net.data_layer()];
  if (must[data.id] && data.consumers.size() == 1 &&
      tiling::spatially_local(net[data.consumers[0]]) &&
      untiled[data.id] - rounded(data.output_shape.bytes()) <= budget_bytes) {
    must[data.id] = 0;
    must[data.consumers[0]] = 1;
  }

  layer_id done = 0;  // layers up to here are settled
  for (layer_id m = 0; m < net.size(); ++m) {
    if ((m <= done && m != 0) || !must[m]) continue;
    const layer& must = net[m];
    least = 0;  // the smallest step tried for this layer (an earlier layer's named another)
    least_at.clear();
    if (!tiling::spatially_local(must)) {
      throw budget_too_small(
          "budget " + format_bytes(budget_bytes) + " (" + knob + ") is below layer '" + must.name +
          "' (" + to_string(must.type) + ", " + to_string(must.output_shape) +
          "), whose step touches " + format_bytes(untiled[m]) +
          " and which cannot run tile by tile (tiled segments hold CONV, POOL, ACT, BN, LRN, "
          "ADD and CONCAT); raise " +
          knob + " to at least " + format_bytes(untiled[m]) + " or lower the batch or image side");
    }
    // The segment starts after the nearest cut point before m (not inside an earlier one).
    layer_id a = m - 1;
    while (a > done && !cut[a]) --a;
    for (layer_id i = a + 1; i < m; ++i) {
      MEMWEAVE_EXPECTS(tiling::spatially_local(net[i]),
                       "layer '" + must.name + "' must run tile by tile within " +
                           format_bytes(budget_bytes) + " (" + knob + "), but its segment from '" +
                           net[a].name + "' holds '" + net[i].name + "' (" +
                           to_string(net[i].type) + "), which cannot be tiled");
    }
    // The nearest start first (the smallest segment); further back where the input of a
    // nearer one is too large to sit beside its output.
    std::optional<tiled_segment_choice> c = place(a, m);
    for (layer_id e = a; !c && e > done && tiling::spatially_local(net[e]);) {
      --e;  // e + 1 is a member from here on
      if (cut[e]) c = place(e, m);
    }
    // A segment that reads the previous one's output may not fit beside it (that output is
    // large, or it would not have been cut there): grow the previous one instead, over the
    // untiled layers between them too where those can tile (a larger budget leaves more
    // layers untiled between two segments: ResNet-50 at 256 px planned at 2.95 MiB and not
    // at 3 MiB; session 44).
    while (!c && !plan.segments.empty()) {
      const layer_id input = plan.segments.back().input;
      bool local = true;
      for (layer_id i = input + 1; i < m && local; ++i) local = tiling::spatially_local(net[i]);
      if (!local) break;
      a = input;
      plan.segments.pop_back();
      c = place(a, m);
    }
    if (!c) {
      throw budget_too_small(
          "budget " + format_bytes(budget_bytes) + " (" + knob +
          ") is too small for one tile of any segment holding layer '" + must.name + "': " +
          (least == 0 ? std::string("each one's whole input and output alone "
                                    "exceed it; raise ") +
                            knob
                      : "the smallest step is segment " + least_at + ", which needs " +
                            format_bytes(least) + "; raise " + knob + " to at least that"));
    }
    done = c->members.back();
    plan.segments.push_back(std::move(*c));
  }
  plan.net = plan.segments.empty() ? tile_network(net, {}) : tile_network(net, plan.segments);
  const std::vector<std::size_t> tiled = step_bytes(plan.net, block_bytes, conv_ws);
  plan.tiled_max_layer_bytes = *std::max_element(tiled.begin(), tiled.end());
  return plan;
}

}  // namespace

tiling_plan plan_tiling(const network& net, std::size_t budget_bytes, std::size_t block_bytes,
                        const std::string& knob, bool name_least_budget,
                        const conv_ws_options* conv_ws) {
  try {
    return plan_tiling_at(net, budget_bytes, block_bytes, knob, conv_ws);
  } catch (const budget_too_small& e) {
    if (!name_least_budget) throw;
    // At the untiled max(l_i) no layer must tile: that budget plans. Doubling from this
    // budget, then bisection to 1/32 of the answer: each try is a whole plan (2 s for
    // ResNet-50 at 256 pixels; a budget far too small fails fast), so a few bisection steps
    // rather than one per block.
    const std::vector<std::size_t> untiled = step_bytes(net, block_bytes, conv_ws);
    const std::size_t ceiling = *std::max_element(untiled.begin(), untiled.end());
    if (budget_bytes >= ceiling) throw;
    const auto plans = [&](std::size_t b) {
      try {
        (void)plan_tiling_at(net, b, block_bytes, knob, conv_ws);
        return true;
      } catch (const budget_too_small&) {
        return false;
      }
    };
    std::size_t fails = budget_bytes, fits = ceiling;
    for (std::size_t b = budget_bytes; b < ceiling / 2;) {
      b *= 2;
      if (plans(b)) {
        fits = b;
        break;
      }
      fails = b;
    }
    while (fits - fails > std::max(block_bytes, fits / 32)) {
      const std::size_t mid =
          (fails + (fits - fails) / 2 + block_bytes - 1) / block_bytes * block_bytes;
      if (mid >= fits) break;
      (plans(mid) ? fits : fails) = mid;
    }
    // The reason at this budget, its remedy (a figure of this budget's segments) replaced.
    std::string reason = e.what();
    if (const std::size_t at = reason.rfind("; raise "); at != std::string::npos) {
      reason.erase(at);
    }
    // With its bytes: rounded to hundredths, the figure alone read back can fall short.
    const std::string fits_text = format_bytes(fits) + " (" + std::to_string(fits) + " bytes)";
    throw budget_too_small(reason + "; every layer over the budget tiles at " + fits_text +
                           " (the least found, within 1/32: the segments are cut anew at each "
                           "budget, so this budget's figures bound nothing); raise " +
                           knob + " to that");
  }
}

}  // namespace memweave
