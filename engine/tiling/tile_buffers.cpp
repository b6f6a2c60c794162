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

// First fit: each buffer, in order, at the lowest offset where it overlaps no earlier
// buffer whose interval meets its own. Deterministic; returns the offsets and the extent.
std::vector<std::size_t> place(const std::vector<live_buffer>& b, std::size_t& extent) {
  std::vector<std::size_t> at(b.size(), 0);
  for (std::size_t i = 0; i < b.size(); ++i) {
    std::vector<std::pair<std::size_t, std::size_t>> taken;  // [offset, end) of live ones
    for (std::size_t j = 0; j < i; ++j) {
      if (b[j].floats > 0 && b[j].first <= b[i].last && b[i].first <= b[j].last) {
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
    extent = std::max(extent, offset + b[i].floats);
  }
  return at;
}

}  // namespace

tile_layout layout_tile(const tiled_segment& s, const std::vector<region>& regions, bool backward) {
  tile_layout t;
  const std::size_t count = s.layers.size();
  std::vector<live_buffer> buffers;
  // Values: forward, from the step computing them to the last step reading them (the
  // output to the copy out); backward, all of them for the whole tile (the backward reads
  // each member's input and output).
  for (std::size_t l = 0; l < count; ++l) {
    buffers.push_back(
        {floats_of(s, l, regions[l]), backward ? 0 : l, backward ? count : last_reader(s, l)});
  }
  // Gradients, in backward step order (last member first): from the first consumer's
  // backward, which adds the first contribution, to the layer's own backward. Step ids
  // run down in the backward, so the interval in member ids is [l, last reader].
  for (std::size_t l = 0; backward && l < count; ++l) {
    buffers.push_back({floats_of(s, l, regions[l]), l, last_reader(s, l)});
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
