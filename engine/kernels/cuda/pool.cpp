// cuDNN pooling. Invariants: the geometry is checked as the host kernels check it before a
// descriptor is made. Average backward does not read x or y, but cuDNN's interface takes
// them: when the caller has none (the engine keeps neither for average pooling), dy and dx,
// which have y's and x's shapes, stand in for them. Thread safety: none of its own.
#include "engine/kernels/cuda/pool.hpp"

#include <string>

#include "engine/kernels/cuda/cudnn_descriptors.hpp"

namespace memweave::kernels::cuda {

using detail::k_one;
using detail::k_zero;
using std::int64_t;

namespace {

struct pool_descs {
  detail::tensor_descriptor x, y;
  detail::pooling_descriptor pool;
  bool max = true;

  pool_descs(const char* kernel, const shape4& in, const pool_params& p) {
    detail::check_shape(kernel, in);
    int64_t kh = p.kernel_h, kw = p.kernel_w, sh = p.stride_h, sw = p.stride_w, ph = p.pad_h,
            pw = p.pad_w;
    if (p.global) kh = in.h, kw = in.w, sh = 1, sw = 1, ph = 0, pw = 0;
    max = p.mode == pool_mode::max;
    const std::string where = std::string(kernel) + ": input " + detail::shape_text(in) +
                              ", kernel " + std::to_string(kh) + "x" + std::to_string(kw) +
                              ", stride " + std::to_string(sh) + "x" + std::to_string(sw) +
                              ", pad " + std::to_string(ph) + "x" + std::to_string(pw);
    MEMWEAVE_EXPECTS(kh >= 1 && kw >= 1 && sh >= 1 && sw >= 1,
                     where + ": expected kernel and stride >= 1");
    MEMWEAVE_EXPECTS(ph >= 0 && pw >= 0 && ph < kh && pw < kw,
                     where + ": expected 0 <= pad < kernel (a window must hold an input element)");
    MEMWEAVE_EXPECTS(in.h + 2 * ph >= kh && in.w + 2 * pw >= kw,
                     where +
                         ": the kernel is larger than the padded input; expected a smaller "
                         "kernel or more padding");
    const shape4 out{in.n, in.c, (in.h + 2 * ph - kh) / sh + 1, (in.w + 2 * pw - kw) / sw + 1};
    x.set(in);
    y.set(out);
    MEMWEAVE_CUDNN_CHECK(cudnnSetPooling2dDescriptor(
        pool.get(), max ? CUDNN_POOLING_MAX : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
        CUDNN_NOT_PROPAGATE_NAN, detail::to_int(kernel, "kernel_h", kh),
        detail::to_int(kernel, "kernel_w", kw), detail::to_int(kernel, "pad_h", ph),
        detail::to_int(kernel, "pad_w", pw), detail::to_int(kernel, "stride_h", sh),
        detail::to_int(kernel, "stride_w", sw)));
  }
};

}  // namespace

void pool_forward(cuda_kernel_context& ctx, const shape4& in, const pool_params& p, const float* x,
                  float* y) {
  const char* kernel = "pool_forward";
  const pool_descs d(kernel, in, p);
  detail::check_pointer(kernel, "x", x);
  detail::check_pointer(kernel, "y", y);
  MEMWEAVE_CUDNN_CHECK(
      cudnnPoolingForward(ctx.cudnn(), d.pool.get(), &k_one, d.x.get(), x, &k_zero, d.y.get(), y));
}

void pool_backward(cuda_kernel_context& ctx, const shape4& in, const pool_params& p, const float* x,
                   const float* y, const float* dy, float* dx, bool accumulate) {
  const char* kernel = "pool_backward";
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
