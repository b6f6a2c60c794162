// CONCAT and ADD: device-to-device copies and the custom element-wise kernels, all on the
// context's stream in call order. Invariants: offsets and pitches are in floats, checked
// shapes only. Thread safety: none of its own.
#include "engine/kernels/cuda/concat_add.hpp"

#include <vector>

#include "engine/kernels/cuda/cudnn_descriptors.hpp"
#include "engine/kernels/cuda/custom_kernels.hpp"
#include "engine/kernels/kernel_checks.hpp"

namespace memweave::kernels::cuda {

using std::int64_t;

void concat_forward(cuda_kernel_context& ctx, std::span<const shape4> in,
                    std::span<const float* const> x, float* y) {
  const char* kernel = "concat_forward";
  const std::vector<int64_t> off =
      checks::check_concat_forward(kernel, in, x, y, detail::check_shape);
  const int64_t hw = in[0].h * in[0].w, total = off.back();
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::size_t row = static_cast<std::size_t>(in[i].c * hw) * sizeof(float);
    MEMWEAVE_CUDA_CHECK(cudaMemcpy2DAsync(
        y + off[i] * hw, static_cast<std::size_t>(total * hw) * sizeof(float), x[i], row, row,
        static_cast<std::size_t>(in[i].n), cudaMemcpyDeviceToDevice, ctx.stream()));
  }
}

void concat_backward(cuda_kernel_context& ctx, std::span<const shape4> in, const float* dy,
                     std::span<const grad_out> dx) {
  const char* kernel = "concat_backward";
  const std::vector<int64_t> off =
      checks::check_concat_backward(kernel, in, dx.size(), dy, detail::check_shape);
  const int64_t hw = in[0].h * in[0].w, total = off.back();
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (dx[i].data == nullptr) continue;
    const int64_t row = in[i].c * hw;
    if (dx[i].accumulate) {
      detail::launch_accumulate(ctx.stream(), in[i].n, row, dy + off[i] * hw, total * hw,
                                dx[i].data, row);
    } else {
      const std::size_t row_bytes = static_cast<std::size_t>(row) * sizeof(float);
      MEMWEAVE_CUDA_CHECK(cudaMemcpy2DAsync(dx[i].data, row_bytes, dy + off[i] * hw,
                                            static_cast<std::size_t>(total * hw) * sizeof(float),
                                            row_bytes, static_cast<std::size_t>(in[i].n),
                                            cudaMemcpyDeviceToDevice, ctx.stream()));
    }
  }
}

void add_forward(cuda_kernel_context& ctx, const shape4& s, std::span<const float* const> x,
                 float* y) {
  const char* kernel = "add_forward";
  checks::check_add_forward(kernel, s, x, y, detail::check_shape);
  if (x.size() == 1) {
    if (x[0] != y) {
      MEMWEAVE_CUDA_CHECK(
          cudaMemcpyAsync(y, x[0], s.bytes(), cudaMemcpyDeviceToDevice, ctx.stream()));
    }
    return;
  }
  // ((x0 + x1) + x2) + ...: each pass reads y's previous partial sum element by element.
  detail::launch_add(ctx.stream(), s.count(), x[0], x[1], y);
  for (std::size_t i = 2; i < x.size(); ++i)
    detail::launch_add(ctx.stream(), s.count(), y, x[i], y);
}

void add_backward(cuda_kernel_context& ctx, const shape4& s, const float* dy,
                  std::span<const grad_out> dx) {
  const char* kernel = "add_backward";
  detail::check_tensors(kernel, s, {{"dy", dy}});
  for (const grad_out& g : dx) {
    if (g.data == nullptr) continue;
    if (g.accumulate) {
      detail::launch_accumulate(ctx.stream(), 1, s.count(), dy, s.count(), g.data, s.count());
    } else if (g.data != dy) {
      MEMWEAVE_CUDA_CHECK(
          cudaMemcpyAsync(g.data, dy, s.bytes(), cudaMemcpyDeviceToDevice, ctx.stream()));
    }
  }
}

}  // namespace memweave::kernels::cuda
