// TILED: a fused segment run tile by tile (SFT); the work is engine/tiling's.
#include "engine/layers/layer_step.hpp"
#include "engine/tiling/tiled_segment.hpp"

namespace memweave::layers {
namespace k = kernels::host;

namespace {

const tiling::tiled_segment& segment_of(const step_io& io) {
  return *std::get<tiled_params>(io.l->params).segment;
}

void forward(const k::kernel_context& ctx, const step_io& io) {
  tiling::tiled_forward(ctx, segment_of(io), io);
}

void backward(const k::kernel_context& ctx, const step_io& io) {
  tiling::tiled_backward(ctx, segment_of(io), io);
}

}  // namespace

const layer_steps tiled_layer_steps{forward, backward};

}  // namespace memweave::layers
