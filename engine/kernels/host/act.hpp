// Activations on the host: ReLU, tanh and sigmoid, element by element. Backward reads the output
// y (as cuDNN), so the forward may run in place (y == x). Bit-reproducible.
#pragma once

#include <cmath>

#include "engine/kernels/host/kernel_context.hpp"
#include "memweave/engine/layer_params.hpp"

namespace memweave::kernels::host {

/// One element of each activation: what act_forward writes, and what a fused replay
/// (bn_act_normalize) writes, with the same bits.
inline float relu_value(float x) noexcept {
  return x > 0.0f ? x : 0.0f;
}
inline float tanh_value(float x) noexcept {
  return std::tanh(x);
}
inline float sigmoid_value(float x) noexcept {
  return 1.0f / (1.0f + std::exp(-x));
}

/// y = relu(x) = (x > 0 ? x : 0), tanh(x) or sigmoid(x) = 1 / (1 + exp(-x)). y may equal x.
void act_forward(const kernel_context& ctx, const shape4& s, const act_params& p, const float* x,
                 float* y);

/// dx = dy * (y > 0) for ReLU, dy * (1 - y*y) for tanh, dy * (y * (1 - y)) for sigmoid.
/// accumulate: dx[i] += g[i]
/// (g = what accumulate = false writes). dx may equal dy.
void act_backward(const kernel_context& ctx, const shape4& s, const act_params& p, const float* y,
                  const float* dy, float* dx, bool accumulate);

}  // namespace memweave::kernels::host
