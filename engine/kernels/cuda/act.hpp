// Activations on the GPU: ReLU, tanh and sigmoid. The forward runs cuDNN's
// (cudnnActivationForward); the backward reads the output y only (as the host kernels), so the
// forward may run in place (y == x), and dx may equal dy. cudnnActivationBackward also takes x,
// which the engine does not keep for ACT, so the backward is a custom element-wise kernel computing
// the host's expression with the host's rounding (bit-identical for equal y and dy).
#pragma once

#include "engine/kernels/cuda/cuda_kernel_context.hpp"
#include "memweave/engine/layer_params.hpp"

namespace memweave::kernels::cuda {

/// y = relu(x), tanh(x) or sigmoid(x). y may equal x.
void act_forward(cuda_kernel_context& ctx, const shape4& s, const act_params& p, const float* x,
                 float* y);

/// dx = dy * (y > 0) for ReLU, dy * (1 - y*y) for tanh, dy * (y * (1 - y)) for sigmoid
/// (accumulate: dx += it). dx may equal
/// dy.
void act_backward(cuda_kernel_context& ctx, const shape4& s, const act_params& p, const float* y,
                  const float* dy, float* dx, bool accumulate);

}  // namespace memweave::kernels::cuda
