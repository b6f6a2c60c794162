// Activations: cuDNN forward, custom backward (see act.hpp for why). Thread safety: none of
// its own.
#include "engine/kernels/cuda/act.hpp"

#include "engine/kernels/cuda/cudnn_descriptors.hpp"
#include "engine/kernels/cuda/custom_kernels.hpp"

namespace memweave::kernels::cuda {

using detail::k_one;
using detail::k_zero;

namespace {

void set_mode(const detail::activation_descriptor& d, const act_params& p) {
  const cudnnActivationMode_t mode = p.mode == act_mode::relu   ? CUDNN_ACTIVATION_RELU
                                     : p.mode == act_mode::tanh ? CUDNN_ACTIVATION_TANH
                                                                : CUDNN_ACTIVATION_SIGMOID;
  MEMWEAVE_CUDNN_CHECK(cudnnSetActivationDescriptor(d.get(), mode, CUDNN_NOT_PROPAGATE_NAN, 0.0));
}

}  // namespace

void act_forward(cuda_kernel_context& ctx, const shape4& s, const act_params& p, const float* x,
                 float* y) {
  const char* kernel = "act_forward";
  detail::check_tensors(kernel, s, {{"x", x}, {"y", y}});
  const detail::tensor_descriptor t(s);
  const detail::activation_descriptor a;
  set_mode(a, p);
  MEMWEAVE_CUDNN_CHECK(
      cudnnActivationForward(ctx.cudnn(), a.get(), &k_one, t.get(), x, &k_zero, t.get(), y));
}

void act_backward(cuda_kernel_context& ctx, const shape4& s, const act_params& p, const float* y,
                  const float* dy, float* dx, bool accumulate) {
  const char* kernel = "act_backward";
  detail::check_tensors(kernel, s, {{"y", y}, {"dy", dy}, {"dx", dx}});
  detail::launch_act_backward(ctx.stream(), s.count(), static_cast<int>(p.mode), y, dy, dx,
                              accumulate);
}

}  // namespace memweave::kernels::cuda
