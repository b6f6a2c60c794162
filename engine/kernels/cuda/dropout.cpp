// Dropout: checks, then the custom kernels. The keep scale 1/(1 - ratio) is computed here
// on the host in float, exactly as the host kernel computes it, and handed to the device.
// Thread safety: none of its own.
#include "engine/kernels/cuda/dropout.hpp"

#include "engine/kernels/cuda/cudnn_descriptors.hpp"
#include "engine/kernels/cuda/custom_kernels.hpp"
#include "engine/kernels/kernel_checks.hpp"

namespace memweave::kernels::cuda {

void dropout_forward(cuda_kernel_context& ctx, const shape4& s, const dropout_params& p,
                     std::uint64_t seed, const float* x, float* y, float* mask,
                     std::int64_t first) {
  const char* kernel = "dropout_forward";
  detail::check_tensors(kernel, s, {{"x", x}, {"y", y}, {"mask", mask}});
  checks::check_dropout(kernel, p);
  const float keep = 1.0f / (1.0f - p.ratio);
  detail::launch_dropout_forward(ctx.stream(), s.count(), seed, p.ratio, keep, x, y, mask, first);
}

void dropout_backward(cuda_kernel_context& ctx, const shape4& s, const float* mask, const float* dy,
                      float* dx, bool accumulate) {
  const char* kernel = "dropout_backward";
  detail::check_tensors(kernel, s, {{"mask", mask}, {"dy", dy}, {"dx", dx}});
  detail::launch_mask_backward(ctx.stream(), s.count(), mask, dy, dx, accumulate);
}

}  // namespace memweave::kernels::cuda
