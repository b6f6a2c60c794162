// --tile for one policy. The budget chooses which layers tile: those whose own step is over it
// (tiling_plan.hpp). That alone made fitting depend on the budget backwards: a policy's floor
// is more than its largest step (liveness keeps every live tensor), so at a budget just under
// that floor too few layers tiled, while a smaller budget tiled more of them and ran (a
// hostile run's DenseNet-like model ran at 600 KiB and not at 1000 KiB-4.9 MiB; ResNet-14 at
// 256 px under liveness needed 10.6 MiB when tiled for 3 MiB, and 28.6 MiB when tiled for
// 11 MiB). So a policy that does not fit with the budget's segments runs tiled for a smaller
// target, the largest of a fixed ladder of targets with which it fits the budget: the fewest,
// coarsest tiles that make it, as TSPLIT chooses the fewest splits. The ladder does not depend
// on the budget, so a budget that runs on one of its rungs runs on it at any larger budget too
// (fitting a fixed network grows with the budget), and a search's probes share its plans.
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

/// `untiled` tiled for a ladder of targets half an octave apart: max(l_i)/sqrt(2), max(l_i)/2,
/// ... (rounded down to heap blocks), down to the last that tiles (a layer's finest tile over
/// the next). Each rung is planned once, when first asked (a tiling plan of ResNet-50 at 224 px
/// takes seconds). `untiled` and `o` must outlive it.
class tiling_ladder {
 public:
  struct rung {
    std::size_t target = 0;  ///< the layers whose own step is over it tile, each within it
    network net;
    std::vector<tiled_segment_choice> segments;
  };
  tiling_ladder(const network& untiled, const network_run_options& o);
  /// Rung k (0: the coarsest); nullptr past the last.
  const rung* at(std::size_t k);

 private:
  const network& untiled_;
  const network_run_options& o_;
  std::size_t max_layer_bytes_ = 0;
  std::vector<rung> rungs_;
  bool ended_ = false;
};

/// The network a policy runs tiled for a target below the budget.
struct policy_tiling {
  network net;
  std::vector<tiled_segment_choice> segments;
  std::size_t target_bytes = 0;  ///< the layers over it tiled, each step within it
};

/// With o.tile: where `policy` does not fit o.budget_bytes with `budget_segments` (the budget's
/// own tiling), the coarsest rung of `ladder` below the budget with which it fits, on the null
/// device (planning_device); rungs that tile as the budget's segments or as the rung before
/// do are not run again. nullopt when none fits. A stop asked (Ctrl-C) throws
/// stopped_by_signal. `*probes`, where given, counts the planner runs.
std::optional<policy_tiling> retile_for_policy(
    tiling_ladder& ladder, const network_run_options& o, const std::string& policy,
    std::span<const tiled_segment_choice> budget_segments, int* probes = nullptr);

/// A search's probe: whether `policy` fits o.budget_bytes with `untiled`, which under o.tile is
/// cut into the budget's tiled segments first, and retiled on `ladder` (made here where null)
/// where the policy does not fit with those. Throws budget_too_small where the budget's tiling
/// does not plan. `*probes`, where given, counts the planner runs beyond the first.
bool plan_fits_budget_tiled(const network& untiled, const network_run_options& o,
                            const std::string& policy, const device_options& dev,
                            tiling_ladder* ladder = nullptr, int* probes = nullptr);

}  // namespace memweave
