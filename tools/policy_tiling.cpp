#include "policy_tiling.hpp"

#include <algorithm>
#include <cmath>

#include "memweave/engine/layer_memory.hpp"
#include "memweave/engine/route.hpp"
#include "memweave/engine/tensor_table.hpp"
#include "stop_signal.hpp"

namespace memweave {
namespace {

bool same_segments(std::span<const tiled_segment_choice> a,
                   std::span<const tiled_segment_choice> b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const tiled_segment_choice& x, const tiled_segment_choice& y) {
                      return x.members == y.members && x.tiles_h == y.tiles_h &&
                             x.tiles_w == y.tiles_w;
                    });
}

}  // namespace

tiling_ladder::tiling_ladder(const network& untiled, const network_run_options& o)
    : untiled_(untiled), o_(o) {
  const route steps(untiled);
  const tensor_table table(untiled, steps);
  max_layer_bytes_ = layer_memory(table).max_layer_bytes();
}

const tiling_ladder::rung* tiling_ladder::at(std::size_t k) {
  const std::size_t block = heap_block_of(o_);
  while (!ended_ && rungs_.size() <= k) {
    // Half an octave below the last: max(l_i) / 2^((k + 1) / 2), in whole blocks.
    const double scale = std::exp2(-0.5 * static_cast<double>(rungs_.size() + 1));
    const auto target =
        static_cast<std::size_t>(static_cast<double>(max_layer_bytes_) * scale) / block * block;
    if (target < block) {
      ended_ = true;
      break;
    }
    network_run_options at = o_;
    at.budget_bytes = target;
    rung r;
    r.target = target;
    try {
      r.net = tile_if_asked(untiled_, at, &r.segments, false);
    } catch (const budget_too_small&) {
      ended_ = true;  // a layer's finest tile is over it: no finer rung tiles either
      break;
    }
    rungs_.push_back(std::move(r));
  }
  return k < rungs_.size() ? &rungs_[k] : nullptr;
}

std::optional<policy_tiling> retile_for_policy(
    tiling_ladder& ladder, const network_run_options& o, const std::string& policy,
    std::span<const tiled_segment_choice> budget_segments, int* probes) {
  if (!o.tile || o.budget_bytes == 0) return std::nullopt;
  const device_options dev = planning_device(o, o.budget_bytes);
  // The last rung that did not fit (a copy: the ladder's rungs move as it grows).
  std::vector<tiled_segment_choice> failed;
  for (std::size_t k = 0;; ++k) {
    const tiling_ladder::rung* r = ladder.at(k);
    if (r == nullptr) return std::nullopt;
    if (r->target >= o.budget_bytes) continue;  // coarser than the budget's own
    if (same_segments(r->segments, failed) || same_segments(r->segments, budget_segments)) {
      continue;  // the same plan, which did not fit
    }
    if (probes != nullptr) ++*probes;
    if (plan_fits_budget(r->net, o, policy, dev)) {
      return policy_tiling{r->net, r->segments, r->target};
    }
    failed = r->segments;
  }
}

bool plan_fits_budget_tiled(const network& untiled, const network_run_options& o,
                            const std::string& policy, const device_options& dev,
                            tiling_ladder* ladder, int* probes) {
  if (!o.tile) return plan_fits_budget(untiled, o, policy, dev);
  std::vector<tiled_segment_choice> segments;
  const network tiled = tile_if_asked(untiled, o, &segments);
  if (plan_fits_budget(tiled, o, policy, dev)) return true;
  std::optional<tiling_ladder> own;
  if (ladder == nullptr) ladder = &own.emplace(untiled, o);
  return retile_for_policy(*ladder, o, policy, segments, probes).has_value();
}

}  // namespace memweave
