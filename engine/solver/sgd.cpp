// SGD with momentum: element-wise, parallel over fixed blocks, no reductions.
#include "engine/solver/sgd.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

namespace memweave {

void sgd_update(const kernels::host::kernel_context& ctx, const sgd_options& o, std::size_t count,
                const float* g, float* w, float* v) {
  ctx.execute([&] {
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, count, 1 << 14),
                      [&](const tbb::blocked_range<std::size_t>& r) {
                        for (std::size_t i = r.begin(); i < r.end(); ++i) {
                          v[i] =
                              o.momentum * v[i] + o.learning_rate * (g[i] + o.weight_decay * w[i]);
                          w[i] -= v[i];
                        }
                      });
  });
}

}  // namespace memweave
