// What the cuda backend cannot run, checked over the whole network before a step does: a
// layer the host kernels accept but cuDNN does not (an LRN window over 16 channels), or one
// with no cuda steps (a tiled segment). Without it such a network planned, started training on
// a GPU and failed at the layer's first step. No CUDA header: the host build tests it.
#pragma once

#include <cstdint>

#include "memweave/engine/network.hpp"

namespace memweave::layers {

/// cuDNN's LRN bounds (cudnn_ops.h: CUDNN_LRN_MIN_N, CUDNN_LRN_MAX_N, CUDNN_LRN_MIN_K,
/// CUDNN_LRN_MIN_BETA); the cuda kernel static_asserts that they match.
inline constexpr std::int64_t k_cudnn_lrn_min_size = 1;
inline constexpr std::int64_t k_cudnn_lrn_max_size = 16;
inline constexpr double k_cudnn_lrn_min_k = 1e-5;
inline constexpr double k_cudnn_lrn_min_beta = 0.01;

/// Throws invalid_argument naming the first layer the cuda backend cannot run, its values
/// and the limits, and what to do instead.
void check_cuda_runs(const network& net);

}  // namespace memweave::layers
