// The solver's update on the GPU: SGD with momentum and weight decay, as the host solver
// (engine/solver/sgd.hpp):  v = momentum * v + lr * (g + weight_decay * w);  w = w - v.
// A custom element-wise kernel rounds each operation as the host does: bit-identical.
#pragma once

#include <cstddef>

#include "engine/kernels/cuda/cuda_kernel_context.hpp"

namespace memweave::kernels::cuda {

/// Updates `count` weights `w` and momenta `v` from gradients `g`, in place (0 is a no-op).
/// Throws invalid_argument for a null tensor when count > 0.
void sgd_update(cuda_kernel_context& ctx, float learning_rate, float momentum, float weight_decay,
                std::size_t count, const float* g, float* w, float* v);

}  // namespace memweave::kernels::cuda
