// Softmax with cross-entropy loss on the GPU, with the host kernels' semantics
// (engine/kernels/host/softmax_loss.hpp): each image's classes are its c*h*w values;
// labels hold one class index per image, as a float. y comes from cudnnSoftmaxForward
// (CUDNN_SOFTMAX_ACCURATE, per instance); the loss, the mean over images of lse(x) -
// x[label] in double, from one custom block in a fixed order (deterministic), into the
// context's device scratch; the gradient from a custom element-wise kernel.
#pragma once

#include "engine/kernels/cuda/cuda_kernel_context.hpp"
#include "memweave/engine/layer_params.hpp"

namespace memweave::kernels::cuda {

/// y = softmax(x) per image, and the batch's mean loss into ctx.loss_scratch(). When `loss`
/// is non-null, also copies it there (cudaMemcpyAsync, then waits for the stream) and
/// throws invalid_argument when a label was not a whole number in [0, classes); when null,
/// nothing waits and a bad label goes unreported (it counts 0 in the loss).
void softmax_loss_forward(cuda_kernel_context& ctx, const shape4& in, const float* x,
                          const float* labels, float* y, double* loss = nullptr);

/// dx = (y - onehot(label)) / batch (accumulate: dx += it); `batch` 0 is in.n (a split
/// step's micro-batch passes the whole batch's). A bad label subtracts nothing (and is
/// reported by the next softmax_loss_forward that reads its loss back).
void softmax_loss_backward(cuda_kernel_context& ctx, const shape4& in, const float* y,
                           const float* labels, float* dx, bool accumulate, std::int64_t batch = 0);

}  // namespace memweave::kernels::cuda
