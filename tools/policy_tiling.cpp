#include "policy_tiling.hpp"

#include <algorithm>

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

std::optional<policy_tiling> retile_for_policy(
    const network& untiled, const network_run_options& o, const std::string& policy,
    std::span<const tiled_segment_choice> budget_segments) {
  if (!o.tile || o.budget_bytes == 0) return std::nullopt;
  const std::size_t block = heap_block_of(o);
  const device_options dev = planning_device(o, o.budget_bytes);
  int probes = 0;
  // A target's tiling (nullopt: a layer's finest tile is over it), and whether the policy fits
  // the budget with it. A tiling equal to the last that did not fit is not planned again.
  struct tried {
    std::size_t target = 0;
    std::vector<tiled_segment_choice> segments;
    std::optional<network> net;
  };
  const auto tile_for = [&](std::size_t target) {
    tried t;
    t.target = target;
    network_run_options at = o;
    at.budget_bytes = target;
    try {
      t.net.emplace(tile_if_asked(untiled, at, &t.segments, false));
    } catch (const budget_too_small&) {
    }
    return t;
  };
  const auto fits = [&](const tried& t) {
    ++probes;
    return plan_fits_budget(*t.net, o, policy, dev);
  };
  const auto round_down = [&](std::size_t bytes) { return bytes / block * block; };
  // Halving: `bad` the last target that did not fit (the budget's own to begin with).
  tried bad;
  bad.target = o.budget_bytes;
  bad.segments.assign(budget_segments.begin(), budget_segments.end());
  std::optional<tried> good;
  for (std::size_t target = round_down(o.budget_bytes / 2); target >= block;
       target = round_down(target / 2)) {
    tried t = tile_for(target);
    if (!t.net) break;  // tiled no finer than that: no smaller target plans
    if (!same_segments(t.segments, bad.segments) && fits(t)) {
      good = std::move(t);
      break;
    }
    bad = std::move(t);
  }
  if (!good) return std::nullopt;
  // Bisection to 1/32 of the target (each try is a tiling plan and a run of the planner).
  while (bad.target - good->target > std::max(block, good->target / 32)) {
    const std::size_t mid = round_down(good->target + (bad.target - good->target) / 2);
    if (mid <= good->target) break;
    tried t = tile_for(mid);
    if (!t.net) {
      bad = std::move(t);
    } else if (same_segments(t.segments, good->segments)) {
      good = std::move(t);  // the same tiling, which fits, for a larger target
    } else if (!same_segments(t.segments, bad.segments) && fits(t)) {
      good = std::move(t);
    } else {
      bad = std::move(t);
    }
  }
  return policy_tiling{std::move(*good->net), std::move(good->segments), good->target, probes};
}

bool plan_fits_budget_tiled(const network& untiled, const network_run_options& o,
                            const std::string& policy, const device_options& dev) {
  if (!o.tile) return plan_fits_budget(untiled, o, policy, dev);
  std::vector<tiled_segment_choice> segments;
  const network tiled = tile_if_asked(untiled, o, &segments);
  if (plan_fits_budget(tiled, o, policy, dev)) return true;
  return retile_for_policy(untiled, o, policy, segments).has_value();
}

}  // namespace memweave
