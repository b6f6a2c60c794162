// Shape inference and validation of one layer. Pure functions; thread-safe.
//
// Each check names the layer, the offending value and what was expected, so that a bad
// network description is fixed from the message alone.
#include "shape_inference.hpp"

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "engine/tiling/tiled_segment.hpp"
#include "memweave/core/checked.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"

namespace memweave::detail {
namespace {

std::string who(const std::string& name, layer_type type) {
  return "layer '" + name + "' (" + to_string(type) + ")";
}

std::string hw(std::int64_t h, std::int64_t w) {
  return std::to_string(h) + "x" + std::to_string(w);
}

void expect_inputs(const std::string& name, layer_type type, std::size_t got, std::size_t min,
                   std::size_t max) {
  if (got >= min && got <= max) return;
  std::string expected = min == max ? std::to_string(min) : "at least " + std::to_string(min);
  throw invalid_argument(who(name, type) + " has " + std::to_string(got) + " input(s); expected " +
                         expected);
}

// The largest value of one dimension or parameter (a side, a channel count, a kernel, a
// padding): a product of two of them, or a sum of a few, stays far from overflow, and a
// larger one makes a tensor beyond any address space anyway.
constexpr std::int64_t k_max_dimension = std::int64_t{1} << 31;

void expect_positive(const std::string& name, layer_type type, const char* field, std::int64_t v) {
  if (v >= 1 && v <= k_max_dimension) return;
  throw invalid_argument(who(name, type) + ": " + field + " = " + std::to_string(v) +
                         "; expected from 1 to " + std::to_string(k_max_dimension));
}

void expect_non_negative(const std::string& name, layer_type type, const char* field,
                         std::int64_t v) {
  if (v >= 0 && v <= k_max_dimension) return;
  throw invalid_argument(who(name, type) + ": " + field + " = " + std::to_string(v) +
                         "; expected from 0 to " + std::to_string(k_max_dimension));
}

// Every tensor of a layer must be addressable: its element count and bytes computed without
// overflow, and no larger than k_max_tensor_bytes. Names the layer, the tensor and its shape.
void expect_addressable(const std::string& name, layer_type type, const std::string& tensor,
                        const shape4& s, const char* remedy) {
  std::optional<std::int64_t> count = s.n;
  for (std::int64_t d : {s.c, s.h, s.w, std::int64_t{sizeof(float)}}) {
    if (count) count = checked_mul(*count, d);
  }
  if (count && *count >= 0 && static_cast<std::uint64_t>(*count) <= k_max_tensor_bytes) return;
  throw invalid_argument(
      who(name, type) + ": its " + tensor + " of shape " + to_string(s) + " would take " +
      (count && *count >= 0 ? format_bytes(static_cast<std::size_t>(*count))
                            : std::string("more than 2^63 bytes")) +
      ", more than the " + format_bytes(k_max_tensor_bytes) + " of an address space; " + remedy);
}

void expect_addressable(const std::string& name, layer_type type, const inferred_layer& r) {
  // A parameter holds no images: the batch does not size it (session 42's hostile run: a
  // weight too large for --width 10000 asked to lower the batch too).
  const char* activations = "lower the batch, the image side or the width";
  expect_addressable(name, type, "output", r.output, activations);
  for (const auto& p : r.param_tensors) {
    expect_addressable(name, type, p.name, p.shape,
                       "lower the width, or the image side where a fully connected layer reads a "
                       "feature map (the batch does not size parameters)");
  }
  for (const auto& a : r.aux_tensors) expect_addressable(name, type, a.name, a.shape, activations);
}

shape4 vec(std::int64_t c) {
  return {1, c, 1, 1};
}

// A window of `kernel` (effective, dilation applied) must fit the padded input.
void expect_window_fits(const std::string& name, layer_type type, const char* what, const layer& in,
                        std::int64_t kh, std::int64_t kw, std::int64_t ph, std::int64_t pw) {
  const shape4& s = in.output_shape;
  if (kh <= s.h + 2 * ph && kw <= s.w + 2 * pw) return;
  throw invalid_argument(who(name, type) + ": " + what + " " + hw(kh, kw) +
                         " is larger than the padded input " + hw(s.h + 2 * ph, s.w + 2 * pw) +
                         " (input " + describe_input(in) + " with padding " + hw(ph, pw) +
                         "); use a smaller kernel, more padding or a larger input");
}

inferred_layer infer_data(const std::string& name, const data_params& p) {
  const shape4& s = p.shape;
  const layer_type t = layer_type::data;
  if (s.n < 1)
    throw invalid_argument(who(name, t) + ": batch size n = " + std::to_string(s.n) + " in shape " +
                           to_string(s) + "; expected n >= 1");
  expect_positive(name, t, "channels c", s.c);
  expect_positive(name, t, "height h", s.h);
  expect_positive(name, t, "width w", s.w);
  expect_positive(name, t, "classes", p.classes);
  return {s, {}, {}};
}

inferred_layer infer_conv(const std::string& name, const conv_params& p, const layer& in) {
  const layer_type t = layer_type::conv;
  expect_positive(name, t, "out_channels", p.out_channels);
  expect_positive(name, t, "kernel_h", p.kernel_h);
  expect_positive(name, t, "kernel_w", p.kernel_w);
  expect_positive(name, t, "stride_h", p.stride_h);
  expect_positive(name, t, "stride_w", p.stride_w);
  expect_non_negative(name, t, "pad_h", p.pad_h);
  expect_non_negative(name, t, "pad_w", p.pad_w);
  expect_positive(name, t, "dilation_h", p.dilation_h);
  expect_positive(name, t, "dilation_w", p.dilation_w);
  expect_positive(name, t, "groups", p.groups);
  const shape4& x = in.output_shape;
  if (x.c % p.groups != 0 || p.out_channels % p.groups != 0)
    throw invalid_argument(who(name, t) + ": groups = " + std::to_string(p.groups) +
                           " must divide both the input channels (" + std::to_string(x.c) +
                           ", from " + describe_input(in) + ") and out_channels (" +
                           std::to_string(p.out_channels) + ")");
  const std::int64_t eh = p.dilation_h * (p.kernel_h - 1) + 1;
  const std::int64_t ew = p.dilation_w * (p.kernel_w - 1) + 1;
  expect_window_fits(name, t, "kernel (dilated)", in, eh, ew, p.pad_h, p.pad_w);
  inferred_layer r;
  r.output = p.output(x);
  r.param_tensors.push_back(
      {"weight", {p.out_channels, x.c / p.groups, p.kernel_h, p.kernel_w}, true, true});
  if (p.bias) r.param_tensors.push_back({"bias", vec(p.out_channels), true, false});
  return r;
}

inferred_layer infer_fc(const std::string& name, const fc_params& p, const layer& in) {
  expect_positive(name, layer_type::fc, "out_features", p.out_features);
  const shape4& x = in.output_shape;
  inferred_layer r;
  r.output = {x.n, p.out_features, 1, 1};
  r.param_tensors.push_back({"weight", {p.out_features, x.per_image(), 1, 1}, true, true});
  if (p.bias) r.param_tensors.push_back({"bias", vec(p.out_features), true, false});
  return r;
}

inferred_layer infer_pool(const std::string& name, const pool_params& p, const layer& in) {
  const layer_type t = layer_type::pool;
  if (p.mode != pool_mode::max && p.mode != pool_mode::average)
    throw invalid_argument(who(name, t) + ": unknown pooling mode " +
                           std::to_string(static_cast<int>(p.mode)) + "; expected max or average");
  if (p.adaptive()) {
    expect_positive(name, t, "adaptive_h", p.adaptive_h);
    expect_positive(name, t, "adaptive_w", p.adaptive_w);
    if (p.mode != pool_mode::average || p.global)
      throw invalid_argument(who(name, t) + ": adaptive pooling to " +
                             hw(p.adaptive_h, p.adaptive_w) +
                             " is average pooling only, and not global; use mode average and "
                             "global = false (or adaptive 1x1 for a global average)");
  } else if (!p.global) {
    expect_positive(name, t, "kernel_h", p.kernel_h);
    expect_positive(name, t, "kernel_w", p.kernel_w);
    expect_positive(name, t, "stride_h", p.stride_h);
    expect_positive(name, t, "stride_w", p.stride_w);
    expect_non_negative(name, t, "pad_h", p.pad_h);
    expect_non_negative(name, t, "pad_w", p.pad_w);
    if (p.pad_h >= p.kernel_h || p.pad_w >= p.kernel_w)
      throw invalid_argument(who(name, t) + ": padding " + hw(p.pad_h, p.pad_w) +
                             " must be smaller than the kernel " + hw(p.kernel_h, p.kernel_w) +
                             " (a window would see only padding)");
    expect_window_fits(name, t, "kernel", in, p.kernel_h, p.kernel_w, p.pad_h, p.pad_w);
  }
  return {p.output(in.output_shape), {}, {}};
}

inferred_layer infer_act(const std::string& name, const act_params& p, const layer& in) {
  if (p.mode != act_mode::relu && p.mode != act_mode::tanh && p.mode != act_mode::sigmoid)
    throw invalid_argument(who(name, layer_type::act) + ": unknown activation mode " +
                           std::to_string(static_cast<int>(p.mode)) +
                           "; expected relu, tanh or sigmoid");
  return {in.output_shape, {}, {}};
}

inferred_layer infer_bn(const std::string& name, const bn_params& p, const layer& in) {
  const layer_type t = layer_type::bn;
  if (!(p.epsilon > 0.0f) || !std::isfinite(p.epsilon))
    throw invalid_argument(who(name, t) + ": epsilon = " + std::to_string(p.epsilon) +
                           "; expected a finite value > 0");
  if (!(p.momentum >= 0.0f && p.momentum <= 1.0f))
    throw invalid_argument(who(name, t) + ": momentum = " + std::to_string(p.momentum) +
                           "; expected a value in [0, 1]");
  const std::int64_t c = in.output_shape.c;
  inferred_layer r;
  r.output = in.output_shape;
  r.param_tensors = {{"gamma", vec(c), true, true},
                     {"beta", vec(c), true, false},
                     {"running_mean", vec(c), false, false},
                     {"running_var", vec(c), false, false}};
  r.aux_tensors = {{"saved_mean", vec(c)}, {"saved_inv_std", vec(c)}};
  return r;
}

inferred_layer infer_lrn(const std::string& name, const lrn_params& p, const layer& in) {
  const layer_type t = layer_type::lrn;
  // Bounded as the other geometry is (the kernel's window arithmetic is 64-bit: a size of
  // 2^62 + 1 overflowed it).
  if (p.size < 1 || p.size % 2 == 0 || p.size > (std::int64_t{1} << 31) - 1)
    throw invalid_argument(who(name, t) + ": size = " + std::to_string(p.size) +
                           "; expected an odd window from 1 to 2147483647");
  // alpha and beta at least 0, as the kernels require: a negative one passed here and failed
  // the step on the device, an internal error after `plan` had said it fits (session 42's
  // hostile run).
  if (!(p.k > 0.0f) || !std::isfinite(p.k) || !(p.alpha >= 0.0f) || !std::isfinite(p.alpha) ||
      !(p.beta >= 0.0f) || !std::isfinite(p.beta))
    throw invalid_argument(who(name, t) + ": k = " + format_number(p.k) + ", alpha = " +
                           format_number(p.alpha) + ", beta = " + format_number(p.beta) +
                           "; expected k > 0 and finite alpha >= 0 and beta >= 0");
  return {in.output_shape, {}, {}};
}

inferred_layer infer_dropout(const std::string& name, const dropout_params& p, const layer& in) {
  if (!(p.ratio >= 0.0f && p.ratio < 1.0f))
    throw invalid_argument(who(name, layer_type::dropout) + ": ratio = " + std::to_string(p.ratio) +
                           "; expected a value in [0, 1)");
  inferred_layer r;
  r.output = in.output_shape;
  r.aux_tensors = {{"mask", in.output_shape}};
  return r;
}

inferred_layer infer_softmax(const std::string& name, const layer& in, std::int64_t classes) {
  const shape4& x = in.output_shape;
  if (x.per_image() != classes)
    throw invalid_argument(
        who(name, layer_type::softmax_loss) + ": its input " + describe_input(in) + " holds " +
        std::to_string(x.per_image()) + " values per image but the DATA layer has " +
        std::to_string(classes) +
        " classes; end the network with an FC of out_features = " + std::to_string(classes));
  return {x, {}, {}};
}

inferred_layer infer_concat(const std::string& name, std::span<const layer* const> in) {
  const shape4& a = in[0]->output_shape;
  shape4 out = a;
  out.c = 0;
  for (const layer* l : in) {
    const shape4& b = l->output_shape;
    if (b.n != a.n || b.h != a.h || b.w != a.w)
      throw invalid_argument(who(name, layer_type::concat) + ": input " + describe_input(*in[0]) +
                             " and input " + describe_input(*l) +
                             " differ in batch, height or width; CONCAT joins channels and "
                             "needs the same n, h and w in every input");
    out.c += b.c;
  }
  return {out, {}, {}};
}

inferred_layer infer_add(const std::string& name, std::span<const layer* const> in) {
  const shape4& a = in[0]->output_shape;
  for (const layer* l : in)
    if (!(l->output_shape == a))
      throw invalid_argument(who(name, layer_type::add) + ": input " + describe_input(*in[0]) +
                             " and input " + describe_input(*l) +
                             " differ in shape; ADD needs identical shapes (project the "
                             "shortcut with a 1x1 CONV to match)");
  return {a, {}, {}};
}

// A fused segment: its output is its last member's; its parameter and aux tensors are the
// members' own, named "<member>.<name>", in member order (tiled_segment.hpp's layout).
inferred_layer infer_tiled(const std::string& name, const tiled_params& p, const layer& in) {
  if (p.segment == nullptr || p.segment->layers.size() < 2)
    throw invalid_argument(who(name, layer_type::tiled) +
                           " has no segment; cut one with tiling::make_segment");
  const std::vector<layer>& members = p.segment->layers;
  if (!(members.front().output_shape == in.output_shape))
    throw invalid_argument(who(name, layer_type::tiled) + ": its segment reads " +
                           to_string(members.front().output_shape) + " but its input is " +
                           describe_input(in));
  inferred_layer r;
  r.output = members.back().output_shape;
  for (std::size_t i = 1; i < members.size(); ++i) {
    for (param_tensor_spec t : members[i].param_tensors) {
      t.name = members[i].name + "." + t.name;
      r.param_tensors.push_back(std::move(t));
    }
    for (aux_tensor_spec t : members[i].aux_tensors) {
      t.name = members[i].name + "." + t.name;
      r.aux_tensors.push_back(std::move(t));
    }
  }
  return r;
}

}  // namespace

std::string describe_input(const layer& l) {
  return "'" + l.name + "' (" + to_string(l.output_shape) + ")";
}

namespace {

inferred_layer infer_unchecked(const std::string& name, layer_type type, const layer_params& params,
                               std::span<const layer* const> inputs, std::int64_t classes) {
  // layer_params lists its alternatives in layer_type's order.
  if (params.index() != static_cast<std::size_t>(type)) {
    const auto given = static_cast<layer_type>(params.index());
    throw invalid_argument(who(name, type) + " was given the parameters of a " + to_string(given) +
                           " layer; pass the " + to_string(type) + " parameter struct");
  }
  const std::size_t n = inputs.size();
  switch (type) {
    case layer_type::data:
      expect_inputs(name, type, n, 0, 0);
      return infer_data(name, std::get<data_params>(params));
    case layer_type::concat:
      expect_inputs(name, type, n, 2, SIZE_MAX);
      return infer_concat(name, inputs);
    case layer_type::add:
      expect_inputs(name, type, n, 2, SIZE_MAX);
      return infer_add(name, inputs);
    default:
      break;
  }
  expect_inputs(name, type, n, 1, 1);
  const layer& x = *inputs[0];
  switch (type) {
    case layer_type::conv:
      return infer_conv(name, std::get<conv_params>(params), x);
    case layer_type::fc:
      return infer_fc(name, std::get<fc_params>(params), x);
    case layer_type::pool:
      return infer_pool(name, std::get<pool_params>(params), x);
    case layer_type::act:
      return infer_act(name, std::get<act_params>(params), x);
    case layer_type::bn:
      return infer_bn(name, std::get<bn_params>(params), x);
    case layer_type::lrn:
      return infer_lrn(name, std::get<lrn_params>(params), x);
    case layer_type::dropout:
      return infer_dropout(name, std::get<dropout_params>(params), x);
    case layer_type::softmax_loss:
      return infer_softmax(name, x, classes);
    case layer_type::tiled:
      return infer_tiled(name, std::get<tiled_params>(params), x);
    default:
      break;
  }
  throw invalid_argument(who(name, type) + ": unknown layer type " +
                         std::to_string(static_cast<int>(type)));
}

}  // namespace

inferred_layer infer_layer(const std::string& name, layer_type type, const layer_params& params,
                           std::span<const layer* const> inputs, std::int64_t classes) {
  inferred_layer r = infer_unchecked(name, type, params, inputs, classes);
  expect_addressable(name, type, r);
  return r;
}

}  // namespace memweave::detail
