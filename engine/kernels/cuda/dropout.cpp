// Dropout: checks, then the custom kernels. The keep scale 1/(1 - ratio) is computed here
// on the host in float, exactly as the host kernel computes it, and handed to the device.
// Thread safety: none of its own.
#include "engine/kernels/cuda/dropout.hpp"

#include <string>

#include "engine/kernels/cuda/cudnn_descriptors.hpp"
#include "engine/kernels/cuda/custom_kernels.hpp"

namespace memweave::kernels::cuda {

void dropout_forward(cuda_kernel_context& ctx, const shape4& s, const dropout_params& p,
                     std::uint64_t seed, const float* x, float* y, float* mask) {
  const char* kernel = "dropout_forward";
  detail::check_shape(kernel, s);
  detail::check_pointer(kernel, "x", x);
  detail::check_pointer(kernel, "y", y);
  detail::check_pointer(kernel, "mask", mask);
  MEMWEAVE_EXPECTS(p.ratio >= 0.0f && p.ratio < 1.0f,
                   std::string(kernel) + ": ratio = " + std::to_string(p.ratio) +
                       "; expected a drop probability in [0, 1)");
  const float keep = 1.0f / (1.0f - p.ratio);
  detail::launch_dropout_forward(ctx.stream(), s.count(), seed, p.ratio, keep, x, y, mask);
}

void dropout_backward(cuda_kernel_context& ctx, const shape4& s, const float* mask, const float* dy,
                      float* dx, bool accumulate) {
  const char* kernel = "dropout_backward";
  detail::check_shape(kernel, s);
  detail::check_pointer(kernel, "mask", mask);
  detail::check_pointer(kernel, "dy", dy);
  detail::check_pointer(kernel, "dx", dx);
  detail::launch_mask_backward(ctx.stream(), s.count(), mask, dy, dx, accumulate);
}

}  // namespace memweave::kernels::cuda
