// Helpers of the zoo: option checks, channel scaling, CONV-BN-RELU units. Pure functions.
#include "zoo_common.hpp"

#include <cmath>

#include "memweave/core/error.hpp"

namespace memweave::zoo_detail {

zoo_options resolve(std::string_view net, const zoo_options& o, std::int64_t native_side,
                    std::int64_t min_side) {
  const std::string who = "zoo network '" + std::string(net) + "': ";
  if (o.batch < 1)
    throw invalid_argument(who + "batch = " + std::to_string(o.batch) + "; expected >= 1");
  if (o.classes < 1)
    throw invalid_argument(who + "classes = " + std::to_string(o.classes) + "; expected >= 1");
  if (o.image_channels < 1)
    throw invalid_argument(who + "image_channels = " + std::to_string(o.image_channels) +
                           "; expected >= 1");
  if (!(o.width_scale > 0.0 && o.width_scale <= k_max_width_scale))
    throw invalid_argument(who + "width_scale = " + std::to_string(o.width_scale) +
                           "; expected a value in (0, " + std::to_string(k_max_width_scale) +
                           "] (1 = the published widths)");
  zoo_options r = o;
  if (r.image_side == 0) r.image_side = native_side;
  if (r.image_side < min_side)
    throw invalid_argument(who + "image_side = " + std::to_string(o.image_side) +
                           " (--image-side) is too small; this network needs an input side of "
                           "at least " +
                           std::to_string(min_side) + " (native " + std::to_string(native_side) +
                           ", the default)");
  return r;
}

std::int64_t scaled(std::int64_t c, double scale, std::int64_t multiple) {
  const double exact = static_cast<double>(c) * scale;
  // resolve() bounds the scale; this keeps llround defined whatever the caller passes.
  if (!(exact < 1e15))
    throw invalid_argument("channel count " + std::to_string(c) + " x width " +
                           std::to_string(scale) + " is too large; lower the width scale");
  auto v = static_cast<std::int64_t>(std::llround(exact));
  if (v < 1) v = 1;
  return (v + multiple - 1) / multiple * multiple;
}

conv_params conv_p(std::int64_t out, std::int64_t kh, std::int64_t kw, std::int64_t stride,
                   std::int64_t ph, std::int64_t pw, bool bias) {
  conv_params p;
  p.out_channels = out;
  p.kernel_h = kh;
  p.kernel_w = kw;
  p.stride_h = p.stride_w = stride;
  p.pad_h = ph;
  p.pad_w = pw;
  p.bias = bias;
  return p;
}

layer_handle conv_bn_relu(network_builder& b, layer_handle x, std::int64_t out, std::int64_t kh,
                          std::int64_t kw, std::int64_t stride, std::int64_t ph, std::int64_t pw,
                          const std::string& name, float bn_epsilon) {
  layer_handle y = b.conv(x, conv_p(out, kh, kw, stride, ph, pw, false), name);
  bn_params bp;
  bp.epsilon = bn_epsilon;
  y = b.bn(y, bp, name + "_bn");
  return b.relu(y, name + "_relu");
}

pool_params pool_p(pool_mode mode, std::int64_t k, std::int64_t s, std::int64_t p) {
  pool_params q;
  q.mode = mode;
  q.kernel_h = q.kernel_w = k;
  q.stride_h = q.stride_w = s;
  q.pad_h = q.pad_w = p;
  return q;
}

}  // namespace memweave::zoo_detail
