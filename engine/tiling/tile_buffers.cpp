// One tile's workspace layout and the rectangle copies between region buffers
// (tile_buffers.hpp). Pure layout arithmetic and copies; thread safety: copy_rect writes
// only `dst`.
#include "engine/tiling/tile_buffers.hpp"

#include <algorithm>

#include "engine/kernels/host/parallel.hpp"

namespace memweave::tiling::detail {

namespace {

std::size_t floats_of(const tiled_segment& s, std::size_t l, const region& r) {
  return static_cast<std::size_t>(region_shape(s, l, r).count());
}

// The scratch a member needs: the crops of its inputs (and, backward, of their gradients)
// at its own region, and for BN its owned part (at most its region).
std::size_t member_scratch(const tiled_segment& s, std::size_t m, const std::vector<region>& r,
                           bool backward) {
  const layer& l = s.layers[m];
  if (!pointwise(l)) return 0;
  std::size_t crops = 0;
  for (const layer_id in : l.inputs) {
    if (!(r[in] == r[m])) crops += region_shape(s, in, r[m]).count();
  }
  if (backward) crops *= 2;
  if (l.type == layer_type::bn) crops += floats_of(s, m, r[m]);
  return crops;
}

}  // namespace

namespace {

// One buffer to place: `floats` long, live over the closed step interval [first, last].
struct live_buffer {
  std::size_t floats, first, last;
};

// First fit: each buffer, in order of its first step, at the lowest offset where it overlaps
// no buffer already placed whose interval meets its own. Deterministic; returns the offsets
// and the extent.
std::vector<std::size_t> place(const std::vector<live_buffer>& b, std::size_t& extent) {
  std::vector<std::size_t> order(b.size());
  for (std::size_t i = 0; i < b.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t x, std::size_t y) { return b[x].first < b[y].first; });
  std::vector<std::size_t> at(b.size(), 0);
  std::vector<bool> placed(b.size(), false);
  for (const std::size_t i : order) {
    std::vector<std::pair<std::size_t, std::size_t>> taken;  // [offset, end) of live ones
    for (std::size_t j = 0; j < b.size(); ++j) {
      if (placed[j] && b[j].floats > 0 && b[j].first <= b[i].last && b[i].first <= b[j].last) {
        taken.emplace_back(at[j], at[j] + b[j].floats);
      }
    }
    std::sort(taken.begin(), taken.end());
    std::size_t offset = 0;
    for (const auto& [lo, hi] : taken) {
      if (lo >= offset + b[i].floats) break;
      offset = std::max(offset, hi);
    }
    at[i] = offset;
    placed[i] = true;
    extent = std::max(extent, offset + b[i].floats);
  }
  return at;
}

}  // namespace

tile_layout layout_tile(const tiled_segment& s, const std::vector<region>& regions, bool backward) {
  tile_layout t;
  const std::size_t count = s.layers.size();
  // One timeline for both passes: forward step j at time j (layer 0's load at 0, the
  // output's copy out or gradient seed at L + 1), then member m's backward at 2L + 2 - m (the
  // input gradient's scatter at 2L + 2).
  const std::size_t L = count - 1;
  auto backward_at = [&](std::size_t m) { return 2 * L + 2 - m; };
  std::vector<live_buffer> buffers;
  // Values: from their step to their last forward reader, and in the backward to the last
  // backward step reading them (tile_run::backward reads the layers' `reads`: its own output
  // for ACT, LRN and max POOL, its input for CONV, BN, LRN and max POOL).
  for (std::size_t l = 0; l < count; ++l) {
    std::size_t last = last_reader(s, l);
    if (backward) {
      if (l > 0 && s.layers[l].reads.output_data) last = std::max(last, backward_at(l));
      for (const layer_id c : s.layers[l].consumers) {
        if (s.layers[c].reads.input_data) last = std::max(last, backward_at(c));
      }
    }
    buffers.push_back({floats_of(s, l, regions[l]), l, last});
  }
  // Gradients: from their last reader's backward, which adds the first contribution (the
  // output's: its seed), to their own backward.
  for (std::size_t l = 0; backward && l < count; ++l) {
    buffers.push_back(
        {floats_of(s, l, regions[l]), backward_at(last_reader(s, l)), backward_at(l)});
  }
  const std::vector<std::size_t> at = place(buffers, t.floats);
  t.value.assign(at.begin(), at.begin() + static_cast<std::ptrdiff_t>(count));
  if (backward) t.grad.assign(at.begin() + static_cast<std::ptrdiff_t>(count), at.end());
  std::size_t scratch = 0;
  for (std::size_t m = 1; m < count; ++m) {
    scratch = std::max(scratch, member_scratch(s, m, regions, backward));
  }
  t.scratch = t.floats;
  t.floats += scratch;
  return t;
}

void copy_rect(const kernels::host::kernel_context& ctx, std::int64_t planes, const float* src,
               const region& from, float* dst, const region& to, const region& r, bool add) {
  if (r.empty()) return;
  const std::int64_t rows = r.height(), cols = r.width();
  kernels::host::detail::parallel_for(
      ctx, planes * rows, kernels::host::detail::grain_for(cols),
      [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t t = lo; t < hi; ++t) {
          const std::int64_t plane = t / rows, y = r.y0 + t % rows;
          const float* s =
              src + (plane * from.height() + (y - from.y0)) * from.width() + (r.x0 - from.x0);
          float* d = dst + (plane * to.height() + (y - to.y0)) * to.width() + (r.x0 - to.x0);
          if (add) {
            for (std::int64_t x = 0; x < cols; ++x) d[x] += s[x];
          } else {
            std::copy_n(s, cols, d);
          }
        }
      });
}

}  // namespace memweave::tiling::detail
