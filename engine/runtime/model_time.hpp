// The cost model's time for one layer kernel: what the null device charges a step, and what
// the memory schedule plans each step to take, whatever the device.
#pragma once

#include "memweave/engine/cost_model.hpp"
#include "memweave/engine/layer.hpp"
#include "memweave/engine/layer_memory.hpp"
#include "memweave/engine/network.hpp"
#include "memweave/engine/tensor_table.hpp"

#include <span>

namespace memweave {

/// The time of layer `l`'s forward or backward kernel of `net` under `model`: the larger of
/// its compute (its flops at the model's rate, or `compute_s` when given: a CONV's chosen
/// algorithms) and its memory traffic (the step's bytes in `memory`).
double model_seconds(const cost_model& model, const network& net, const layer_memory& memory,
                     const layer& l, bool forward, double compute_s = -1);

/// The same step run in `parts` micro-batches of `channel_parts` output-channel groups each
/// (TSPLIT; clamped to the batch and to the layer's channels, as the split steps run them):
/// the larger of model_seconds and micro_steps_seconds over its micro-step's working set
/// (`accesses`: the step's, or a replayed forward's), so that a split costs what its smaller
/// kernels lose. model_seconds where neither splits.
double split_model_seconds(const cost_model& model, const tensor_table& table,
                           const layer_memory& memory, const layer& l, bool forward,
                           std::span<const tensor_access> accesses, int parts, int channel_parts,
                           double compute_s = -1);

}  // namespace memweave
