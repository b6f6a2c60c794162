// Tile regions: the grid cut of the segment's output, and each tile's receptive field
// propagated back through the members (tile_geometry.hpp). Pure; thread-safe.
#include "engine/tiling/tile_geometry.hpp"

#include <algorithm>

namespace memweave::tiling {
namespace detail {

namespace {

// Empty regions are all the same one, so that comparisons and buffer origins are simple.
region normalized(const region& r) {
  return r.empty() ? region{} : r;
}

region bounding_box(const region& a, const region& b) {
  if (a.empty()) return normalized(b);
  if (b.empty()) return a;
  return {std::min(a.y0, b.y0), std::max(a.y1, b.y1), std::min(a.x0, b.x0), std::max(a.x1, b.x1)};
}

// The input rows (or columns) a window of `kernel` taps `dilation` apart, stride `stride`
// and padding `pad` reads for outputs [lo, hi), clamped to [0, extent).
span window_span(std::int64_t lo, std::int64_t hi, std::int64_t kernel, std::int64_t stride,
                 std::int64_t pad, std::int64_t dilation, std::int64_t extent) {
  const std::int64_t first = lo * stride - pad;
  const std::int64_t last = (hi - 1) * stride - pad + (kernel - 1) * dilation;  // inclusive
  return {std::max<std::int64_t>(first, 0), std::min(last + 1, extent)};
}

}  // namespace

span cut(std::int64_t extent, std::int64_t parts, std::int64_t i) {
  return {extent * i / parts, extent * (i + 1) / parts};
}

region grid_part(const tiled_segment& s, std::int64_t tile, std::int64_t h, std::int64_t w) {
  const span rows = cut(h, s.tiles_h, tile / s.tiles_w);
  const span cols = cut(w, s.tiles_w, tile % s.tiles_w);
  return normalized({rows.lo, rows.hi, cols.lo, cols.hi});
}

region need(const layer& c, const shape4& in_shape, const region& out) {
  if (out.empty()) return {};
  span rows{out.y0, out.y1}, cols{out.x0, out.x1};
  if (c.type == layer_type::conv) {
    const auto& p = std::get<conv_params>(c.params);
    rows = window_span(out.y0, out.y1, p.kernel_h, p.stride_h, p.pad_h, p.dilation_h, in_shape.h);
    cols = window_span(out.x0, out.x1, p.kernel_w, p.stride_w, p.pad_w, p.dilation_w, in_shape.w);
  } else if (c.type == layer_type::pool) {
    const auto& p = std::get<pool_params>(c.params);
    rows = window_span(out.y0, out.y1, p.kernel_h, p.stride_h, p.pad_h, 1, in_shape.h);
    cols = window_span(out.x0, out.x1, p.kernel_w, p.stride_w, p.pad_w, 1, in_shape.w);
  }
  return normalized({rows.lo, rows.hi, cols.lo, cols.hi});
}

std::vector<region> regions_of_tile(const tiled_segment& s, std::int64_t tile) {
  const std::size_t count = s.layers.size();
  std::vector<region> r(count);
  const shape4& out = s.layers.back().output_shape;
  r.back() = grid_part(s, tile, out.h, out.w);
  // Reverse topological order: every consumer's region is final before its inputs' needs
  // are taken from it.
  for (std::size_t l = count; l-- > 0;) {
    const layer& m = s.layers[l];
    if (m.type == layer_type::bn) {
      r[l] = bounding_box(r[l], grid_part(s, tile, m.output_shape.h, m.output_shape.w));
    }
    for (const layer_id in : m.inputs) {
      r[in] = bounding_box(r[in], need(m, s.layers[in].output_shape, r[l]));
    }
  }
  return r;
}

}  // namespace detail

std::vector<std::vector<region>> tile_regions(const tiled_segment& s) {
  std::vector<std::vector<region>> all;
  all.reserve(static_cast<std::size_t>(detail::tile_count(s)));
  for (std::int64_t t = 0; t < detail::tile_count(s); ++t) {
    all.push_back(detail::regions_of_tile(s, t));
  }
  return all;
}

}  // namespace memweave::tiling
