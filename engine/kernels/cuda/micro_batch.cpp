// BN's micro-batch kernels from shapes and parameters; see micro_batch.hpp (the kernels are
// micro_batch.cu). Thread safety: as the context.
#include "engine/kernels/cuda/micro_batch.hpp"

#include "engine/kernels/cuda/custom_kernels.hpp"

namespace memweave::kernels::cuda {

void bn_add_moments(cuda_kernel_context& ctx, const shape4& in, const float* x, double* sum,
                    double* squares, bool first) {
  detail::launch_bn_moments(ctx.stream(), in.n, in.c, in.h * in.w, x, sum, squares, first);
}

void bn_finish_moments(cuda_kernel_context& ctx, std::int64_t channels, std::int64_t m,
                       const bn_params& p, const double* sum, const double* squares,
                       float* saved_mean, float* saved_invstd, float* running_mean,
                       float* running_var) {
  detail::launch_bn_finish(ctx.stream(), channels, static_cast<double>(m),
                           static_cast<double>(p.epsilon), static_cast<double>(p.momentum), sum,
                           squares, saved_mean, saved_invstd, running_mean, running_var);
}

void bn_normalize(cuda_kernel_context& ctx, const shape4& in, const float* x, const float* gamma,
                  const float* beta, const float* saved_mean, const float* saved_invstd, float* y) {
  detail::launch_bn_normalize(ctx.stream(), in.n, in.c, in.h * in.w, x, gamma, beta, saved_mean,
                              saved_invstd, y);
}

void bn_add_backward_sums(cuda_kernel_context& ctx, const shape4& in, const float* x,
                          const float* saved_mean, const float* saved_invstd, const float* dy,
                          double* sdy, double* sdy_xhat, bool first) {
  detail::launch_bn_backward_sums(ctx.stream(), in.n, in.c, in.h * in.w, x, saved_mean,
                                  saved_invstd, dy, sdy, sdy_xhat, first);
}

void bn_param_grads_from_sums(cuda_kernel_context& ctx, std::int64_t channels, const double* sdy,
                              const double* sdy_xhat, float* dgamma, float* dbeta) {
  detail::launch_bn_grads_from_sums(ctx.stream(), channels, sdy, sdy_xhat, dgamma, dbeta);
}

void bn_backward_data(cuda_kernel_context& ctx, const shape4& in, std::int64_t m, const float* x,
                      const float* saved_mean, const float* saved_invstd, const float* gamma,
                      const double* sdy, const double* sdy_xhat, const float* dy, float* dx,
                      bool accumulate) {
  detail::launch_bn_backward_data(ctx.stream(), in.n, in.c, in.h * in.w, static_cast<double>(m), x,
                                  saved_mean, saved_invstd, gamma, sdy, sdy_xhat, dy, dx,
                                  accumulate);
}

}  // namespace memweave::kernels::cuda
