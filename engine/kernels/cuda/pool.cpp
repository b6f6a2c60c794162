// cuDNN pooling; adaptive average pooling, which cuDNN lacks, by the custom kernels
// (custom_kernels.cu). Invariants: the geometry is checked as the host kernels check it before a
// descriptor is made. Average backward does not read x or y, but cuDNN's interface takes
// them: when the caller has none (the engine keeps neither for average pooling), dy and dx,
// which have y's and x's shapes, stand in for them. Thread safety: none of its own.
#include "engine/kernels/cuda/pool.hpp"

#include "engine/kernels/cuda/cudnn_descriptors.hpp"
#include "engine/kernels/cuda/custom_kernels.hpp"
#include "engine/kernels/kernel_checks.hpp"

namespace memweave::kernels::cuda {

using detail::k_one;
using detail::k_zero;

namespace {

struct pool_descs {
  detail::tensor_descriptor x, y;
  detail::pooling_descriptor pool;
  bool max = true;

  pool_descs(const char* kernel, const shape4& in, const pool_params& p) {
    const checks::pool_window g = checks::pool_geometry(kernel, in, p, detail::check_shape);
    max = p.mode == pool_mode::max;
    const shape4 out{in.n, in.c, g.oh, g.ow};
    x.set(in);
    y.set(out);
    MEMWEAVE_CUDNN_CHECK(cudnnSetPooling2dDescriptor(
        pool.get(), max ? CUDNN_POOLING_MAX : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
        CUDNN_NOT_PROPAGATE_NAN, detail::to_int(kernel, "kernel_h", g.kh),
        detail::to_int(kernel, "kernel_w", g.kw), detail::to_int(kernel, "pad_h", g.ph),
        detail::to_int(kernel, "pad_w", g.pw), detail::to_int(kernel, "stride_h", g.sh),
        detail::to_int(kernel, "stride_w", g.sw)));
  }
};

}  // namespace

void pool_forward(cuda_kernel_context& ctx, const shape4& in, const pool_params& p, const float* x,
                  float* y) {
  const char* kernel = "pool_forward";
  if (p.adaptive()) {
    const checks::pool_window g = checks::pool_geometry(kernel, in, p, detail::check_shape);
    detail::check_pointer(kernel, "x", x);
    detail::check_pointer(kernel, "y", y);
    detail::launch_adaptive_avg_pool_forward(ctx.stream(), in.n * in.c, in.h, in.w, g.oh, g.ow, x,
                                             y);
    return;
  }
  const pool_descs d(kernel, in, p);
  detail::check_pointer(kernel, "x", x);
  detail::check_pointer(kernel, "y", y);
  MEMWEAVE_CUDNN_CHECK(
      cudnnPoolingForward(ctx.cudnn(), d.pool.get(), &k_one, d.x.get(), x, &k_zero, d.y.get(), y));
}

void pool_backward(cuda_kernel_context& ctx, const shape4& in, const pool_params& p, const float* x,
                   const float* y, const float* dy, float* dx, bool accumulate) {
  const char* kernel = "pool_backward";
  if (p.adaptive()) {
    const checks::pool_window g = checks::pool_geometry(kernel, in, p, detail::check_shape);
    detail::check_pointer(kernel, "dy", dy);
    detail::check_pointer(kernel, "dx", dx);
    detail::launch_adaptive_avg_pool_backward(ctx.stream(), in.n * in.c, in.h, in.w, g.oh, g.ow, dy,
                                              dx, accumulate);
    return;
  }
  const pool_descs d(kernel, in, p);
  detail::check_pointer(kernel, "dy", dy);
  detail::check_pointer(kernel, "dx", dx);
  if (d.max) {
    detail::check_pointer(kernel, "x", x);
    detail::check_pointer(kernel, "y", y);
  } else {
    if (y == nullptr) y = dy;
    if (x == nullptr) x = dx;
  }
  MEMWEAVE_CUDNN_CHECK(cudnnPoolingBackward(ctx.cudnn(), d.pool.get(), &k_one, d.y.get(), y,
                                            d.y.get(), dy, d.x.get(), x,
                                            detail::beta_for(accumulate), d.x.get(), dx));
}

}  // namespace memweave::kernels::cuda
