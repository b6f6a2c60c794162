// A pure function of the network's tables; no state.
#include "engine/runtime/recompute_inputs.hpp"

#include <vector>

#include "engine/layers/layer_step.hpp"

namespace memweave {

recompute_graph make_recompute_graph(const network& net, const route& steps,
                                     const tensor_table& table, const layer_memory& memory) {
  // Forward tensors only: layer outputs, labels, auxiliary tensors.
  auto forward_tensor = [&table](tensor_id t) {
    const tensor_info& i = table[t];
    return !i.persistent && i.bytes != 0 &&
           (i.role == tensor_role::data || i.role == tensor_role::auxiliary);
  };
  recompute_graph g;
  for (std::size_t p = 0; p < steps.layer_count(); ++p) {
    const layer& l = net[steps.order()[p]];
    recompute_layer rl;
    rl.id = l.id;
    rl.name = l.name;
    rl.checkpoint = l.cost == cost_class::checkpoint;
    for (const auto& a : table.accesses(p)) {
      if (!forward_tensor(a.tensor)) continue;
      if (a.mode == access_mode::read) {
        rl.forward_reads.push_back(a.tensor);
      } else {
        // Small auxiliary tensors are kept: BN's saved statistics, and DROPOUT's mask,
        // which the backward reuses rather than a regenerated one.
        rl.produces.push_back(
            {a.tensor, table[a.tensor].bytes, table[a.tensor].role == tensor_role::auxiliary});
      }
    }
    for (const auto& a : table.accesses(steps.backward_step(l.id))) {
      if (forward_tensor(a.tensor) && a.mode == access_mode::read) {
        rl.backward_reads.push_back(a.tensor);
      }
    }
    const auto& row = memory.of(l.id);
    rl.forward_bytes = row.forward_bytes;
    rl.backward_bytes = row.backward_bytes;
    std::vector<shape4> in;
    for (layer_id i : l.inputs) in.push_back(net[i].output_shape);
    rl.forward_cost = layers::forward_flops(l, in);
    g.layers.push_back(std::move(rl));
  }
  return g;
}

}  // namespace memweave
