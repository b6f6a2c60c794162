// CONCAT and ADD: device-to-device copies and the custom element-wise kernels, all on the
// context's stream in call order. Invariants: offsets and pitches are in floats, checked
// shapes only. Thread safety: none of its own.
#include "engine/kernels/cuda/concat_add.hpp"

#include <string>
#include <vector>

#include "engine/kernels/cuda/cudnn_descriptors.hpp"
#include "engine/kernels/cuda/custom_kernels.hpp"

namespace memweave::kernels::cuda {

using std::int64_t;

namespace {

// Channel offsets of the inputs (and the total at the end), after checking the shapes.
std::vector<int64_t> channel_offsets(const char* kernel, std::span<const shape4> in) {
  MEMWEAVE_EXPECTS(!in.empty(), std::string(kernel) + ": no inputs; expected at least one");
  std::vector<int64_t> off(in.size() + 1, 0);
  for (std::size_t i = 0; i < in.size(); ++i) {
    detail::check_shape(kernel, in[i]);
    MEMWEAVE_EXPECTS(in[i].n == in[0].n && in[i].h == in[0].h && in[i].w == in[0].w,
                     std::string(kernel) + ": input " + std::to_string(i) + " is " +
                         detail::shape_text(in[i]) + " but input 0 is " +
                         detail::shape_text(in[0]) + "; expected the same n, h and w");
    off[i + 1] = off[i] + in[i].c;
  }
  detail::check_shape(kernel, shape4{in[0].n, off.back(), in[0].h, in[0].w});
  return off;
}

}  // namespace

void concat_forward(cuda_kernel_context& ctx, std::span<const shape4> in,
                    std::span<const float* const> x, float* y) {
  const char* kernel = "concat_forward";
  const std::vector<int64_t> off = channel_offsets(kernel, in);
  MEMWEAVE_EXPECTS(x.size() == in.size(), std::string(kernel) + ": " + std::to_string(x.size()) +
                                              " tensors for " + std::to_string(in.size()) +
                                              " shapes; expected one tensor per shape");
  for (const float* p : x) detail::check_pointer(kernel, "an input", p);
  detail::check_pointer(kernel, "y", y);
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
  const std::vector<int64_t> off = channel_offsets(kernel, in);
  MEMWEAVE_EXPECTS(dx.size() == in.size(), std::string(kernel) + ": " + std::to_string(dx.size()) +
                                               " gradients for " + std::to_string(in.size()) +
                                               " shapes; expected one (maybe null) per shape");
  detail::check_pointer(kernel, "dy", dy);
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
  detail::check_shape(kernel, s);
  MEMWEAVE_EXPECTS(!x.empty(), std::string(kernel) + ": no inputs; expected at least one");
  for (const float* p : x) detail::check_pointer(kernel, "an input", p);
  detail::check_pointer(kernel, "y", y);
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
  detail::check_shape(kernel, s);
  detail::check_pointer(kernel, "dy", dy);
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
