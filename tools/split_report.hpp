// `memweave plan --split`: TSPLIT's split planner (first stage) over a zoo network: per step
// how many micro-batches it runs in at --budget, the floor (the largest micro-step at one
// image, not max(l_i)) and the model's time; with --max-batch, the largest batch it plans.
#pragma once

#include <ostream>

#include "network_run.hpp"

namespace memweave {

/// Prints the split plan of o.net at o.budget_bytes; 1 when the budget is below the floor.
int plan_split(const network_run_options& o, std::ostream& out);

/// The largest batch whose split plan fits o.budget_bytes and whose memory schedule (`all`)
/// fits once the split steps' other slices are counted in the host pool.
int plan_split_largest(const network_run_options& o, std::ostream& out);

}  // namespace memweave
