// The argument checks of the layer kernels, in one place for both backends: the host
// kernels (engine/kernels/host) and the cuda kernels (engine/kernels/cuda) call these, so
// that they reject the same shapes, parameters and null tensors with the same messages.
// Every check throws memweave::invalid_argument naming the kernel, the value and what was
// expected, before the kernel writes or enqueues anything. Engine-internal, not part of
// the kernels' API.
//
// The checks that take a `shape_check` run it on every shape they check: the host kernels
// pass check_shape (the default), the cuda kernels their stricter check, which also bounds
// the element count by cuDNN's int-indexed descriptors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "memweave/engine/layer_params.hpp"

namespace memweave::kernels::checks {

/// "2x3x4x5" (kept here so that the kernels do not depend on the engine library).
std::string shape_text(const shape4& s);

/// Throws invalid_argument naming the kernel when a shape has a negative or zero extent.
void check_shape(const char* kernel, const shape4& s);

/// A shape check: check_shape, or a backend's stricter one that runs check_shape first.
using shape_check = void (*)(const char* kernel, const shape4& s);

/// Throws invalid_argument naming the kernel and the argument when `p` is null.
void check_pointer(const char* kernel, const char* name, const void* p);

/// One tensor argument of a kernel: its name in messages and its memory.
struct named_pointer {
  const char* name;
  const void* ptr;
};

/// check_pointer on each argument, in order.
void check_pointers(const char* kernel, std::initializer_list<named_pointer> args);

/// check(kernel, s), then check_pointers(kernel, args): the checks of an element-wise
/// kernel (activation, dropout, softmax loss, ...).
void check_tensors(const char* kernel, const shape4& s, std::initializer_list<named_pointer> args,
                   shape_check check = check_shape);

/// Checks a convolution of input `in` by `p`: the input shape (with `check`), the
/// parameters (out_channels, groups, kernel, stride, dilation >= 1, pad >= 0), that groups
/// divides both channel counts, and that the dilated kernel fits the padded input. Returns
/// the output shape (n, out_channels, oh, ow), unchecked.
shape4 conv_output(const char* kernel, const shape4& in, const conv_params& p,
                   shape_check check = check_shape);

/// The window of a pooling: kernel, stride and pad (those of the whole input when
/// pool_params::global), and the output extent. Adaptive pooling (pool_params::adaptive)
/// has windows of varying size: kh x kw is then the largest, stride 1 and pad 0 mean
/// nothing, and adaptive_begin/end give each window.
struct pool_window {
  std::int64_t kh, kw, sh, sw, ph, pw;
  std::int64_t oh, ow;
  bool adaptive = false;
};

/// Checks a pooling of input `in` by `p`: the input shape (with `check`), kernel and stride
/// >= 1, 0 <= pad < kernel, and that the kernel fits the padded input; adaptive: an output
/// of at least 1x1, average mode. Returns the window.
pool_window pool_geometry(const char* kernel, const shape4& in, const pool_params& p,
                          shape_check check = check_shape);

/// The GEMM sizes of a fully connected layer: images, input features (per_image), outputs.
struct fc_dims {
  std::int64_t n, in, out;
};

/// Checks a fully connected layer: the input shape (with `check`), out_features >= 1, the
/// shapes of the output (n, out_features) and of the weights (out_features, in) (with
/// `check`: check_shape passes them, a stricter check may bound their size), then
/// `tensors`, in order. Returns the layer's sizes.
fc_dims check_fc(const char* kernel, const shape4& in, const fc_params& p,
                 std::initializer_list<named_pointer> tensors, shape_check check = check_shape);

/// Checks a batch normalization: the input shape (with `check`), its epsilon (finite,
/// > 0), then `tensors`, in order.
void check_bn(const char* kernel, const shape4& in, const bn_params& p,
              std::initializer_list<named_pointer> tensors, shape_check check = check_shape);

/// check_bn of bn_forward_training: x, gamma, beta, y, saved_mean, saved_invstd.
void check_bn_forward_training(const char* kernel, const shape4& in, const bn_params& p,
                               const float* x, const float* gamma, const float* beta,
                               const float* y, const float* saved_mean, const float* saved_invstd,
                               shape_check check = check_shape);

/// check_bn of bn_forward_inference: x, gamma, beta, running_mean, running_var, y.
void check_bn_forward_inference(const char* kernel, const shape4& in, const bn_params& p,
                                const float* x, const float* gamma, const float* beta,
                                const float* running_mean, const float* running_var, const float* y,
                                shape_check check = check_shape);

/// check_bn of bn_backward: x, saved_mean, saved_invstd, gamma, dy, dgamma, dbeta (dx may
/// be null).
void check_bn_backward(const char* kernel, const shape4& in, const bn_params& p, const float* x,
                       const float* saved_mean, const float* saved_invstd, const float* gamma,
                       const float* dy, const float* dgamma, const float* dbeta,
                       shape_check check = check_shape);

/// Checks a dropout's ratio: a drop probability in [0, 1).
void check_dropout(const char* kernel, const dropout_params& p);

/// Checks the inputs of a CONCAT along channels: at least one, each shape valid (with
/// `check`) and of input 0's n, h and w, and the stacked output's shape (with `check`);
/// then one tensor per shape in `x`, none null, and `y`. Returns each input's channel
/// offset in the output, and the output's channels last.
std::vector<std::int64_t> check_concat_forward(const char* kernel, std::span<const shape4> in,
                                               std::span<const float* const> x, const float* y,
                                               shape_check check = check_shape);

/// The shape checks of check_concat_forward, then `gradients` (the number of dx entries,
/// each maybe null) equal to the number of shapes, and `dy`. Returns the channel offsets.
std::vector<std::int64_t> check_concat_backward(const char* kernel, std::span<const shape4> in,
                                                std::size_t gradients, const float* dy,
                                                shape_check check = check_shape);

/// Checks an ADD's shape (with `check`), at least one input, none null, and `y`.
void check_add_forward(const char* kernel, const shape4& s, std::span<const float* const> x,
                       const float* y, shape_check check = check_shape);

}  // namespace memweave::kernels::checks
