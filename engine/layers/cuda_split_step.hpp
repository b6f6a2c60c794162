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
/// (staged_tensor::channels) are run_cuda_channel_split_step's: a std::logic_error here.
/// Returns the bytes the copies moved.
std::size_t run_cuda_split_step(kernels::cuda::cuda_kernel_context& ctx, const step_io& io,
                                bool forward, int parts, std::span<const staged_tensor> staged,
                                const cuda_conv_choice& conv, double* fp16_error = nullptr);

/// The host's run_channel_split_step on the GPU: io's CONV (groups 1) or FC step in `groups`
/// output-channel groups inside each of `parts` micro-batches, the staged tensors with
/// channels 0 (the input and its gradient) copied micro-batch by micro-batch as
/// run_cuda_split_step does, those with channels K (output, output gradient, parameters, their
/// gradients and momenta) one group's rows at a time (cudaMemcpy2DAsync between the whole
/// value's rows and the packed micro buffer). A group runs the kernels on its rows of W and b
/// and its channels of y and dy where they are: a CONV on the micro-batch at once where they
/// are packed in their micro buffer, else image by image (an image's channels are one
/// contiguous block of NCHW: cuDNN sees packed tensors either way; each pass's algorithm
/// fitted to the call's shape as a micro-batch's is), an FC on every image at once with y's
/// and dy's rows `K` apart where in place (the GEMM's leading dimension). dx sums over the groups
/// (cuDNN's and cuBLAS's beta = 1 after the first), the weight gradients over the images. In
/// backward, `update` runs each of `updates` on each group's rows after the last micro-batch's
/// group, while they are on the device. Other layer types, grouped CONV and groups 1 run
/// run_cuda_split_step, then the updates whole. Results agree with the whole step to float
/// rounding. Returns the bytes the copies moved (staged_copy_bytes).
std::size_t run_cuda_channel_split_step(kernels::cuda::cuda_kernel_context& ctx, const step_io& io,
                                        bool forward, int groups, int parts,
                                        std::span<const staged_tensor> staged,
                                        const cuda_conv_choice& conv,
                                        std::span<const param_update> updates,
                                        const update_fn& update, double* fp16_error = nullptr);

}  // namespace memweave::layers
