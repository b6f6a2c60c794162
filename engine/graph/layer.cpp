// Per-type facts about layers: cost class, backward needs, parameter counts. Pure functions
// of the type and parameters; no state, thread-safe.
#include "memweave/engine/layer.hpp"

namespace memweave {

const char* to_string(cost_class c) noexcept {
  return c == cost_class::checkpoint ? "checkpoint" : "cheap";
}

cost_class cost_class_of(layer_type type) noexcept {
  switch (type) {
    case layer_type::data:
    case layer_type::conv:
    case layer_type::fc:
    case layer_type::tiled:  // a whole segment, redone tile by tile: never replayed
      return cost_class::checkpoint;
    default:
      return cost_class::cheap;
  }
}

backward_reads backward_reads_of(layer_type type, const layer_params& params) noexcept {
  backward_reads r;
  switch (type) {
    case layer_type::data:
      r.output_grad = false;  // DATA has no backward work
      break;
    case layer_type::conv:
    case layer_type::fc:
      // dx = W^T dy needs W; dW = dy x^T needs x; db needs dy only.
      r.input_data = true;
      r.weights = true;
      break;
    case layer_type::pool: {
      const auto* p = std::get_if<pool_params>(&params);
      // Max pooling routes dy to the argmax, found again from x and y (as cuDNN does);
      // average pooling spreads dy evenly and needs only the shapes.
      if (p == nullptr || p->mode == pool_mode::max) {
        r.input_data = true;
        r.output_data = true;
      }
      break;
    }
    case layer_type::act:
      // relu'(x) = [y > 0], tanh'(x) = 1 - y^2: y suffices.
      r.output_data = true;
      break;
    case layer_type::bn:
      // dx needs x (or x-hat), the batch mean and inverse std, and gamma.
      r.input_data = true;
      r.aux = true;
      r.weights = true;
      break;
    case layer_type::lrn:
      r.input_data = true;
      r.output_data = true;
      break;
    case layer_type::dropout:
      r.aux = true;  // dx = dy * mask
      break;
    case layer_type::softmax_loss:
      // dx = (y - onehot(labels)) / n; there is no incoming gradient.
      r.output_grad = false;
      r.output_data = true;
      r.labels = true;
      break;
    case layer_type::concat:
    case layer_type::add:
      break;  // slices / copies of dy
    case layer_type::tiled:
      // Each tile's forward is recomputed from the segment's input; its members' weights
      // and BN statistics (aux) are read. The output is not: the recompute gives it again.
      r.input_data = true;
      r.weights = true;
      r.aux = true;
      break;
  }
  return r;
}

std::int64_t layer::parameter_count() const noexcept {
  std::int64_t n = 0;
  for (const auto& p : param_tensors)
    if (p.trained) n += p.shape.count();
  return n;
}

std::int64_t layer::state_count() const noexcept {
  std::int64_t n = 0;
  for (const auto& p : param_tensors)
    if (!p.trained) n += p.shape.count();
  return n;
}

}  // namespace memweave
