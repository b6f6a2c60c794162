// Batch normalization on the host, per channel over (n, h, w).
//
// Training: bn_forward_training computes the batch mean and inverse standard deviation
// (saved for the backward) and y = gamma * x_hat + beta with x_hat = (x - mean) * invstd,
// evaluated in float from the saved (float) statistics. It does NOT touch the running
// statistics: bn_update_running does, once per step, so recomputing a forward (memory
// recomputation) never updates them twice. Statistics are summed in double, images then
// positions in order: bit-reproducible.
#pragma once

#include "engine/kernels/host/kernel_context.hpp"
#include "memweave/engine/layer_params.hpp"

namespace memweave::kernels::host {

/// y from x; saved_mean[c] and saved_invstd[c] = 1/sqrt(biased batch variance + epsilon)
/// written for every channel. gamma, beta, saved_*: c floats each.
void bn_forward_training(const kernel_context& ctx, const shape4& in, const bn_params& p,
                         const float* x, const float* gamma, const float* beta, float* y,
                         float* saved_mean, float* saved_invstd);

/// running = (1 - momentum) * running + momentum * batch, with the batch variance taken
/// unbiased (m / (m - 1), m = n*h*w; biased when m = 1) and recovered from saved_invstd.
void bn_update_running(const shape4& in, const bn_params& p, const float* saved_mean,
                       const float* saved_invstd, float* running_mean, float* running_var);

/// Inference: y = gamma * (x - running_mean) / sqrt(running_var + epsilon) + beta.
void bn_forward_inference(const kernel_context& ctx, const shape4& in, const bn_params& p,
                          const float* x, const float* gamma, const float* beta,
                          const float* running_mean, const float* running_var, float* y);

/// dx (accumulate: dx[i] += g[i]), dgamma and dbeta (overwritten) from x, the saved
/// statistics, gamma and dy. dx may be null (no input gradient wanted).
void bn_backward(const kernel_context& ctx, const shape4& in, const bn_params& p, const float* x,
                 const float* saved_mean, const float* saved_invstd, const float* gamma,
                 const float* dy, float* dx, float* dgamma, float* dbeta, bool accumulate);

}  // namespace memweave::kernels::host
