// `memweave plan --min-budget`: the smallest budget, per policy, in which the executor on
// the null device runs one training iteration of the network at --batch (with --split or
// --tile, the split or tiled plan made for each budget tried; under --tile a policy that does
// not fit the budget's tiles is tiled finer, as a single run at that budget is). The floor a budget
// below the least is refused with (check_budget, the split and tiling planners) is a lower bound:
// the tensors of the most demanding step alone, while the heap must also find them room among what
// else is live, and a policy that cannot evict holds every live tensor there. This search answers
// with a budget that runs: found by doubling from one heap block, then bisection to one block, it
// fits and one block less does not. Fitting is not strictly monotonic in the budget (fragmentation,
// the schedule's choices), so a smaller budget the search did not try may also run.
#pragma once

#include <ostream>

#include "network_run.hpp"

namespace memweave {

/// Runs the search for every policy of `o` (no --budget given). Prints one line per policy;
/// returns 0 when some policy runs within the largest budget (k_max_budget), else 1.
int plan_min_budget(network_run_options o, std::ostream& out);

}  // namespace memweave
