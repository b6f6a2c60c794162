// Private helpers of the cuda kernels: checks and descriptor setters. Stateless.
#include "engine/kernels/cuda/cudnn_descriptors.hpp"

#include <limits>

namespace memweave::kernels::cuda::detail {

namespace {
constexpr std::int64_t k_int_max = std::numeric_limits<int>::max();
}  // namespace

void check_shape(const char* kernel, const shape4& s) {
  checks::check_shape(kernel, s);
  MEMWEAVE_EXPECTS(s.n <= k_int_max / s.per_image() && s.per_image() <= k_int_max,
                   std::string(kernel) + ": shape " + shape_text(s) + " has " +
                       std::to_string(s.count()) +
                       " elements; cuDNN's descriptors hold at most 2^31 - 1: split the batch");
}

int to_int(const char* kernel, const char* what, std::int64_t v) {
  MEMWEAVE_EXPECTS(v >= std::numeric_limits<int>::min() && v <= k_int_max,
                   std::string(kernel) + ": " + what + " = " + std::to_string(v) +
                       " does not fit cuDNN's int parameters; expected |value| < 2^31");
  return static_cast<int>(v);
}

void tensor_descriptor::set(const shape4& s) {
  MEMWEAVE_CUDNN_CHECK(cudnnSetTensor4dDescriptor(
      d_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, to_int("tensor", "n", s.n),
      to_int("tensor", "c", s.c), to_int("tensor", "h", s.h), to_int("tensor", "w", s.w)));
}

void tensor_descriptor::set_channels(std::int64_t c) {
  set(shape4{1, c, 1, 1});
}

}  // namespace memweave::kernels::cuda::detail
