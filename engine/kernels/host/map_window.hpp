// Running a spatial kernel (convolution, pooling) on part of a feature map, for tiled
// segments (engine/tiling): the input buffer holds a rectangle of the input map, the output
// buffer a rectangle of the output map, and the kernel computes every output element of its
// rectangle exactly as on the whole map. Positions of the input map outside the buffer are
// treated as padding (skipped, as the whole-map kernels skip the padding), so the caller's
// buffer must hold every in-map position its outputs read; no explicit padding is written,
// so the sums run over the same products in the same order as on the whole map.
#pragma once

#include <cstdint>

namespace memweave::kernels::host {

struct map_window {
  std::int64_t map_h = 0, map_w = 0;    ///< the whole input map's extent (checks the layer)
  std::int64_t in_y0 = 0, in_x0 = 0;    ///< the input buffer's first row / column in the map
  std::int64_t out_y0 = 0, out_x0 = 0;  ///< the output buffer's first row / column
  std::int64_t out_h = 0, out_w = 0;    ///< the output buffer's extent
};

}  // namespace memweave::kernels::host
