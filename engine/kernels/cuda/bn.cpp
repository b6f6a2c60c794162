// cuDNN batch normalization (spatial). Invariants: the parameter descriptor is (1, c, 1, 1)
// (what cudnnDeriveBNTensorDescriptor gives for SPATIAL); epsilon is the layer's, the same
// in forward and backward. Thread safety: none of its own.
#include "engine/kernels/cuda/bn.hpp"

#include <string>

#include "engine/kernels/cuda/cudnn_descriptors.hpp"
#include "engine/kernels/cuda/micro_batch.hpp"
#include "engine/kernels/kernel_checks.hpp"

namespace memweave::kernels::cuda {

using detail::k_one;
using detail::k_zero;

void bn_forward_training(cuda_kernel_context& ctx, const shape4& in, const bn_params& p,
                         const float* x, const float* gamma, const float* beta, float* y,
                         float* saved_mean, float* saved_invstd, float* running_mean,
                         float* running_var) {
  const char* kernel = "bn_forward_training";
  checks::check_bn_forward_training(kernel, in, p, x, gamma, beta, y, saved_mean, saved_invstd,
                                    detail::check_shape);
  MEMWEAVE_EXPECTS((running_mean == nullptr) == (running_var == nullptr),
                   std::string(kernel) +
                       ": one running statistic given without the other; pass both "
                       "running_mean and running_var, or neither");
  const detail::tensor_descriptor t(in);
  const detail::tensor_descriptor c(shape4{1, in.c, 1, 1});
  MEMWEAVE_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      ctx.cudnn(), CUDNN_BATCHNORM_SPATIAL, &k_one, &k_zero, t.get(), x, t.get(), y, c.get(), gamma,
      beta, static_cast<double>(p.momentum), running_mean, running_var,
      static_cast<double>(p.epsilon), saved_mean, saved_invstd));
}

void bn_forward_inference(cuda_kernel_context& ctx, const shape4& in, const bn_params& p,
                          const float* x, const float* gamma, const float* beta,
                          const float* running_mean, const float* running_var, float* y) {
  const char* kernel = "bn_forward_inference";
  checks::check_bn_forward_inference(kernel, in, p, x, gamma, beta, running_mean, running_var, y,
                                     detail::check_shape);
  const detail::tensor_descriptor t(in);
  const detail::tensor_descriptor c(shape4{1, in.c, 1, 1});
  MEMWEAVE_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
      ctx.cudnn(), CUDNN_BATCHNORM_SPATIAL, &k_one, &k_zero, t.get(), x, t.get(), y, c.get(), gamma,
      beta, running_mean, running_var, static_cast<double>(p.epsilon)));
}

void bn_backward(cuda_kernel_context& ctx, const shape4& in, const bn_params& p, const float* x,
                 const float* saved_mean, const float* saved_invstd, const float* gamma,
                 const float* dy, float* dx, float* dgamma, float* dbeta, bool accumulate) {
  const char* kernel = "bn_backward";
  checks::check_bn_backward(kernel, in, p, x, saved_mean, saved_invstd, gamma, dy, dgamma, dbeta,
                            detail::check_shape);
  if (dx == nullptr) {
    // cuDNN always writes dx; without one, only the parameter gradients are computed: the
    // sums of a split step's backward over one micro-batch, the whole batch.
    double* sums = ctx.sums_scratch(2 * static_cast<std::size_t>(in.c));
    bn_add_backward_sums(ctx, in, x, saved_mean, saved_invstd, dy, sums, sums + in.c, true);
    bn_param_grads_from_sums(ctx, in.c, sums, sums + in.c, dgamma, dbeta);
    return;
  }
  const detail::tensor_descriptor t(in);
  const detail::tensor_descriptor c(shape4{1, in.c, 1, 1});
  MEMWEAVE_CUDNN_CHECK(cudnnBatchNormalizationBackward(
      ctx.cudnn(), CUDNN_BATCHNORM_SPATIAL, &k_one, detail::beta_for(accumulate), &k_one, &k_zero,
      t.get(), x, t.get(), dy, t.get(), dx, c.get(), gamma, dgamma, dbeta,
      static_cast<double>(p.epsilon), saved_mean, saved_invstd));
}

}  // namespace memweave::kernels::cuda
