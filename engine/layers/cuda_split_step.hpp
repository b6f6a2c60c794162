// A layer step run micro-batch by micro-batch on the GPU (TSPLIT; the host's is
// split_step.hpp): the same micro-batches, passes and staging copies (micro_steps.hpp), each
// micro-step the cuda kernels of its layer on the micro-batch's slices. The layers whose math
// couples the batch sum over the micro-batches on the device first (micro_batch.hpp: BN's
// statistics and backward sums, the loss over the whole batch); CONV and FC add each
// micro-batch's parameter gradients to the ones before (cuDNN's and cuBLAS's beta = 1).
// Results agree with the whole step to float rounding, not bit for bit (cuDNN and cuBLAS
// sum in their own orders; the host backend is the bit-identical one).
#pragma once

#include <cstddef>
#include <span>

#include "engine/layers/layer_step.hpp"
#include "engine/layers/split_step.hpp"

namespace memweave::layers {

/// The cuDNN algorithms a CONV step's whole-batch passes were chosen to run (the executor's
/// workspace selection); a micro-batch runs each where its workspace still fits, else the
/// fastest that does.
struct cuda_conv_choice {
  int forward = 0;
  int data = 0;
  int filter = 0;
};

/// io's CONV step with the cuDNN algorithms `c` names and io's
/// workspace: what the cuda launcher runs for a whole step, and each micro-step with the
/// algorithms fitted to its shape. The cuda layer step would choose its own from cuDNN's
/// heuristics instead.
void run_cuda_conv(kernels::cuda::cuda_kernel_context& ctx, const step_io& io, bool forward,
                   const cuda_conv_choice& c);

/// Runs the forward (or backward) of io's layer in `parts` micro-batches with the cuda
/// kernels, enqueued on ctx's stream from this thread; with `staged`, through their micro
/// buffers (whole values in page-locked host memory: the copies are cudaMemcpyAsync in
/// stream order); an fp16 one crosses as half the bytes, expanded and rounded on the device
/// with the host's bits, and *fp16_error (when given) is raised, in stream order, to the
/// largest relative error of the values rounded on their way out. Channel-cut micro-tensors
/// (staged_tensor::channels) are the host's only: a std::logic_error here (the executor
/// refuses output-channel groups on cuda). Returns the bytes the copies moved.
std::size_t run_cuda_split_step(kernels::cuda::cuda_kernel_context& ctx, const step_io& io,
                                bool forward, int parts, std::span<const staged_tensor> staged,
                                const cuda_conv_choice& conv, double* fp16_error = nullptr);

}  // namespace memweave::layers
