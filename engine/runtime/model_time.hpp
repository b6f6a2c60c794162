// The cost model's time for one layer kernel: what the null device charges a step, and what
// the memory schedule plans each step to take, whatever the device.
#pragma once

#include "memweave/engine/cost_model.hpp"
#include "memweave/engine/layer.hpp"
#include "memweave/engine/layer_memory.hpp"
#include "memweave/engine/network.hpp"

namespace memweave {

/// The time of layer `l`'s forward or backward kernel of `net` under `model`: the larger of
/// its compute (its flops at the model's rate, or `compute_s` when given: a CONV's chosen
/// algorithms) and its memory traffic (the step's bytes in `memory`).
double model_seconds(const cost_model& model, const network& net, const layer_memory& memory,
                     const layer& l, bool forward, double compute_s = -1);

}  // namespace memweave
