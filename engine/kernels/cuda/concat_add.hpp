// CONCAT along channels and ADD of k inputs on the GPU, with the host kernels' semantics
// (engine/kernels/host/concat_add.hpp). CONCAT copies with one cudaMemcpy2DAsync per input
// (n rows of c_i*h*w floats, pitched in y); an accumulating gradient goes through a custom
// pitched add. ADD sums left to right with a custom kernel, rounding as the host does
// (bit-identical results).
#pragma once

#include <span>

#include "engine/kernels/cuda/cuda_kernel_context.hpp"
#include "memweave/engine/layer_params.hpp"

namespace memweave::kernels::cuda {

/// Where one input's gradient goes: `data` (null = this input needs no gradient) and
/// whether to add into it rather than overwrite (as kernels::host::grad_out).
struct grad_out {
  float* data = nullptr;
  bool accumulate = false;
};

/// y (n, sum of c_i, h, w) = the inputs x_i (n, c_i, h, w) stacked along channels in order.
/// Throws invalid_argument when the inputs differ in n, h or w, or the spans differ in size.
void concat_forward(cuda_kernel_context& ctx, std::span<const shape4> in,
                    std::span<const float* const> x, float* y);

/// Splits dy into the inputs' gradients dx[i] (each per its own accumulate flag).
void concat_backward(cuda_kernel_context& ctx, std::span<const shape4> in, const float* dy,
                     std::span<const grad_out> dx);

/// y = ((x_0 + x_1) + x_2) + ... element by element (y may equal x_0). Throws
/// invalid_argument when no input is given.
void add_forward(cuda_kernel_context& ctx, const shape4& s, std::span<const float* const> x,
                 float* y);

/// dx[i] = dy (or dx[i] += dy) for every input with a gradient.
void add_backward(cuda_kernel_context& ctx, const shape4& s, const float* dy,
                  std::span<const grad_out> dx);

}  // namespace memweave::kernels::cuda
