// DROPOUT: the forward writes the mask (aux 0) from the step's seed; the backward reads it.
#include "engine/layers/layer_step.hpp"

namespace memweave::layers {
namespace k = kernels::host;

namespace {

void forward(const k::kernel_context& ctx, const step_io& io) {
  // Evaluation drops nothing: ratio 0 keeps every value with scale exactly 1 (y = x). The
  // mask of an image is drawn at its position in the global batch (the rank's first sample,
  // then the micro-batch's first image).
  const dropout_params p =
      io.inference ? dropout_params{.ratio = 0.0f} : std::get<dropout_params>(io.l->params);
  k::dropout_forward(ctx, io.input_shapes[0], p, io.seed, io.inputs[0], io.output, io.aux[0],
                     (io.first_sample + io.first_image) * io.input_shapes[0].per_image());
}

void backward(const k::kernel_context& ctx, const step_io& io) {
  if (io.input_grads[0].data == nullptr) return;
  k::dropout_backward(ctx, io.input_shapes[0], io.aux[0], io.output_grad, io.input_grads[0].data,
                      io.input_grads[0].accumulate);
}

}  // namespace

const layer_steps dropout_layer_steps{forward, backward};

}  // namespace memweave::layers
