// The cost model of the null (planning) device: floating-point operations per step. CONV
// and FC count 2 flops per multiply-add; their backward does two such products (data and
// weights). Cheap layers count a few flops per element, which the executor turns into
// time through a bandwidth-like rate. Pure functions.
#include "engine/layers/layer_step.hpp"

namespace memweave::layers {
namespace {

double elements(const std::vector<shape4>& in) noexcept {
  double n = 0;
  for (const auto& s : in) n += static_cast<double>(s.count());
  return n;
}

// The elements adaptive pooling's windows read, summed over its outputs: the product of
// the window lengths' sums along each axis (windows overlap by at most one row or column).
double adaptive_window_elements(const shape4& in, const pool_params& p) noexcept {
  auto axis = [](std::int64_t length, std::int64_t out) {
    double sum = 0;
    for (std::int64_t i = 0; i < out; ++i)
      sum += static_cast<double>(adaptive_end(i, length, out) - adaptive_begin(i, length, out));
    return sum;
  };
  return static_cast<double>(in.n * in.c) * axis(in.h, p.adaptive_h) * axis(in.w, p.adaptive_w);
}

}  // namespace

double forward_flops(const layer& l, const std::vector<shape4>& in) noexcept {
  const double out = static_cast<double>(l.output_shape.count());
  switch (l.type) {
    case layer_type::conv: {
      const auto& p = std::get<conv_params>(l.params);
      const double per_output =
          static_cast<double>(in.at(0).c / p.groups) * static_cast<double>(p.kernel_h * p.kernel_w);
      return 2.0 * out * per_output;
    }
    case layer_type::fc:
      return 2.0 * out * static_cast<double>(in.at(0).per_image());
    case layer_type::pool: {
      const auto& p = std::get<pool_params>(l.params);
      if (p.adaptive()) return adaptive_window_elements(in.at(0), p);
      return p.global ? elements(in) : out * static_cast<double>(p.kernel_h * p.kernel_w);
    }
    case layer_type::lrn:
      return out * static_cast<double>(std::get<lrn_params>(l.params).size + 4);
    case layer_type::bn:
      return 8.0 * out;
    case layer_type::softmax_loss:
      return 4.0 * out;
    case layer_type::data:
      return 0.0;
    case layer_type::tiled:
      return std::get<tiled_params>(l.params).forward_flops;
    default:
      return elements(in) + out;
  }
}

double backward_flops(const layer& l, const std::vector<shape4>& in) noexcept {
  if (l.type == layer_type::data) return 0.0;
  if (l.type == layer_type::tiled) return std::get<tiled_params>(l.params).backward_flops;
  return 2.0 * forward_flops(l, in);
}

}  // namespace memweave::layers
