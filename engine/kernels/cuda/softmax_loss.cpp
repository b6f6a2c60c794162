// Softmax + cross-entropy: cuDNN softmax and the custom loss / gradient kernels. Invariants:
// the loss and the label-error flag live in the context's scratch, written by the one-block
// loss kernel; the only host wait of the whole library is here, when the caller asks for the
// loss. Thread safety: none of its own.
#include "engine/kernels/cuda/softmax_loss.hpp"

#include <string>

#include "engine/kernels/cuda/cudnn_descriptors.hpp"
#include "engine/kernels/cuda/custom_kernels.hpp"
#include "engine/kernels/cuda/micro_batch.hpp"

namespace memweave::kernels::cuda {

using detail::k_one;
using detail::k_zero;

void softmax_loss_forward(cuda_kernel_context& ctx, const shape4& in, const float* x,
                          const float* labels, float* y, double* loss) {
  // The whole batch is its one part.
  softmax_loss_forward_part(ctx, in, x, labels, y, in.n, true);
  if (loss != nullptr) read_loss(ctx, in.n, in.per_image(), loss);
}

void softmax_loss_forward_part(cuda_kernel_context& ctx, const shape4& in, const float* x,
                               const float* labels, float* y, std::int64_t batch, bool first) {
  detail::check_tensors("softmax_loss_forward", in, {{"x", x}, {"labels", labels}, {"y", y}});
  const std::int64_t classes = in.per_image();
  const detail::tensor_descriptor t(shape4{in.n, classes, 1, 1});
  MEMWEAVE_CUDNN_CHECK(cudnnSoftmaxForward(ctx.cudnn(), CUDNN_SOFTMAX_ACCURATE,
                                           CUDNN_SOFTMAX_MODE_INSTANCE, &k_one, t.get(), x, &k_zero,
                                           t.get(), y));
  detail::launch_softmax_loss(ctx.stream(), in.n, classes, x, labels, ctx.loss_scratch(),
                              ctx.label_error_scratch(), batch, !first);
}

void read_loss(cuda_kernel_context& ctx, std::int64_t batch, std::int64_t classes, double* loss) {
  double value = 0.0;
  int label_error = 0;
  MEMWEAVE_CUDA_CHECK(cudaMemcpyAsync(&value, ctx.loss_scratch(), sizeof(value),
                                      cudaMemcpyDeviceToHost, ctx.stream()));
  MEMWEAVE_CUDA_CHECK(cudaMemcpyAsync(&label_error, ctx.label_error_scratch(), sizeof(label_error),
                                      cudaMemcpyDeviceToHost, ctx.stream()));
  MEMWEAVE_CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
  MEMWEAVE_EXPECTS(label_error == 0,
                   "softmax_loss_forward: a label of the batch of " + std::to_string(batch) +
                       " images is not a whole class index in [0, " + std::to_string(classes) +
                       "); fix the data source's labels");
  *loss = value;
}

void softmax_loss_backward(cuda_kernel_context& ctx, const shape4& in, const float* y,
                           const float* labels, float* dx, bool accumulate, std::int64_t batch) {
  const char* kernel = "softmax_loss_backward";
  detail::check_tensors(kernel, in, {{"y", y}, {"labels", labels}, {"dx", dx}});
  detail::launch_softmax_loss_grad(ctx.stream(), in.n, in.per_image(), y, labels, dx, accumulate,
                                   ctx.label_error_scratch(), batch);
}

}  // namespace memweave::kernels::cuda
