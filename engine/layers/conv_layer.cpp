// CONV: forward y = conv(x, w) + b; backward dx (when x has a gradient), dw, db. The
// algorithm and its workspace are chosen by the executor.
#include "engine/layers/layer_step.hpp"

namespace memweave::layers {
namespace k = kernels::host;

namespace {

k::conv_config config(const step_io& io, k::conv_algo algo, std::int64_t chunk) {
  return {algo, chunk, io.workspace, io.workspace_bytes};
}

void forward(const k::kernel_context& ctx, const step_io& io) {
  const auto& p = std::get<conv_params>(io.l->params);
  k::conv_forward(ctx, config(io, io.algo, io.chunk), io.input_shapes[0], p, io.inputs[0],
                  io.params[0], p.bias ? io.params[1] : nullptr, io.output);
}

void backward(const k::kernel_context& ctx, const step_io& io) {
  const auto& p = std::get<conv_params>(io.l->params);
  if (io.input_grads[0].data != nullptr) {
    k::conv_backward_data(ctx, config(io, io.data_algo, io.data_chunk), io.input_shapes[0], p,
                          io.params[0], io.output_grad, io.input_grads[0].data,
                          io.input_grads[0].accumulate);
  }
  k::conv_backward_filter(ctx, config(io, io.filter_algo, io.filter_chunk), io.input_shapes[0], p,
                          io.inputs[0], io.output_grad, io.param_grads[0],
                          p.bias ? io.param_grads[1] : nullptr, io.accumulate_param_grads);
}

}  // namespace

const layer_steps conv_layer_steps{forward, backward};

}  // namespace memweave::layers
