// `memweave plan --split`: TSPLIT's split planner over a network: per step how many
// micro-batches it runs in at --budget, the floor (the largest micro-step at one image, not
// max(l_i)) and the model's time; with --max-batch, the largest batch the executor trains.
#pragma once

#include <ostream>

#include "network_run.hpp"

namespace memweave {

/// Prints the split plan of `net` at o.budget_bytes (micro-batches per step, what the executor
/// runs; the floor with CONV/FC channel groups apart); 1 when the budget is below the floor.
int plan_split(const network& net, const network_run_options& o, std::ostream& out);

/// The largest batch that `all` trains within o.budget_bytes with --split (the executor on
/// the null device: split steps staged, host memory within the host pool).
int plan_split_largest(network_run_options o, std::ostream& out);

}  // namespace memweave
