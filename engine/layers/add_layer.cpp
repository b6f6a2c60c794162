// ADD (residual join): the backward hands dy to every input's gradient.
#include "engine/layers/layer_step.hpp"

namespace memweave::layers {
namespace k = kernels::host;

namespace {

void forward(const k::kernel_context& ctx, const step_io& io) {
  k::add_forward(ctx, io.input_shapes[0], io.inputs, io.output);
}

void backward(const k::kernel_context& ctx, const step_io& io) {
  k::add_backward(ctx, io.input_shapes[0], io.output_grad, io.input_grads);
}

}  // namespace

const layer_steps add_layer_steps{forward, backward};

}  // namespace memweave::layers
