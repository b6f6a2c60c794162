// Pure arithmetic over the network's shapes; no state, callable from any thread.
#include "engine/runtime/model_time.hpp"

#include <algorithm>
#include <vector>

#include "engine/layers/layer_step.hpp"

namespace memweave {

double model_seconds(const cost_model& model, const network& net, const layer_memory& memory,
                     const layer& l, bool forward, double compute_s) {
  if (compute_s < 0) {
    std::vector<shape4> in;
    for (layer_id i : l.inputs) in.push_back(net[i].output_shape);
    compute_s =
        (forward ? layers::forward_flops(l, in) : layers::backward_flops(l, in)) / model.flops;
  }
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

}  // namespace memweave
