// CONCAT along channels: the backward splits dy into the inputs' gradients.
#include "engine/layers/layer_step.hpp"

namespace memweave::layers {
namespace k = kernels::host;

namespace {

void forward(const k::kernel_context& ctx, const step_io& io) {
  k::concat_forward(ctx, io.input_shapes, io.inputs, io.output);
}

void backward(const k::kernel_context& ctx, const step_io& io) {
  k::concat_backward(ctx, io.input_shapes, io.output_grad, io.input_grads);
}

}  // namespace

const layer_steps concat_layer_steps{forward, backward};

}  // namespace memweave::layers
