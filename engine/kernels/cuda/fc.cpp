// FC through cuBLAS SGEMM (the row-major mapping is in fc.hpp) and cuDNN for the bias.
// Invariants: sizes are checked to fit cuBLAS's int dimensions before anything is enqueued.
// Thread safety: none of its own (one thread per context).
#include "engine/kernels/cuda/fc.hpp"

#include <string>

#include "engine/kernels/cuda/cudnn_descriptors.hpp"

namespace memweave::kernels::cuda {

using detail::k_one;
using detail::k_zero;

namespace {

struct fc_dims {
  int n, in, out;
};

fc_dims dims(const char* kernel, const shape4& in, const fc_params& p) {
  detail::check_shape(kernel, in);
  MEMWEAVE_EXPECTS(p.out_features >= 1, std::string(kernel) +
                                            ": out_features = " + std::to_string(p.out_features) +
                                            "; expected at least 1");
  detail::check_shape(kernel, shape4{in.n, p.out_features, 1, 1});
  detail::check_shape(kernel, shape4{p.out_features, in.per_image(), 1, 1});
  return {detail::to_int(kernel, "n", in.n), detail::to_int(kernel, "in", in.per_image()),
          detail::to_int(kernel, "out_features", p.out_features)};
}

}  // namespace

void fc_forward(cuda_kernel_context& ctx, const shape4& in, const fc_params& p, const float* x,
                const float* w, const float* b, float* y) {
  const char* kernel = "fc_forward";
  const fc_dims d = dims(kernel, in, p);
  detail::check_pointer(kernel, "x", x);
  detail::check_pointer(kernel, "w", w);
  detail::check_pointer(kernel, "y", y);
  if (p.bias) detail::check_pointer(kernel, "b", b);
  // y^T (out x n, ld out) = op_T(W: col-major in x out, ld in) * x^T (in x n, ld in).
  MEMWEAVE_CUBLAS_CHECK(cublasSgemm(ctx.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, d.out, d.n, d.in,
                                    &k_one, w, d.in, x, d.in, &k_zero, y, d.out));
  if (p.bias) {
    const detail::tensor_descriptor bias(shape4{1, p.out_features, 1, 1});
    const detail::tensor_descriptor out(shape4{in.n, p.out_features, 1, 1});
    MEMWEAVE_CUDNN_CHECK(cudnnAddTensor(ctx.cudnn(), &k_one, bias.get(), b, &k_one, out.get(), y));
  }
}

void fc_backward_data(cuda_kernel_context& ctx, const shape4& in, const fc_params& p,
                      const float* w, const float* dy, float* dx, bool accumulate) {
  const char* kernel = "fc_backward_data";
  const fc_dims d = dims(kernel, in, p);
  detail::check_pointer(kernel, "w", w);
  detail::check_pointer(kernel, "dy", dy);
  detail::check_pointer(kernel, "dx", dx);
  // dx^T (in x n, ld in) = W^T (col-major in x out, ld in) * dy^T (out x n, ld out).
  MEMWEAVE_CUBLAS_CHECK(cublasSgemm(ctx.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, d.in, d.n, d.out,
                                    &k_one, w, d.in, dy, d.out, detail::beta_for(accumulate), dx,
                                    d.in));
}

void fc_backward_weights(cuda_kernel_context& ctx, const shape4& in, const fc_params& p,
                         const float* x, const float* dy, float* dw, float* db) {
  const char* kernel = "fc_backward_weights";
  const fc_dims d = dims(kernel, in, p);
  detail::check_pointer(kernel, "x", x);
  detail::check_pointer(kernel, "dy", dy);
  detail::check_pointer(kernel, "dw", dw);
  // dW^T (in x out, ld in) = x^T (in x n, ld in) * op_T(dy^T: col-major out x n, ld out).
  MEMWEAVE_CUBLAS_CHECK(cublasSgemm(ctx.cublas(), CUBLAS_OP_N, CUBLAS_OP_T, d.in, d.out, d.n,
                                    &k_one, x, d.in, dy, d.out, &k_zero, dw, d.in));
  if (db != nullptr) {
    const detail::tensor_descriptor grad(shape4{in.n, p.out_features, 1, 1});
    const detail::tensor_descriptor bias(shape4{1, p.out_features, 1, 1});
    MEMWEAVE_CUDNN_CHECK(
        cudnnConvolutionBackwardBias(ctx.cudnn(), &k_one, grad.get(), dy, &k_zero, bias.get(), db));
  }
}

}  // namespace memweave::kernels::cuda
