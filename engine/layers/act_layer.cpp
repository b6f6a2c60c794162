// ACT (ReLU, tanh): backward reads the output y, not x.
#include "engine/layers/layer_step.hpp"

namespace memweave::layers {
namespace k = kernels::host;

namespace {

void forward(const k::kernel_context& ctx, const step_io& io) {
  k::act_forward(ctx, io.input_shapes[0], std::get<act_params>(io.l->params), io.inputs[0],
                 io.output);
}

void backward(const k::kernel_context& ctx, const step_io& io) {
  if (io.input_grads[0].data == nullptr) return;
  k::act_backward(ctx, io.input_shapes[0], std::get<act_params>(io.l->params), io.output,
                  io.output_grad, io.input_grads[0].data, io.input_grads[0].accumulate);
}

}  // namespace

const layer_steps act_layer_steps{forward, backward};

}  // namespace memweave::layers
