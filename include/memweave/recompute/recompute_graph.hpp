// What the recomputation planner knows of a training iteration: plain data, no engine types.
//
// The caller (the engine) lists its layers in forward route order; the backward pass runs
// them in the reverse order, one step per layer (the engine's route: step s < N is the
// forward of layer s, step 2N-1-s its backward). For each layer it gives the forward tensors
// the layer's forward step reads and writes, the forward tensors its backward step reads,
// its memory l_i^f and l_i^b (the engine's layer_memory) and a forward cost. Tensors are
// named by caller-chosen keys (the engine's tensor ids); only forward tensors appear here
// (outputs, auxiliary tensors, labels): gradients, parameters and workspaces are inside
// l_i^f / l_i^b and are not the planner's business.
//
// A "forward tensor" is written by exactly one layer's forward step. The planner drops the
// ones written by cheap (non-checkpoint) layers after their last forward use and rebuilds
// them by re-running forwards before the backward steps that read them, so a layer marked
// cheap must have a forward that can be re-run and gives the same values (see
// recompute_plan.hpp, "Replay contract"); mark `keep` a tensor the replay cannot reproduce
// or that is cheaper to keep than to rebuild.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace memweave {

/// A forward tensor's name, chosen by the caller (the engine uses its tensor_id). Unique in
/// a graph.
using recompute_key = std::uint64_t;

/// A forward tensor a layer's forward step writes.
struct recompute_tensor {
  recompute_key key = 0;  ///< unique in the graph
  std::size_t bytes = 0;  ///< its size
  bool keep = false;      ///< never dropped, even when its layer is cheap (e.g. a small BN
                          ///< statistic, or a tensor a replay could not reproduce exactly)
};

/// One layer, in forward route order.
struct recompute_layer {
  std::uint64_t id = 0;  ///< the caller's id (engine: layer_id), echoed in messages
  std::string name;      ///< for messages and recompute_plan::describe()
  /// Compute-heavy (CONV, FC, DATA; the paper's checkpoints): never re-run, its forward
  /// tensors kept until their last use (resident or offloaded by the tensor pool). False:
  /// cheap to re-run (POOL, ACT, BN, LRN, DROPOUT, CONCAT, ADD, SOFTMAX). A caller may mark
  /// a cheap layer (a fan or a join) as a checkpoint where keeping its output is cheaper.
  bool checkpoint = false;
  /// Forward tensors its forward step reads (inputs' outputs, labels): each written by an
  /// EARLIER layer of the graph.
  std::vector<recompute_key> forward_reads;
  /// Forward tensors its forward step writes (output, auxiliary tensors, labels).
  std::vector<recompute_tensor> produces;
  /// Forward tensors its backward step reads (its x, its y, its aux, the labels): each
  /// written by some layer of the graph. Duplicates are ignored.
  std::vector<recompute_key> backward_reads;
  std::size_t forward_bytes = 0;   ///< l_i^f: every byte its forward step touches
  std::size_t backward_bytes = 0;  ///< l_i^b: every byte its backward step touches
  double forward_cost = 1.0;       ///< cost of one forward (flops, seconds; >= 0, finite)
};

/// A training iteration as the planner sees it.
struct recompute_graph {
  std::vector<recompute_layer> layers;  ///< forward route order (a topological order)
};

}  // namespace memweave
