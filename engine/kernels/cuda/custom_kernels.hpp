// Private: launchers of the few kernels cuDNN and cuBLAS lack (custom_kernels.cu), and of the
// fp16 conversions of compressed swaps (engine/runtime/cuda_fp16_codec.cpp). Each
// enqueues on `stream`, returns at once, and throws device_error when the launch fails.
// Callers have checked shapes and pointers. Element-wise kernels round every operation
// separately (no contraction into FMA: __fmul_rn/__fadd_rn), in the host kernels' order,
// so they give the host kernels' bits for the same inputs. Reductions run in one fixed
// order (one block, or one block per channel): deterministic.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace memweave::kernels::cuda::detail {

/// The dropout mask and output: for i < count, u = the host's dropout_uniform(seed,
/// first + i), mask[i] = u >= ratio ? keep : 0, y[i] = x[i] * mask[i].
void launch_dropout_forward(cudaStream_t stream, std::int64_t count, std::uint64_t seed,
                            float ratio, float keep, const float* x, float* y, float* mask,
                            std::int64_t first);

/// dx[i] = dy[i] * mask[i] (accumulate: dx[i] + dy[i] * mask[i]).
void launch_mask_backward(cudaStream_t stream, std::int64_t count, const float* mask,
                          const float* dy, float* dx, bool accumulate);

/// The gradient of ACT mode `mode` (act_mode's value: 0 ReLU, 1 tanh, 2 sigmoid) from the
/// output: g = y > 0 ? dy : 0, dy * (1 - y*y), dy * (y * (1 - y)); dx = g (accumulate:
/// dx + g). dx may alias dy.
void launch_act_backward(cudaStream_t stream, std::int64_t count, int mode, const float* y,
                         const float* dy, float* dx, bool accumulate);

/// y[i] = a[i] + b[i] (y may alias a or b).
void launch_add(cudaStream_t stream, std::int64_t count, const float* a, const float* b, float* y);

/// dst[r * dst_pitch + i] += src[r * src_pitch + i] for r < rows, i < row_length (pitches
/// and lengths in floats; a packed tensor is one row).
void launch_accumulate(cudaStream_t stream, std::int64_t rows, std::int64_t row_length,
                       const float* src, std::int64_t src_pitch, float* dst,
                       std::int64_t dst_pitch);

/// dst[j] = the sum over r < rows of src[r * src_pitch + j], for j < cols, in row order
/// (accumulate: added to dst[j]): the bias gradient of an FC's output-channel group, whose
/// rows of dy are `cols` of every image's `src_pitch` features.
void launch_column_sums(cudaStream_t stream, std::int64_t rows, std::int64_t cols, const float* src,
                        std::int64_t src_pitch, float* dst, bool accumulate);

/// The sum over n images of lse(x_i) - x_i[label_i] (classes values per image, sums in
/// double) divided by `divisor` (0: n, the mean), written to *loss by one block in a fixed
/// order (accumulate: added to it, a split step's micro-batches after the first).
/// *label_error = 1 when a label is not a whole number in [0, classes) (that image then
/// counts 0), else 0 (accumulate: or'd into it).
void launch_softmax_loss(cudaStream_t stream, std::int64_t n, std::int64_t classes, const float* x,
                         const float* labels, double* loss, int* label_error,
                         std::int64_t divisor = 0, bool accumulate = false);

/// dx = (y - onehot(label)) / divisor (0: n; a split step's micro-batch divides by the whole
/// batch) (accumulate: dx + that). A label out of range sets *label_error = 1 and subtracts
/// nothing.
void launch_softmax_loss_grad(cudaStream_t stream, std::int64_t n, std::int64_t classes,
                              const float* y, const float* labels, float* dx, bool accumulate,
                              int* label_error, std::int64_t divisor = 0);

// ---- BN micro-batch by micro-batch (micro_batch.cu; micro_batch.hpp's contracts). Sums:
// one block per channel over (n, hw), in double, set (`first`) or added to the running sum.

