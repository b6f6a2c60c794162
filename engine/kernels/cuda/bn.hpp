// Batch normalization on the GPU through cuDNN (CUDNN_BATCHNORM_SPATIAL: per channel over
// (n, h, w)), with the host kernels' semantics (engine/kernels/host/bn.hpp).
//
// Training: bn_forward_training computes the batch mean and inverse standard deviation
// 1/sqrt(biased variance + epsilon) into saved_mean / saved_invstd (cuDNN's "saved"
// results, which are exactly those) and y = gamma * x_hat + beta. The running statistics
// are updated by the same cuDNN call, and only when the caller passes them: running =
// (1 - momentum) * running + momentum * batch, the batch variance unbiased (m / (m - 1)),
// as the host's bn_update_running; with null running pointers cuDNN leaves them alone (a
// recomputed forward must not update them twice). The host updates them in a separate
// call; here one call does both, to the same formula within float rounding.
#pragma once

#include "engine/kernels/cuda/cuda_kernel_context.hpp"
#include "memweave/engine/layer_params.hpp"

namespace memweave::kernels::cuda {

/// y from x; saved_mean[c], saved_invstd[c] written for every channel; running_mean and
/// running_var (both or neither; c floats each) updated with factor p.momentum when
/// non-null. gamma, beta, saved_*: c floats each. Throws invalid_argument for a bad
/// epsilon, a null tensor, or only one running pointer.
void bn_forward_training(cuda_kernel_context& ctx, const shape4& in, const bn_params& p,
                         const float* x, const float* gamma, const float* beta, float* y,
                         float* saved_mean, float* saved_invstd, float* running_mean = nullptr,
                         float* running_var = nullptr);

/// Inference: y = gamma * (x - running_mean) / sqrt(running_var + epsilon) + beta.
void bn_forward_inference(cuda_kernel_context& ctx, const shape4& in, const bn_params& p,
                          const float* x, const float* gamma, const float* beta,
                          const float* running_mean, const float* running_var, float* y);

/// dx (accumulate: dx += it, cuDNN's beta = 1), dgamma and dbeta (overwritten) from x, the
/// saved statistics, gamma and dy. dx may be null (no input gradient wanted): the custom
/// per-channel sums of micro_batch.hpp then compute dgamma and dbeta alone (in the context's
/// sums_scratch).
void bn_backward(cuda_kernel_context& ctx, const shape4& in, const bn_params& p, const float* x,
                 const float* saved_mean, const float* saved_invstd, const float* gamma,
                 const float* dy, float* dx, float* dgamma, float* dbeta, bool accumulate);

}  // namespace memweave::kernels::cuda
