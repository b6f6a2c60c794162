// --tile for one policy. The budget chooses which layers tile: those whose own step is over it
// (tiling_plan.hpp). That alone made fitting depend on the budget backwards: a policy's floor
// is more than its largest step (liveness keeps every live tensor), so at a budget just under
// that floor too few layers tiled, while a smaller budget tiled more of them and ran (a
// hostile run's DenseNet-like model ran at 600 KiB and not at 1000 KiB-4.9 MiB; ResNet-14 at
// 256 px under liveness needed 10.6 MiB when tiled for 3 MiB, and 28.6 MiB when tiled for
// 11 MiB). So a policy that does not fit with the budget's segments is tiled for a smaller
// target, the largest one found at which it fits the budget: the fewest, coarsest tiles that
// make the budget, as TSPLIT chooses the fewest splits.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "memweave/engine/network.hpp"
#include "memweave/engine/tiling_plan.hpp"
#include "network_run.hpp"

namespace memweave {

/// The network a policy runs tiled for a target below the budget.
struct policy_tiling {
  network net;
  std::vector<tiled_segment_choice> segments;
  std::size_t target_bytes = 0;  ///< the layers over it tiled, each step within it
  int probes = 0;                ///< planner runs the search took
};

/// With o.tile: where `policy` does not fit o.budget_bytes with `budget_segments` (the budget's
/// own tiling of `untiled`), the tiling of `untiled` for the largest target below the budget
/// with which it fits, on the null device (planning_device): targets halved from the budget
/// until one fits or no tiling exists (a layer's finest tile over it), then bisected to 1/32
/// between it and the last that did not. Tilings equal to one already tried are not planned
/// again. nullopt when none fits. A stop asked (Ctrl-C) throws stopped_by_signal.
std::optional<policy_tiling> retile_for_policy(
    const network& untiled, const network_run_options& o, const std::string& policy,
    std::span<const tiled_segment_choice> budget_segments);

/// A search's probe: whether `policy` fits o.budget_bytes with `untiled`, which under o.tile is
/// cut into the budget's tiled segments first, and retiled as above where the policy does not
/// fit with those. Throws budget_too_small where the budget's tiling does not plan.
bool plan_fits_budget_tiled(const network& untiled, const network_run_options& o,
                            const std::string& policy, const device_options& dev);

}  // namespace memweave