/// sum[ch] and squares[ch]: the sums of x and x^2 over the micro-batch.
void launch_bn_moments(cudaStream_t stream, std::int64_t n, std::int64_t c, std::int64_t hw,
                       const float* x, double* sum, double* squares, bool first);
/// mean = sum / m, invstd = 1 / sqrt(max(squares / m - mean^2, 0) + epsilon); the running
/// statistics (when non-null) as the host's bn_update_running.
void launch_bn_finish(cudaStream_t stream, std::int64_t channels, double m, double epsilon,
                      double momentum, const double* sum, const double* squares, float* mean,
                      float* invstd, float* running_mean, float* running_var);
/// y = gamma * ((x - mean) * invstd) + beta.
void launch_bn_normalize(cudaStream_t stream, std::int64_t n, std::int64_t c, std::int64_t hw,
                         const float* x, const float* gamma, const float* beta, const float* mean,
                         const float* invstd, float* y);
/// sdy[ch] and sdy_xhat[ch]: the sums of dy and dy * (x - mean) * invstd.
void launch_bn_backward_sums(cudaStream_t stream, std::int64_t n, std::int64_t c, std::int64_t hw,
                             const float* x, const float* mean, const float* invstd,
                             const float* dy, double* sdy, double* sdy_xhat, bool first);
/// dbeta = sdy, dgamma = sdy_xhat, rounded to float.
void launch_bn_grads_from_sums(cudaStream_t stream, std::int64_t channels, const double* sdy,
                               const double* sdy_xhat, float* dgamma, float* dbeta);
/// dx = gamma * invstd / m * (m * dy - sdy - x_hat * sdy_xhat) (accumulate: dx + that).
void launch_bn_backward_data(cudaStream_t stream, std::int64_t n, std::int64_t c, std::int64_t hw,
                             double m, const float* x, const float* mean, const float* invstd,
                             const float* gamma, const double* sdy, const double* sdy_xhat,
                             const float* dy, float* dx, bool accumulate);

/// v = momentum * v + lr * (g + weight_decay * w); w = w - v (the host solver's order).
void launch_sgd(cudaStream_t stream, std::int64_t count, float learning_rate, float momentum,
                float weight_decay, const float* g, float* w, float* v);

/// Adaptive average pooling of `planes` planes of h x w to oh x ow (pool_params::adaptive):
/// each output the sum of its window in row-major order divided by the window's size.
void launch_adaptive_avg_pool_forward(cudaStream_t stream, std::int64_t planes, std::int64_t h,
                                      std::int64_t w, std::int64_t oh, std::int64_t ow,
                                      const float* x, float* y);

/// Its gradient: dx = the sum of dy / size over the windows holding each element, in output
/// scan order (accumulate: dx + that); the host's bits.
void launch_adaptive_avg_pool_backward(cudaStream_t stream, std::int64_t planes, std::int64_t h,
                                       std::int64_t w, std::int64_t oh, std::int64_t ow,
                                       const float* dy, float* dx, bool accumulate);

/// dst[i] = the fp16 bits of src[i] for i < count, as fp16.hpp's fp16_from_float gives them
/// (round to nearest even, +-inf from 65520 on, NaN payloads kept), and *max_error_bits =
/// the bits of max(*max_error_bits as a float, the largest relative round-trip error of the
/// values as fp16_encode measures it) (an overflow: +inf; NaN and infinities not counted).
/// src and dst must not overlap.
void launch_fp16_encode(cudaStream_t stream, std::int64_t count, const float* src,
                        std::uint16_t* dst, unsigned* max_error_bits);

/// dst[i] = fp32(src[i]) for i < count (fp16.hpp's float_from_fp16); no overlap.
void launch_fp16_decode(cudaStream_t stream, std::int64_t count, const std::uint16_t* src,
                        float* dst);

}  // namespace memweave::kernels::cuda::detail
