// POOL (max, average): max backward reads x and y to find each window's maximum again.
#include "engine/layers/layer_step.hpp"

namespace memweave::layers {
namespace k = kernels::host;

namespace {

void forward(const k::kernel_context& ctx, const step_io& io) {
  k::pool_forward(ctx, io.input_shapes[0], std::get<pool_params>(io.l->params), io.inputs[0],
                  io.output);
}

void backward(const k::kernel_context& ctx, const step_io& io) {
  if (io.input_grads[0].data == nullptr) return;
  k::pool_backward(ctx, io.input_shapes[0], std::get<pool_params>(io.l->params), io.inputs[0],
                   io.output, io.output_grad, io.input_grads[0].data, io.input_grads[0].accumulate);
}

}  // namespace

const layer_steps pool_layer_steps{forward, backward};

}  // namespace memweave::layers
