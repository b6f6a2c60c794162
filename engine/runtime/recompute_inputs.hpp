// What the recomputation planner (memweave/recompute) is told about a network: per layer in
// forward route order, whether it is a checkpoint, the forward tensors it reads and
// produces, what its backward step reads, its memory and its forward's cost.
#pragma once

#include "memweave/engine/layer_memory.hpp"
#include "memweave/engine/network.hpp"
#include "memweave/engine/route.hpp"
#include "memweave/engine/tensor_table.hpp"
#include "memweave/recompute/recompute_graph.hpp"

namespace memweave {

/// The recompute graph of `net`'s iteration: forward tensors only (layer outputs, labels,
/// auxiliary tensors), keyed by tensor id; small auxiliary tensors are marked kept.
recompute_graph make_recompute_graph(const network& net, const route& steps,
                                     const tensor_table& table, const layer_memory& memory);

}  // namespace memweave
