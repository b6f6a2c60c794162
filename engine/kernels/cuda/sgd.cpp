// SGD update: checks, then the custom kernel. Thread safety: none of its own.
#include "engine/kernels/cuda/sgd.hpp"

#include <cstdint>

#include "engine/kernels/cuda/cudnn_descriptors.hpp"
#include "engine/kernels/cuda/custom_kernels.hpp"

namespace memweave::kernels::cuda {

void sgd_update(cuda_kernel_context& ctx, float learning_rate, float momentum, float weight_decay,
                std::size_t count, const float* g, float* w, float* v) {
  if (count == 0) return;
  const char* kernel = "sgd_update";
  detail::check_pointer(kernel, "g", g);
  detail::check_pointer(kernel, "w", w);
  detail::check_pointer(kernel, "v", v);
  detail::launch_sgd(ctx.stream(), static_cast<std::int64_t>(count), learning_rate, momentum,
                     weight_decay, g, w, v);
}

}  // namespace memweave::kernels::cuda
