// FC through cuBLAS SGEMM (the row-major mapping is in fc.hpp) and cuDNN for the bias.
// Invariants: sizes are checked to fit cuBLAS's int dimensions before anything is enqueued.
// Thread safety: none of its own (one thread per context).
#include "engine/kernels/cuda/fc.hpp"

#include <initializer_list>
#include <string>

#include "engine/kernels/cuda/cudnn_descriptors.hpp"
#include "engine/kernels/cuda/custom_kernels.hpp"
#include "engine/kernels/kernel_checks.hpp"

namespace memweave::kernels::cuda {

using detail::k_one;
using detail::k_zero;

namespace {

struct fc_dims {
  int n, in, out;
  int ld;  // of y and dy: `out` where packed
};

// Checks the arguments (tensors after the shapes), then the sizes as cuBLAS's ints (which
// the shape checks already bound).
fc_dims dims(const char* kernel, const shape4& in, const fc_params& p,
             std::initializer_list<checks::named_pointer> tensors, std::int64_t pitch) {
  const checks::fc_dims d = checks::check_fc(kernel, in, p, tensors, detail::check_shape);
  if (pitch != 0 && pitch < d.out) {
    throw invalid_argument(std::string(kernel) + ": a pitch of " + std::to_string(pitch) +
                           " floats between images' rows is less than their " +
                           std::to_string(d.out) + " output features");
  }
  return {detail::to_int(kernel, "n", d.n), detail::to_int(kernel, "in", d.in),
          detail::to_int(kernel, "out_features", d.out),
          detail::to_int(kernel, "pitch", pitch == 0 ? d.out : pitch)};
}

}  // namespace

void fc_forward(cuda_kernel_context& ctx, const shape4& in, const fc_params& p, const float* x,
                const float* w, const float* b, float* y, std::int64_t y_pitch) {
  const char* kernel = "fc_forward";
  const fc_dims d = dims(kernel, in, p, {{"x", x}, {"w", w}, {"y", y}}, y_pitch);
  if (p.bias) detail::check_pointer(kernel, "b", b);
  // y^T (out x n, ld) = op_T(W: col-major in x out, ld in) * x^T (in x n, ld in).
  MEMWEAVE_CUBLAS_CHECK(cublasSgemm(ctx.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, d.out, d.n, d.in,
                                    &k_one, w, d.in, x, d.in, &k_zero, y, d.ld));
  if (p.bias && d.ld != d.out) {
    // b added to each image's row (a source pitch of 0 reads b again for every row).
    detail::launch_accumulate(ctx.stream(), d.n, d.out, b, 0, y, d.ld);
  } else if (p.bias) {
    const detail::tensor_descriptor bias(shape4{1, p.out_features, 1, 1});
    const detail::tensor_descriptor out(shape4{in.n, p.out_features, 1, 1});
    MEMWEAVE_CUDNN_CHECK(cudnnAddTensor(ctx.cudnn(), &k_one, bias.get(), b, &k_one, out.get(), y));
  }
}

void fc_backward_data(cuda_kernel_context& ctx, const shape4& in, const fc_params& p,
                      const float* w, const float* dy, float* dx, bool accumulate,
                      std::int64_t dy_pitch) {
  const char* kernel = "fc_backward_data";
  const fc_dims d = dims(kernel, in, p, {{"w", w}, {"dy", dy}, {"dx", dx}}, dy_pitch);
  // dx^T (in x n, ld in) = W^T (col-major in x out, ld in) * dy^T (out x n, ld).
  MEMWEAVE_CUBLAS_CHECK(cublasSgemm(ctx.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, d.in, d.n, d.out,
                                    &k_one, w, d.in, dy, d.ld, detail::beta_for(accumulate), dx,
                                    d.in));
}

void fc_backward_weights(cuda_kernel_context& ctx, const shape4& in, const fc_params& p,
                         const float* x, const float* dy, float* dw, float* db, bool accumulate,
                         std::int64_t dy_pitch) {
  const char* kernel = "fc_backward_weights";
  const fc_dims d = dims(kernel, in, p, {{"x", x}, {"dy", dy}, {"dw", dw}}, dy_pitch);
  // dW^T (in x out, ld in) = x^T (in x n, ld in) * op_T(dy^T: col-major out x n, ld).
  MEMWEAVE_CUBLAS_CHECK(cublasSgemm(ctx.cublas(), CUBLAS_OP_N, CUBLAS_OP_T, d.in, d.out, d.n,
                                    &k_one, x, d.in, dy, d.ld, detail::beta_for(accumulate), dw,
                                    d.in));
  if (db != nullptr && d.ld != d.out) {
    detail::launch_column_sums(ctx.stream(), d.n, d.out, dy, d.ld, db, accumulate);
  } else if (db != nullptr) {
    const detail::tensor_descriptor grad(shape4{in.n, p.out_features, 1, 1});
    const detail::tensor_descriptor bias(shape4{1, p.out_features, 1, 1});
    MEMWEAVE_CUDNN_CHECK(cudnnConvolutionBackwardBias(
        ctx.cudnn(), &k_one, grad.get(), dy, detail::beta_for(accumulate), bias.get(), db));
  }
}

}  // namespace memweave::kernels::cuda
