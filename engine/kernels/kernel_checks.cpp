// The kernels' shared argument checks. Stateless and thread-safe: pure functions of their
// arguments that throw invalid_argument (core/error.hpp) and write nothing else. Messages
// are built when a check fails, except the input-and-parameter prefix that the convolution
// and pooling checks share between their messages, which is built up front.
#include "engine/kernels/kernel_checks.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "memweave/core/error.hpp"

namespace memweave::kernels::checks {

using std::int64_t;

namespace {

// Channel offset of each input in the output (and its channels last), after checking that
// the inputs stack.
std::vector<int64_t> channel_offsets(const char* kernel, std::span<const shape4> in,
                                     shape_check check) {
  MEMWEAVE_EXPECTS(!in.empty(), std::string(kernel) + ": no inputs; expected at least one");
  std::vector<int64_t> off(in.size() + 1, 0);
  for (std::size_t i = 0; i < in.size(); ++i) {
    check(kernel, in[i]);
    MEMWEAVE_EXPECTS(in[i].n == in[0].n && in[i].h == in[0].h && in[i].w == in[0].w,
                     std::string(kernel) + ": input " + std::to_string(i) + " is " +
                         shape_text(in[i]) + " but input 0 is " + shape_text(in[0]) +
                         "; expected the same n, h and w");
    off[i + 1] = off[i] + in[i].c;
  }
  // Every extent of the output is one of a valid input's or a sum of them: check_shape
  // passes it; a stricter check may still bound its size.
  check(kernel, shape4{in[0].n, off.back(), in[0].h, in[0].w});
  return off;
}

}  // namespace

std::string shape_text(const shape4& s) {
  return std::to_string(s.n) + "x" + std::to_string(s.c) + "x" + std::to_string(s.h) + "x" +
         std::to_string(s.w);
}

void check_shape(const char* kernel, const shape4& s) {
  MEMWEAVE_EXPECTS(s.n > 0 && s.c > 0 && s.h > 0 && s.w > 0,
                   std::string(kernel) + ": shape " + shape_text(s) +
                       " has an empty or negative extent; expected every extent >= 1");
}

void check_pointer(const char* kernel, const char* name, const void* p) {
  MEMWEAVE_EXPECTS(p != nullptr,
                   std::string(kernel) + ": " + name + " is null; pass the tensor's memory");
}

void check_pointers(const char* kernel, std::initializer_list<named_pointer> args) {
  for (const named_pointer& a : args) check_pointer(kernel, a.name, a.ptr);
}

void check_tensors(const char* kernel, const shape4& s, std::initializer_list<named_pointer> args,
                   shape_check check) {
  check(kernel, s);
  check_pointers(kernel, args);
}

shape4 conv_output(const char* kernel, const shape4& in, const conv_params& p, shape_check check) {
  check(kernel, in);
  const std::string where = std::string(kernel) + ": input " + shape_text(in);
  MEMWEAVE_EXPECTS(
      p.out_channels >= 1 && p.groups >= 1 && p.kernel_h >= 1 && p.kernel_w >= 1 &&
          p.stride_h >= 1 && p.stride_w >= 1 && p.dilation_h >= 1 && p.dilation_w >= 1 &&
          p.pad_h >= 0 && p.pad_w >= 0,
      where + ": convolution parameters out_channels=" + std::to_string(p.out_channels) +
          " groups=" + std::to_string(p.groups) + " kernel=" + std::to_string(p.kernel_h) + "x" +
          std::to_string(p.kernel_w) + " stride=" + std::to_string(p.stride_h) + "x" +
          std::to_string(p.stride_w) + " dilation=" + std::to_string(p.dilation_h) + "x" +
          std::to_string(p.dilation_w) + " pad=" + std::to_string(p.pad_h) + "x" +
          std::to_string(p.pad_w) +
          ": expected out_channels, groups, kernel, stride, dilation >= 1, pad >= 0");
  MEMWEAVE_EXPECTS(
      in.c % p.groups == 0 && p.out_channels % p.groups == 0,
      where + ": " + std::to_string(in.c) + " input and " + std::to_string(p.out_channels) +
          " output channels are not both divisible by groups=" + std::to_string(p.groups) +
          "; fix the layer's groups");
  const int64_t eff_h = p.dilation_h * (p.kernel_h - 1) + 1;
  const int64_t eff_w = p.dilation_w * (p.kernel_w - 1) + 1;
  const int64_t span_h = in.h + 2 * p.pad_h - eff_h, span_w = in.w + 2 * p.pad_w - eff_w;
  MEMWEAVE_EXPECTS(span_h >= 0 && span_w >= 0,
                   where + ": the dilated kernel " + std::to_string(eff_h) + "x" +
                       std::to_string(eff_w) +
                       " is larger than the padded input; expected a smaller kernel or "
                       "dilation, or more padding");
  return {in.n, p.out_channels, span_h / p.stride_h + 1, span_w / p.stride_w + 1};
}

pool_window pool_geometry(const char* kernel, const shape4& in, const pool_params& p,
                          shape_check check) {
  check(kernel, in);
  pool_window g{};
  if (p.adaptive()) {
    MEMWEAVE_EXPECTS(
        p.adaptive_h >= 1 && p.adaptive_w >= 1 && p.mode == pool_mode::average && !p.global,
        std::string(kernel) + ": input " + shape_text(in) + ", adaptive output " +
            std::to_string(p.adaptive_h) + "x" + std::to_string(p.adaptive_w) +
            ": expected an average, not global, pooling to at least 1x1");
    g.adaptive = true;
    g.oh = p.adaptive_h, g.ow = p.adaptive_w;
    // The largest window along an axis spans at most ceil(in / out) + 1 inputs.
    g.kh = std::min(in.h, (in.h + g.oh - 1) / g.oh + 1);
    g.kw = std::min(in.w, (in.w + g.ow - 1) / g.ow + 1);
    g.sh = g.sw = 1, g.ph = g.pw = 0;
    return g;
  }
  if (p.global) {
    g.kh = in.h, g.kw = in.w, g.sh = 1, g.sw = 1, g.ph = 0, g.pw = 0;
  } else {
    g.kh = p.kernel_h, g.kw = p.kernel_w, g.sh = p.stride_h, g.sw = p.stride_w;
    g.ph = p.pad_h, g.pw = p.pad_w;
  }
  const std::string where = std::string(kernel) + ": input " + shape_text(in) + ", kernel " +
                            std::to_string(g.kh) + "x" + std::to_string(g.kw) + ", stride " +
                            std::to_string(g.sh) + "x" + std::to_string(g.sw) + ", pad " +
                            std::to_string(g.ph) + "x" + std::to_string(g.pw);
  MEMWEAVE_EXPECTS(g.kh >= 1 && g.kw >= 1 && g.sh >= 1 && g.sw >= 1,
                   where + ": expected kernel and stride >= 1");
  MEMWEAVE_EXPECTS(g.ph >= 0 && g.pw >= 0 && g.ph < g.kh && g.pw < g.kw,
                   where + ": expected 0 <= pad < kernel (a window must hold an input element)");
  MEMWEAVE_EXPECTS(in.h + 2 * g.ph >= g.kh && in.w + 2 * g.pw >= g.kw,
                   where +
                       ": the kernel is larger than the padded input; expected a smaller "
                       "kernel or more padding");
  g.oh = (in.h + 2 * g.ph - g.kh) / g.sh + 1;
  g.ow = (in.w + 2 * g.pw - g.kw) / g.sw + 1;
  return g;
}

fc_dims check_fc(const char* kernel, const shape4& in, const fc_params& p,
                 std::initializer_list<named_pointer> tensors, shape_check check) {
  check(kernel, in);
  MEMWEAVE_EXPECTS(p.out_features >= 1, std::string(kernel) +
                                            ": out_features = " + std::to_string(p.out_features) +
                                            "; expected at least 1");
  check(kernel, shape4{in.n, p.out_features, 1, 1});
  check(kernel, shape4{p.out_features, in.per_image(), 1, 1});
  check_pointers(kernel, tensors);
  return {in.n, in.per_image(), p.out_features};
}

void check_bn(const char* kernel, const shape4& in, const bn_params& p,
              std::initializer_list<named_pointer> tensors, shape_check check) {
  check(kernel, in);
  MEMWEAVE_EXPECTS(p.epsilon > 0.0f && std::isfinite(p.epsilon),
                   std::string(kernel) + ": epsilon = " + std::to_string(p.epsilon) +
                       "; expected a small positive number such as 1e-5");
  check_pointers(kernel, tensors);
}

void check_bn_forward_training(const char* kernel, const shape4& in, const bn_params& p,
                               const float* x, const float* gamma, const float* beta,
                               const float* y, const float* saved_mean, const float* saved_invstd,
                               shape_check check) {
  check_bn(kernel, in, p,
           {{"x", x},
            {"gamma", gamma},
            {"beta", beta},
            {"y", y},
            {"saved_mean", saved_mean},
            {"saved_invstd", saved_invstd}},
           check);
}

void check_bn_forward_inference(const char* kernel, const shape4& in, const bn_params& p,
                                const float* x, const float* gamma, const float* beta,
                                const float* running_mean, const float* running_var, const float* y,
                                shape_check check) {
  check_bn(kernel, in, p,
           {{"x", x},
            {"gamma", gamma},
            {"beta", beta},
            {"running_mean", running_mean},
            {"running_var", running_var},
            {"y", y}},
           check);
}

void check_bn_backward(const char* kernel, const shape4& in, const bn_params& p, const float* x,
                       const float* saved_mean, const float* saved_invstd, const float* gamma,
                       const float* dy, const float* dgamma, const float* dbeta,
                       shape_check check) {
  check_bn(kernel, in, p,
           {{"x", x},
            {"saved_mean", saved_mean},
            {"saved_invstd", saved_invstd},
            {"gamma", gamma},
            {"dy", dy},
            {"dgamma", dgamma},
            {"dbeta", dbeta}},
           check);
}

void check_dropout(const char* kernel, const dropout_params& p) {
  MEMWEAVE_EXPECTS(p.ratio >= 0.0f && p.ratio < 1.0f,
                   std::string(kernel) + ": ratio = " + std::to_string(p.ratio) +
                       "; expected a drop probability in [0, 1)");
}

std::vector<int64_t> check_concat_forward(const char* kernel, std::span<const shape4> in,
                                          std::span<const float* const> x, const float* y,
                                          shape_check check) {
  std::vector<int64_t> off = channel_offsets(kernel, in, check);
  MEMWEAVE_EXPECTS(x.size() == in.size(), std::string(kernel) + ": " + std::to_string(x.size()) +
                                              " tensors for " + std::to_string(in.size()) +
                                              " shapes; expected one tensor per shape");
  for (const float* p : x) check_pointer(kernel, "an input", p);
  check_pointer(kernel, "y", y);
  return off;
}

std::vector<int64_t> check_concat_backward(const char* kernel, std::span<const shape4> in,
                                           std::size_t gradients, const float* dy,
                                           shape_check check) {
  std::vector<int64_t> off = channel_offsets(kernel, in, check);
  MEMWEAVE_EXPECTS(gradients == in.size(), std::string(kernel) + ": " + std::to_string(gradients) +
                                               " gradients for " + std::to_string(in.size()) +
                                               " shapes; expected one (maybe null) per shape");
  check_pointer(kernel, "dy", dy);
  return off;
}

void check_add_forward(const char* kernel, const shape4& s, std::span<const float* const> x,
                       const float* y, shape_check check) {
  check(kernel, s);
  MEMWEAVE_EXPECTS(!x.empty(), std::string(kernel) + ": no inputs; expected at least one");
  for (const float* p : x) check_pointer(kernel, "an input", p);
  check_pointer(kernel, "y", y);
}

}  // namespace memweave::kernels::checks
