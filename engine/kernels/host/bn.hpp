// Batch normalization on the host, per channel over (n, h, w).
//
// Training: bn_forward_training computes the batch mean and inverse standard deviation
// (saved for the backward) and y = gamma * x_hat + beta with x_hat = (x - mean) * invstd,
// evaluated in float from the saved (float) statistics. It does NOT touch the running
// statistics: bn_update_running does, once per step, so recomputing a forward (memory
// recomputation) never updates them twice. The statistics come from two exact sums, of x and
// of x^2, taken in one pass (exact_sum.hpp; the variance from them exactly, without
// cancellation), so their bits do not depend on the order of the elements: a batch run whole,
// in micro-batches (TSPLIT) or tile by tile (tiled segments) gets the same statistics, and a
// batch in parts needs one statistics pass over them, not two. The backward's sums are summed in
// double, images then positions in order: bit-reproducible, and continued across
// micro-batches in the same order.
#pragma once

#include <cstdint>

#include "engine/kernels/host/exact_sum.hpp"
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

// The pieces of the two, for a batch run in parts (TSPLIT's micro-batches, tiled segments'
// tiles): the per-channel sums add to the accumulators given (c each, empty or zero before
// the first part), exactly in forward, so two passes (sums over every part, then the
// element-wise step per part) give the same bits as one call, whatever the parts; in
// backward in the same order as the whole batch when the parts are its images in order.

/// sum[c] += x and squares[c] += x^2 over the images and positions of `in` (one part): one
/// pass over x for both of the variance's sums.
void bn_sum_moments(const kernel_context& ctx, const shape4& in, const float* x, exact_sum* sum,
                    exact_square_sum* squares);
/// saved_mean = sum/m and saved_invstd = 1/sqrt(var + epsilon), the biased variance var
/// computed exactly from the two sums (exact_sum::variance), m = images * h * w of the batch.
/// Throws invalid_argument when m exceeds exact_sum::k_max_terms.
void bn_finish_statistics(std::int64_t channels, std::int64_t m, const bn_params& p,
                          const exact_sum* sum, const exact_square_sum* squares, float* saved_mean,
                          float* saved_invstd);
/// One element of bn_normalize (and of bn_act_normalize, with the same bits).
inline float bn_value(float x, float mean, float invstd, float gamma, float beta) noexcept {
  return gamma * ((x - mean) * invstd) + beta;
}
/// y = gamma * ((x - saved_mean) * saved_invstd) + beta, element-wise.
void bn_normalize(const kernel_context& ctx, const shape4& in, const float* x, const float* gamma,
                  const float* beta, const float* saved_mean, const float* saved_invstd, float* y);
/// z = act(bn_normalize(x)), element-wise in one pass: the bits of bn_normalize followed by
/// act_forward, without y. A fused replay rebuilds an ACT's output this way from the saved
/// statistics of the BN before it (executor: rebuild).
void bn_act_normalize(const kernel_context& ctx, const shape4& in, const bn_params& p,
                      const float* x, const float* gamma, const float* beta,
                      const float* saved_mean, const float* saved_invstd, const act_params& act,
                      float* z);
/// sdy[c] += dy, sdy_xhat[c] += dy * x_hat over the images and positions of `in`.
void bn_backward_sums(const kernel_context& ctx, const shape4& in, const float* x,
                      const float* saved_mean, const float* saved_invstd, const float* dy,
                      double* sdy, double* sdy_xhat);
/// dx of `in`'s images from the whole batch's sums; m = images * h * w of the whole batch.
void bn_backward_data(const kernel_context& ctx, const shape4& in, std::int64_t m, const float* x,
                      const float* saved_mean, const float* saved_invstd, const float* gamma,
                      const double* sdy, const double* sdy_xhat, const float* dy, float* dx,
                      bool accumulate);

}  // namespace memweave::kernels::host
