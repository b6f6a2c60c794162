// FC: y = x·Wᵀ + b over each image flattened; backward dx, dW, db.
#include "engine/layers/layer_step.hpp"

namespace memweave::layers {
namespace k = kernels::host;

namespace {

void forward(const k::kernel_context& ctx, const step_io& io) {
  const auto& p = std::get<fc_params>(io.l->params);
  k::fc_forward(ctx, io.input_shapes[0], p, io.inputs[0], io.params[0],
                p.bias ? io.params[1] : nullptr, io.output);
}

void backward(const k::kernel_context& ctx, const step_io& io) {
  const auto& p = std::get<fc_params>(io.l->params);
  if (io.input_grads[0].data != nullptr) {
    k::fc_backward_data(ctx, io.input_shapes[0], p, io.params[0], io.output_grad,
                        io.input_grads[0].data, io.input_grads[0].accumulate);
  }
  k::fc_backward_weights(ctx, io.input_shapes[0], p, io.inputs[0], io.output_grad,
                         io.param_grads[0], p.bias ? io.param_grads[1] : nullptr,
                         io.accumulate_param_grads);
}

}  // namespace

const layer_steps fc_layer_steps{forward, backward};

}  // namespace memweave::layers
