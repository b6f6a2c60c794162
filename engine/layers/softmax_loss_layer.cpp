// SOFTMAX with cross-entropy: the forward writes the probabilities y and the batch's mean
// loss; the backward makes dx = (y - onehot)/N from y and the labels (no incoming gradient).
#include "engine/layers/layer_step.hpp"

namespace memweave::layers {
namespace k = kernels::host;

namespace {

void forward(const k::kernel_context& ctx, const step_io& io) {
  const double loss =
      k::softmax_loss_forward(ctx, io.input_shapes[0], io.inputs[0], io.labels, io.output);
  if (io.loss != nullptr) *io.loss = loss;
}

void backward(const k::kernel_context& ctx, const step_io& io) {
  if (io.input_grads[0].data == nullptr) return;
  k::softmax_loss_backward(ctx, io.input_shapes[0], io.output, io.labels, io.input_grads[0].data,
                           io.input_grads[0].accumulate);
}

}  // namespace

const layer_steps softmax_loss_layer_steps{forward, backward};

}  // namespace memweave::layers
