// The cuda steps of every layer type: the same step_io fields as the host steps
// (engine/layers/<type>_layer.cpp), the cuda kernels instead of the host ones. Each step
// enqueues on the context's stream from the calling thread and returns; only SOFTMAX's
// forward waits, to hand the batch's loss to *io.loss.
//
// CONV: step_io.algo names a host algorithm and is ignored here. Each pass takes the
// fastest cuDNN heuristic algorithm (cudnnGetConvolution*Algorithm_v7 order, cached per
// shape in the context) whose workspace fits step_io.workspace_bytes, falling back to the
// no-workspace algorithm (forward IMPLICIT_GEMM, backward ALGO_0); the backward's data and
// filter passes share the backward workspace one after the other. The step's workspace is
// sized by the executor; a later conv-workspace module may size it for the cuDNN choice.
//
// Thread safety: as the context (one host thread at a time).
#include <cudnn.h>

#include <vector>

#include "engine/kernels/cuda/cuda_kernels.hpp"
#include "engine/layers/layer_step.hpp"
#include "memweave/core/error.hpp"

namespace memweave::layers {

namespace kc = kernels::cuda;

namespace {

using context = kc::cuda_kernel_context;

std::vector<kc::grad_out> grads_of(const step_io& io) {
  std::vector<kc::grad_out> out;
  out.reserve(io.input_grads.size());
  for (const auto& g : io.input_grads) out.push_back({g.data, g.accumulate});
  return out;
}

std::size_t workspace_bytes(const step_io& io) {
  return io.workspace == nullptr ? 0 : io.workspace_bytes;
}

// ---- DATA: the executor copies the batch in; nothing to run.
void data_forward(context&, const step_io&) {}

// ---- CONV
void conv_forward(context& ctx, const step_io& io) {
  const auto& p = std::get<conv_params>(io.l->params);
  const shape4& in = io.input_shapes[0];
  const auto algo = static_cast<cudnnConvolutionFwdAlgo_t>(
      kc::choose_conv_algorithm(ctx, kc::conv_pass::forward, in, p, workspace_bytes(io)));
  kc::conv_forward(ctx, algo, io.workspace, workspace_bytes(io), in, p, io.inputs[0], io.params[0],
                   p.bias ? io.params[1] : nullptr, io.output);
}

void conv_backward(context& ctx, const step_io& io) {
  const auto& p = std::get<conv_params>(io.l->params);
  const shape4& in = io.input_shapes[0];
  const std::size_t bytes = workspace_bytes(io);
  if (io.input_grads[0].data != nullptr) {
    const auto algo = static_cast<cudnnConvolutionBwdDataAlgo_t>(
        kc::choose_conv_algorithm(ctx, kc::conv_pass::backward_data, in, p, bytes));
    kc::conv_backward_data(ctx, algo, io.workspace, bytes, in, p, io.params[0], io.output_grad,
                           io.input_grads[0].data, io.input_grads[0].accumulate);
  }
  const auto algo = static_cast<cudnnConvolutionBwdFilterAlgo_t>(
      kc::choose_conv_algorithm(ctx, kc::conv_pass::backward_filter, in, p, bytes));
  kc::conv_backward_filter(ctx, algo, io.workspace, bytes, in, p, io.inputs[0], io.output_grad,
                           io.param_grads[0], p.bias ? io.param_grads[1] : nullptr,
                           io.accumulate_param_grads);
}

// ---- FC
void fc_forward(context& ctx, const step_io& io) {
  const auto& p = std::get<fc_params>(io.l->params);
  kc::fc_forward(ctx, io.input_shapes[0], p, io.inputs[0], io.params[0],
                 p.bias ? io.params[1] : nullptr, io.output);
}

void fc_backward(context& ctx, const step_io& io) {
  const auto& p = std::get<fc_params>(io.l->params);
  if (io.input_grads[0].data != nullptr) {
    kc::fc_backward_data(ctx, io.input_shapes[0], p, io.params[0], io.output_grad,
                         io.input_grads[0].data, io.input_grads[0].accumulate);
  }
  kc::fc_backward_weights(ctx, io.input_shapes[0], p, io.inputs[0], io.output_grad,
                          io.param_grads[0], p.bias ? io.param_grads[1] : nullptr,
                          io.accumulate_param_grads);
}

// ---- POOL (average pooling's backward reads neither x nor y: they may be null)
void pool_forward(context& ctx, const step_io& io) {
  kc::pool_forward(ctx, io.input_shapes[0], std::get<pool_params>(io.l->params), io.inputs[0],
                   io.output);
}

void pool_backward(context& ctx, const step_io& io) {
  if (io.input_grads[0].data == nullptr) return;
  kc::pool_backward(ctx, io.input_shapes[0], std::get<pool_params>(io.l->params), io.inputs[0],
                    io.output, io.output_grad, io.input_grads[0].data,
                    io.input_grads[0].accumulate);
}

// ---- ACT (backward reads y)
void act_forward(context& ctx, const step_io& io) {
  kc::act_forward(ctx, io.input_shapes[0], std::get<act_params>(io.l->params), io.inputs[0],
                  io.output);
}

void act_backward(context& ctx, const step_io& io) {
  if (io.input_grads[0].data == nullptr) return;
  kc::act_backward(ctx, io.input_shapes[0], std::get<act_params>(io.l->params), io.output,
                   io.output_grad, io.input_grads[0].data, io.input_grads[0].accumulate);
}

// ---- BN: params gamma, beta, running_mean, running_var; aux saved_mean, saved_inv_std. The
// running statistics go to cuDNN only when update_running_stats (a recomputed forward
// passes none, leaving them untouched); evaluation runs cuDNN's inference form on them.
void bn_forward(context& ctx, const step_io& io) {
  const auto& p = std::get<bn_params>(io.l->params);
  if (io.inference) {
    kc::bn_forward_inference(ctx, io.input_shapes[0], p, io.inputs[0], io.params[0], io.params[1],
                             io.params[2], io.params[3], io.output);
    return;
  }
  float* running_mean = io.update_running_stats ? io.params[2] : nullptr;
  float* running_var = io.update_running_stats ? io.params[3] : nullptr;
  kc::bn_forward_training(ctx, io.input_shapes[0], p, io.inputs[0], io.params[0], io.params[1],
                          io.output, io.aux[0], io.aux[1], running_mean, running_var);
}

void bn_backward(context& ctx, const step_io& io) {
  kc::bn_backward(ctx, io.input_shapes[0], std::get<bn_params>(io.l->params), io.inputs[0],
                  io.aux[0], io.aux[1], io.params[0], io.output_grad, io.input_grads[0].data,
                  io.param_grads[0], io.param_grads[1], io.input_grads[0].accumulate);
}

// ---- LRN (backward reads x and y)
void lrn_forward(context& ctx, const step_io& io) {
  kc::lrn_forward(ctx, io.input_shapes[0], std::get<lrn_params>(io.l->params), io.inputs[0],
                  io.output);
}

void lrn_backward(context& ctx, const step_io& io) {
  if (io.input_grads[0].data == nullptr) return;
  kc::lrn_backward(ctx, io.input_shapes[0], std::get<lrn_params>(io.l->params), io.inputs[0],
                   io.output, io.output_grad, io.input_grads[0].data, io.input_grads[0].accumulate);
}

// ---- DROPOUT: the mask (aux 0) from the step's seed, the host's hash
void dropout_forward(context& ctx, const step_io& io) {
  // Evaluation drops nothing: ratio 0 keeps every value with scale exactly 1 (y = x).
  const dropout_params p =
      io.inference ? dropout_params{.ratio = 0.0f} : std::get<dropout_params>(io.l->params);
  // As the host's: an image's mask at its place in the global batch (the rank's first
  // sample, then a micro-batch's first image).
  kc::dropout_forward(ctx, io.input_shapes[0], p, io.seed, io.inputs[0], io.output, io.aux[0],
                      (io.first_sample + io.first_image) * io.input_shapes[0].per_image());
}

void dropout_backward(context& ctx, const step_io& io) {
  if (io.input_grads[0].data == nullptr) return;
  kc::dropout_backward(ctx, io.input_shapes[0], io.aux[0], io.output_grad, io.input_grads[0].data,
                       io.input_grads[0].accumulate);
}

// ---- SOFTMAX + cross-entropy: the loss is read back (the stream waited for) only when the
// executor asks for it.
void softmax_loss_forward(context& ctx, const step_io& io) {
  kc::softmax_loss_forward(ctx, io.input_shapes[0], io.inputs[0], io.labels, io.output, io.loss);
}

void softmax_loss_backward(context& ctx, const step_io& io) {
  if (io.input_grads[0].data == nullptr) return;
  kc::softmax_loss_backward(ctx, io.input_shapes[0], io.output, io.labels, io.input_grads[0].data,
                            io.input_grads[0].accumulate);
}

// ---- CONCAT, ADD
void concat_forward(context& ctx, const step_io& io) {
  kc::concat_forward(ctx, io.input_shapes, io.inputs, io.output);
}

void concat_backward(context& ctx, const step_io& io) {
  kc::concat_backward(ctx, io.input_shapes, io.output_grad, grads_of(io));
}

void add_forward(context& ctx, const step_io& io) {
  kc::add_forward(ctx, io.input_shapes[0], io.inputs, io.output);
}

void add_backward(context& ctx, const step_io& io) {
  kc::add_backward(ctx, io.input_shapes[0], io.output_grad, grads_of(io));
}

constexpr cuda_layer_steps k_data{data_forward, nullptr};
constexpr cuda_layer_steps k_conv{conv_forward, conv_backward};
constexpr cuda_layer_steps k_fc{fc_forward, fc_backward};
constexpr cuda_layer_steps k_pool{pool_forward, pool_backward};
constexpr cuda_layer_steps k_act{act_forward, act_backward};
constexpr cuda_layer_steps k_bn{bn_forward, bn_backward};
constexpr cuda_layer_steps k_lrn{lrn_forward, lrn_backward};
constexpr cuda_layer_steps k_dropout{dropout_forward, dropout_backward};
constexpr cuda_layer_steps k_softmax_loss{softmax_loss_forward, softmax_loss_backward};
constexpr cuda_layer_steps k_concat{concat_forward, concat_backward};
constexpr cuda_layer_steps k_add{add_forward, add_backward};

// ---- TILED: not built for cuda yet (its members' cuda steps over tile regions would be).
[[noreturn]] void tiled_unsupported(context&, const step_io& io) {
  throw invalid_argument(
      "layer '" + io.l->name +
      "' is a tiled segment (SFT), which runs on the host and null devices only; "
      "train without --tile on cuda");
}
constexpr cuda_layer_steps k_tiled{tiled_unsupported, tiled_unsupported};

}  // namespace

const cuda_layer_steps& cuda_layer_steps_for(layer_type type) noexcept {
  switch (type) {
    case layer_type::data:
      return k_data;
    case layer_type::conv:
      return k_conv;
    case layer_type::fc:
      return k_fc;
    case layer_type::pool:
      return k_pool;
    case layer_type::act:
      return k_act;
    case layer_type::bn:
      return k_bn;
    case layer_type::lrn:
      return k_lrn;
    case layer_type::dropout:
      return k_dropout;
    case layer_type::softmax_loss:
      return k_softmax_loss;
    case layer_type::concat:
      return k_concat;
    case layer_type::add:
      return k_add;
    case layer_type::tiled:
      return k_tiled;
  }
  return k_data;
}

}  // namespace memweave::layers
