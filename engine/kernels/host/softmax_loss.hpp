// Softmax with cross-entropy loss on the host. Each image's classes are its c*h*w values
// (an FC output is (n, classes, 1, 1)); labels hold one class index per image, as a float.
// The loss is accumulated in double, image by image in order: bit-reproducible.
#pragma once

#include "engine/kernels/host/kernel_context.hpp"
#include "memweave/engine/layer_params.hpp"

namespace memweave::kernels::host {

/// y = softmax(x) per image; returns the mean over images of -log softmax(x)[label]
/// (computed as log-sum-exp minus the label's logit, in double). Throws invalid_argument
/// when a label is not a whole number in [0, classes).
double softmax_loss_forward(const kernel_context& ctx, const shape4& in, const float* x,
                            const float* labels, float* y);

/// dx = (y - onehot(label)) / n. accumulate: dx[i] += g[i].
void softmax_loss_backward(const kernel_context& ctx, const shape4& in, const float* y,
                           const float* labels, float* dx, bool accumulate);

}  // namespace memweave::kernels::host
