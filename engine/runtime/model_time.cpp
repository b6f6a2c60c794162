// Pure arithmetic over the network's shapes; no state, callable from any thread.
#include "engine/runtime/model_time.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/layers/layer_step.hpp"
#include "memweave/engine/split_plan.hpp"

namespace memweave {

namespace {

// The kernels' compute alone: the step's flops at the model's rate.
double compute_seconds(const cost_model& model, const network& net, const layer& l, bool forward) {
  std::vector<shape4> in;
  for (layer_id i : l.inputs) in.push_back(net[i].output_shape);
  return (forward ? layers::forward_flops(l, in) : layers::backward_flops(l, in)) / model.flops;
}

}  // namespace

double model_seconds(const cost_model& model, const network& net, const layer_memory& memory,
                     const layer& l, bool forward, double compute_s) {
  if (compute_s < 0) compute_s = compute_seconds(model, net, l, forward);
  const auto& row = memory.of(l.id);
  const double bytes = static_cast<double>(forward ? row.forward_bytes : row.backward_bytes);
  double link_s = 0;
  if (l.type == layer_type::tiled && net.batch_on_host()) {
    // The tiles of the batch cross the link as they are fetched (the forward, and the
    // backward's recompute), overlapping the tiles before them.
    link_s = static_cast<double>(std::get<tiled_params>(l.params).input_tile_bytes) /
             model.link_bytes_per_s;
  }
  return std::max({compute_s, bytes / model.memory_bytes_per_s, link_s});
}

double split_model_seconds(const cost_model& model, const tensor_table& table,
                           const layer_memory& memory, const layer& l, bool forward,
                           std::span<const tensor_access> accesses, int parts, int channel_parts,
                           double compute_s) {
  const network& net = table.net();
  const std::int64_t batch = net[net.data_layer()].output_shape.n;
  const std::int64_t micro_batches =
      std::clamp<std::int64_t>(parts, 1, std::max<std::int64_t>(batch, 1));
  const std::int64_t groups = std::clamp<std::int64_t>(channel_parts, 1, splittable_channels(l));
  if (micro_batches * groups <= 1) return model_seconds(model, net, memory, l, forward, compute_s);
  // The flops once, for the whole step and its micro-steps.
  if (compute_s < 0) compute_s = compute_seconds(model, net, l, forward);
  const double whole = model_seconds(model, net, memory, l, forward, compute_s);
  const std::size_t micro = micro_step_bytes(table, l, accesses, parts, 1, channel_parts);
  return std::max(whole, micro_steps_seconds(model, compute_s, micro, micro_batches * groups));
}

}  // namespace memweave
