// BN in training mode (in evaluation, normalised by the running statistics). Parameters in order:
// gamma, beta, running_mean, running_var; aux: saved_mean, saved_inv_std. The running statistics
// are updated by the forward step only when update_running_stats (a recomputed forward must not
// update them twice).
#include "engine/layers/layer_step.hpp"

namespace memweave::layers {
namespace k = kernels::host;

namespace {

void forward(const k::kernel_context& ctx, const step_io& io) {
  const auto& p = std::get<bn_params>(io.l->params);
  if (io.inference) {
    k::bn_forward_inference(ctx, io.input_shapes[0], p, io.inputs[0], io.params[0], io.params[1],
                            io.params[2], io.params[3], io.output);
    return;
  }
  k::bn_forward_training(ctx, io.input_shapes[0], p, io.inputs[0], io.params[0], io.params[1],
                         io.output, io.aux[0], io.aux[1]);
  if (io.update_running_stats) {
    k::bn_update_running(io.input_shapes[0], p, io.aux[0], io.aux[1], io.params[2], io.params[3]);
  }
}

void backward(const k::kernel_context& ctx, const step_io& io) {
  k::bn_backward(ctx, io.input_shapes[0], std::get<bn_params>(io.l->params), io.inputs[0],
                 io.aux[0], io.aux[1], io.params[0], io.output_grad, io.input_grads[0].data,
                 io.param_grads[0], io.param_grads[1], io.input_grads[0].accumulate);
}

}  // namespace

const layer_steps bn_layer_steps{forward, backward};

}  // namespace memweave::layers
