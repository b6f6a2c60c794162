// The solver: SGD with momentum and weight decay, as Caffe:
//   v = momentum * v + lr * (g + weight_decay * w);   w = w - v
// Element-wise, so deterministic for any thread count.
#pragma once

#include <cstddef>

#include "engine/kernels/host/kernel_context.hpp"

namespace memweave {

struct sgd_options {
  float learning_rate = 0.01f;
  float momentum = 0.9f;
  float weight_decay = 5e-4f;
};

/// Updates `count` weights `w` and momenta `v` from gradients `g`, in place.
void sgd_update(const kernels::host::kernel_context& ctx, const sgd_options& o, std::size_t count,
                const float* g, float* w, float* v);

}  // namespace memweave
