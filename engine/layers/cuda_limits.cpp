// Invariants: reads the network only; the first layer out of cuDNN's reach is the error.
#include "engine/layers/cuda_limits.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <variant>

#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"

namespace memweave::layers {

namespace {

// A value as the user wrote it, and where the float under it falls below a bound that its
// short form reaches (cuDNN compares doubles: 0.01f is 0.00999999978), its float32 digits too.
std::string value_text(float v, double bound) {
  std::string text = format_number(v);
  if (static_cast<double>(v) < bound && std::strtod(text.c_str(), nullptr) >= bound) {
    char digits[32];
    std::snprintf(digits, sizeof digits, "%.9g", static_cast<double>(v));
    text += std::string(" (") + digits + " as a float32)";
  }
  return text;
}

}  // namespace

void check_cuda_runs(const network& net) {
  for (const layer& l : net.layers()) {
    if (l.type == layer_type::tiled) {
      throw invalid_argument("layer '" + l.name +
                             "' is a tiled segment (SFT), which runs on the host and null "
                             "devices only; train without --tile on cuda, or on --device host");
    }
    if (l.type != layer_type::lrn) continue;
    const auto& p = std::get<lrn_params>(l.params);
    if (p.size >= k_cudnn_lrn_min_size && p.size <= k_cudnn_lrn_max_size &&
        p.k >= k_cudnn_lrn_min_k && p.beta >= k_cudnn_lrn_min_beta)
      continue;
    throw invalid_argument(
        "layer '" + l.name + "' (LRN): size = " + std::to_string(p.size) +
        ", k = " + value_text(p.k, k_cudnn_lrn_min_k) +
        ", beta = " + value_text(p.beta, k_cudnn_lrn_min_beta) +
        "; cuDNN's LRN, which the cuda device runs, expects a size from " +
        std::to_string(k_cudnn_lrn_min_size) + " to " + std::to_string(k_cudnn_lrn_max_size) +
        ", k >= " + format_number(k_cudnn_lrn_min_k) +
        " and beta >= " + format_number(k_cudnn_lrn_min_beta) +
        "; change the layer, or run on the host device (--device host, MEMWEAVE_DEVICE=host)");
  }
}

}  // namespace memweave::layers
