// Private helpers of the host kernels: the one parallel loop they all use, shape
// arithmetic, and argument checks. Not part of the kernels' API.
//
// parallel_for(ctx, n, grain, body) calls body(begin, end) on disjoint ranges covering
// [0, n). Bodies must compute each index independently of how [0, n) is cut (kernels keep
// any per-range scratch free of carried state), so results never depend on the partition.
#pragma once

#include <cstdint>
#include <string>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "engine/kernels/host/kernel_context.hpp"
#include "engine/kernels/host/map_window.hpp"
#include "engine/kernels/kernel_checks.hpp"
#include "memweave/core/error.hpp"
#include "memweave/engine/layer_params.hpp"

namespace memweave::kernels::host::detail {

/// Runs body(begin, end) over [0, n) in `ctx`'s arena, in ranges of at least `grain`
/// indices; serially on the calling thread when one thread or one range would do.
template <class Body>
void parallel_for(const kernel_context& ctx, std::int64_t n, std::int64_t grain, Body&& body) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (ctx.threads() == 1 || n <= grain) {
    body(std::int64_t{0}, n);
    return;
  }
  ctx.execute([&] {
    tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n, grain),
                      [&](const tbb::blocked_range<std::int64_t>& r) { body(r.begin(), r.end()); });
  });
}

/// A grain giving each task about `work_per_task` units when one index costs `cost`.
inline std::int64_t grain_for(std::int64_t cost, std::int64_t work_per_task = 1 << 15) {
  if (cost < 1) cost = 1;
  const std::int64_t g = work_per_task / cost;
  return g < 1 ? 1 : g;
}

// The argument checks, shared with the cuda kernels (engine/kernels/kernel_checks.hpp).
using checks::check_pointer;
using checks::check_pointers;
using checks::check_shape;
using checks::check_tensors;
using checks::shape_text;

/// Ceiling division for a >= 0 (or any sign of a with b > 0: rounds toward +infinity).
inline std::int64_t div_up(std::int64_t a, std::int64_t b) {
  return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}

/// Floor division for b > 0.
inline std::int64_t div_down(std::int64_t a, std::int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

/// The output positions o in [0, out) whose input position o*stride + offset lies in
/// [0, in): [lo, hi) (empty when hi <= lo).
struct span_range {
  std::int64_t lo, hi;
};
inline span_range valid_outputs(std::int64_t offset, std::int64_t stride, std::int64_t in,
                                std::int64_t out) {
  std::int64_t lo = div_up(-offset, stride);
  std::int64_t hi = div_down(in - 1 - offset, stride) + 1;
  if (lo < 0) lo = 0;
  if (hi > out) hi = out;
  return {lo, hi};
}

/// Checks that a map_window's buffers lie inside the maps: the input buffer `in` (n, c,
/// rows, columns) inside the input map, the output rectangle inside the whole output
/// (out_h x out_w of the whole map, as the whole-map kernel computes it).
inline void check_window(const char* kernel, const shape4& in, const map_window& win,
                         std::int64_t whole_out_h, std::int64_t whole_out_w) {
  MEMWEAVE_EXPECTS(
      in.h >= 0 && in.w >= 0 && win.in_y0 >= 0 && win.in_x0 >= 0 && win.in_y0 + in.h <= win.map_h &&
          win.in_x0 + in.w <= win.map_w && win.out_y0 >= 0 && win.out_x0 >= 0 && win.out_h >= 0 &&
          win.out_w >= 0 && win.out_y0 + win.out_h <= whole_out_h &&
          win.out_x0 + win.out_w <= whole_out_w,
      std::string(kernel) + ": window of input rows [" + std::to_string(win.in_y0) + ", " +
          std::to_string(win.in_y0 + in.h) + ") columns [" + std::to_string(win.in_x0) + ", " +
          std::to_string(win.in_x0 + in.w) + ") and output rows [" + std::to_string(win.out_y0) +
          ", +" + std::to_string(win.out_h) + ") columns [" + std::to_string(win.out_x0) + ", +" +
          std::to_string(win.out_w) + ") of a " + std::to_string(win.map_h) + "x" +
          std::to_string(win.map_w) + " map with a " + std::to_string(whole_out_h) + "x" +
          std::to_string(whole_out_w) + " output; expected both inside their maps");
}

}  // namespace memweave::kernels::host::detail
