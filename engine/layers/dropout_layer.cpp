// DROPOUT: the forward writes the mask (aux 0) from the step's seed; the backward reads it.
#include "engine/layers/layer_step.hpp"

namespace memweave::layers {
namespace k = kernels::host;

namespace {

void forward(const k::kernel_context& ctx, const step_io& io) {
  k::dropout_forward(ctx, io.input_shapes[0], std::get<dropout_params>(io.l->params), io.seed,
                     io.inputs[0], io.output, io.aux[0],
                     io.first_image * io.input_shapes[0].per_image());
}

void backward(const k::kernel_context& ctx, const step_io& io) {
  if (io.input_grads[0].data == nullptr) return;
  k::dropout_backward(ctx, io.input_shapes[0], io.aux[0], io.output_grad, io.input_grads[0].data,
                      io.input_grads[0].accumulate);
}

}  // namespace

const layer_steps dropout_layer_steps{forward, backward};

}  // namespace memweave::layers
