// The cuda kernels of the layers whose math couples the batch, run micro-batch by
// micro-batch (TSPLIT, engine/layers/split_step.hpp): BN's statistics and its backward's
// sums are added up over the micro-batches first, in double on the device, then each
// micro-batch is normalized (or its dx computed) from them; the softmax loss adds each
// micro-batch's share of the whole batch's mean, and its gradient divides by the whole
// batch. The same formulas as the host kernels (engine/kernels/host/bn.hpp), to float
// rounding: the variance is E[x^2] - mean^2 in double here, where the host sums exactly.
//
// Sums: one block per channel adds a micro-batch's values in a fixed order (a thread's
// elements in index order, then a shared-memory tree) and adds that to the running sum,
// so a split step's results do not depend on the run: deterministic, but not the bits of
// the whole step (cuDNN's), which sums in another order. The running sum follows the order
// the micro-batches run in: a BN forward handed its last slice by the step before runs last
// micro-batch first, and a replay of it (in order) may differ from it in the sums' last bits
// of double, rarely in a float; the host's sums are exact, so there it never does.
#pragma once

#include <cstdint>

#include "engine/kernels/cuda/cuda_kernel_context.hpp"
#include "memweave/engine/layer_params.hpp"

namespace memweave::kernels::cuda {

/// sum[c] and squares[c] (device doubles, c of each) set to (`first`) or added the sums of
/// x and x^2 over the micro-batch `in` (n images of it).
void bn_add_moments(cuda_kernel_context& ctx, const shape4& in, const float* x, double* sum,
                    double* squares, bool first);

/// From the sums over `m` values per channel: saved_mean = sum / m and saved_invstd =
/// 1 / sqrt(biased variance + epsilon); the running statistics updated as the host's
/// bn_update_running (the variance unbiased, m / (m - 1)) when given (both or neither).
void bn_finish_moments(cuda_kernel_context& ctx, std::int64_t channels, std::int64_t m,
                       const bn_params& p, const double* sum, const double* squares,
                       float* saved_mean, float* saved_invstd, float* running_mean,
                       float* running_var);

/// y = gamma * ((x - mean) * invstd) + beta over the micro-batch `in`, the host's
/// bn_value rounded operation by operation.
void bn_normalize(cuda_kernel_context& ctx, const shape4& in, const float* x, const float* gamma,
                  const float* beta, const float* saved_mean, const float* saved_invstd, float* y);

/// sdy[c] and sdy_xhat[c] set to (`first`) or added the sums of dy and dy * x_hat over the
/// micro-batch `in` (x_hat = (x - mean) * invstd).
void bn_add_backward_sums(cuda_kernel_context& ctx, const shape4& in, const float* x,
                          const float* saved_mean, const float* saved_invstd, const float* dy,
                          double* sdy, double* sdy_xhat, bool first);

/// dbeta = sdy, dgamma = sdy_xhat, rounded to float.
void bn_param_grads_from_sums(cuda_kernel_context& ctx, std::int64_t channels, const double* sdy,
                              const double* sdy_xhat, float* dgamma, float* dbeta);

/// dx = gamma * invstd / m * (m * dy - sdy - x_hat * sdy_xhat) over the micro-batch `in`,
/// `m` the whole batch's values per channel (accumulate: dx += it), as the host's
/// bn_backward_data.
void bn_backward_data(cuda_kernel_context& ctx, const shape4& in, std::int64_t m, const float* x,
                      const float* saved_mean, const float* saved_invstd, const float* gamma,
                      const double* sdy, const double* sdy_xhat, const float* dy, float* dx,
                      bool accumulate);

/// y = softmax(x) over the micro-batch `in`, and its images' losses over `batch` (the whole
/// batch's images) set into (`first`) or added to ctx.loss_scratch(); a bad label flags
/// ctx.label_error_scratch() (reset by `first`). Waits for nothing: read_loss does.
void softmax_loss_forward_part(cuda_kernel_context& ctx, const shape4& in, const float* x,
                               const float* labels, float* y, std::int64_t batch, bool first);

/// Waits for the stream and copies the loss out of ctx.loss_scratch() into *loss; throws
/// invalid_argument (naming `batch` and `classes`) when a label was out of range.
void read_loss(cuda_kernel_context& ctx, std::int64_t batch, std::int64_t classes, double* loss);

}  // namespace memweave::kernels::cuda
