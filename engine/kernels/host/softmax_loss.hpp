// Softmax with cross-entropy loss on the host. Each image's classes are its c*h*w values
// (an FC output is (n, classes, 1, 1)); labels hold one class index per image, as a float.
// The loss is accumulated in double, image by image in order: bit-reproducible.
#pragma once

#include <cstdint>

#include "engine/kernels/host/kernel_context.hpp"
#include "memweave/engine/layer_params.hpp"

namespace memweave::kernels::host {

/// y = softmax(x) per image; returns the mean over images of -log softmax(x)[label]
/// (computed as log-sum-exp minus the label's logit, in double). Throws invalid_argument
/// when a label is not a whole number in [0, classes).
double softmax_loss_forward(const kernel_context& ctx, const shape4& in, const float* x,
                            const float* labels, float* y);

/// softmax_loss_forward of a micro-batch (TSPLIT): adds its images' losses to `total` in
/// image order (the whole batch's mean is total / batch, the same bits as one call).
void softmax_loss_add(const kernel_context& ctx, const shape4& in, const float* x,
                      const float* labels, float* y, double& total);

/// dx = (y - onehot(label)) / batch (batch 0: in.n; a micro-batch passes the whole batch's
/// n). accumulate: dx[i] += g[i].
void softmax_loss_backward(const kernel_context& ctx, const shape4& in, const float* y,
                           const float* labels, float* dx, bool accumulate, std::int64_t batch = 0);

}  // namespace memweave::kernels::host
