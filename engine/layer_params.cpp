// Shape arithmetic of layer parameters. Pure functions.
#include "memweave/engine/layer_params.hpp"

namespace memweave {

std::string to_string(const shape4& s) {
  return std::to_string(s.n) + "x" + std::to_string(s.c) + "x" + std::to_string(s.h) + "x" +
         std::to_string(s.w);
}

const char* to_string(layer_type t) noexcept {
  switch (t) {
    case layer_type::data:
      return "DATA";
    case layer_type::conv:
      return "CONV";
    case layer_type::fc:
      return "FC";
    case layer_type::pool:
      return "POOL";
    case layer_type::act:
      return "ACT";
    case layer_type::bn:
      return "BN";
    case layer_type::lrn:
      return "LRN";
    case layer_type::dropout:
      return "DROPOUT";
    case layer_type::softmax_loss:
      return "SOFTMAX";
    case layer_type::concat:
      return "CONCAT";
    case layer_type::add:
      return "ADD";
    case layer_type::tiled:
      return "TILED";
  }
  return "?";
}

shape4 conv_params::output(const shape4& in) const noexcept {
  const std::int64_t eff_h = dilation_h * (kernel_h - 1) + 1;
  const std::int64_t eff_w = dilation_w * (kernel_w - 1) + 1;
  return {in.n, out_channels, (in.h + 2 * pad_h - eff_h) / stride_h + 1,
          (in.w + 2 * pad_w - eff_w) / stride_w + 1};
}

shape4 pool_params::output(const shape4& in) const noexcept {
  if (global) return {in.n, in.c, 1, 1};
  if (adaptive()) return {in.n, in.c, adaptive_h, adaptive_w};
  return {in.n, in.c, (in.h + 2 * pad_h - kernel_h) / stride_h + 1,
          (in.w + 2 * pad_w - kernel_w) / stride_w + 1};
}

}  // namespace memweave
