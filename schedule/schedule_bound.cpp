// A lower bound on what any exact schedule of a problem can reach: how far the greedy plan is
// from the best possible, and whether a figure asked of it is reachable in the model at all.
//
// At a step s, every byte live across s but not used by it and over the budget must be away:
//   swapped  its offload crossed the device-to-host link before s started (a persistent
//            tensor before its first use may have left in the previous iteration: no such
//            limit), and its prefetch crosses the host-to-device link after s started (a
//            persistent tensor after its last use need not come back this iteration);
//   dropped  (a rebuildable transient tensor) its producer's forward is replayed at least
//            once, at least at the step's fastest time; one layer rebuilds one tensor.
// A tensor in host memory at s (a staged step's, schedule_use::on_host) is away already: its
// copies are in the steps' times.
// Every second E the iteration is made longer (stalls and replays) lengthens both windows
// by E, so with the link at L bytes/s at most L·(T_before(s) + E) bytes can have left and
// L·(T_after(s) + E) come back; drops within E seconds of replays are at most the fractional
// knapsack of the cheapest-per-byte ones. The least E at which the two reach the overflow
// bounds s; the largest over the steps bounds the iteration.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <vector>

#include "memweave/schedule/memory_schedule.hpp"

namespace memweave {
namespace {

struct drop_item {
  double bytes = 0, seconds = 0;
};

// What may leave the device at one step, by which link it must cross.
struct removable {
  double both = 0;               // transient in a gap: out before the step, back after it
  double in_only = 0;            // persistent before its first use: back after the step
  double out_only = 0;           // persistent after its last use: out before the step
  double free_bytes = 0;         // persistent and never used: may stay on the host
  std::vector<drop_item> drops;  // cheapest per byte first

  double total() const { return both + in_only + out_only + free_bytes; }

  // The most bytes away at the step if the iteration is `extra` seconds longer than its
  // fastest: links of `out_window`/`in_window` + extra seconds, replays within `extra`.
  double most_away(double extra, double out_window, double in_window, double link) const {
    const double out = link * (out_window + extra), in = link * (in_window + extra);
    const double swapped =
        std::min({both + in_only + out_only, in + out_only, out + in_only, in + out}) + free_bytes;
    double dropped = 0, left = extra;
    for (const drop_item& d : drops) {
      if (d.seconds <= left) {
        dropped += d.bytes;
        left -= d.seconds;
      } else {
        dropped += d.bytes * left / d.seconds;
        break;
      }
    }
    return std::min(swapped + dropped, total());
  }
};

// The use of `t` at step `s`, or else the one before it (whose gap holds `s`); null before
// its first use.
const schedule_use* use_at_or_before(const schedule_tensor& t, std::uint32_t s) {
  const auto it =
      std::upper_bound(t.uses.begin(), t.uses.end(), s,
                       [](std::uint32_t x, const schedule_use& u) { return x < u.step; });
  return it == t.uses.begin() ? nullptr : &*std::prev(it);
}

}  // namespace

schedule_bound bound_memory_schedule(const schedule_problem& p) {
  const std::size_t steps = p.step_seconds.size();
  auto has_options = [&](std::size_t s) {
    return s < p.step_options.size() && !p.step_options[s].empty();
  };
  std::vector<double> fastest(steps);
  std::vector<std::size_t> least_extra(steps);
  for (std::size_t s = 0; s < steps; ++s) {
    if (has_options(s)) {
      fastest[s] = p.step_options[s].front().seconds;
      least_extra[s] = p.step_options[s].back().extra_bytes;  // least workspace is last
    } else {
      fastest[s] = p.step_seconds[s];
      least_extra[s] = s < p.step_extra_bytes.size() ? p.step_extra_bytes[s] : 0;
    }
  }
  schedule_bound b;
  for (double x : fastest) b.baseline_seconds += x;
  double before = 0, worst_extra = 0;
  for (std::uint32_t s = 0; s < steps; before += fastest[s], ++s) {
    std::size_t fixed = least_extra[s];
    removable r;
    for (const schedule_tensor& t : p.tensors) {
      if (t.bytes == 0) continue;
      const double bytes = static_cast<double>(t.bytes);
      if (t.uses.empty()) {
        if (t.persistent) r.free_bytes += bytes;
        continue;
      }
      const std::uint32_t first = t.uses.front().step, last = t.uses.back().step;
      if (s < first || s > last) {
        if (t.persistent) (s < first ? r.in_only : r.out_only) += bytes;
        continue;
      }
      const schedule_use* u = use_at_or_before(t, s);
      // In host memory (staged) there, or since a use there: away at no cost to the step.
      if (u->on_host) continue;
      if (u->step == s) {
        fixed += t.bytes;
        continue;
      }
      r.both += bytes;
      if (t.rebuildable && !t.persistent) r.drops.push_back({bytes, t.rebuild_seconds});
    }
    if (fixed > p.budget_bytes) {
      b.feasible = false;
      b.step = s;
      b.overflow_bytes = fixed - p.budget_bytes;
      b.seconds = std::numeric_limits<double>::infinity();
      return b;
    }
    const double over =
        r.total() + static_cast<double>(fixed) - static_cast<double>(p.budget_bytes);
    if (over <= 0) continue;
    std::sort(r.drops.begin(), r.drops.end(), [](const drop_item& x, const drop_item& y) {
      return x.seconds * y.bytes < y.seconds * x.bytes;
    });
    const double after = b.baseline_seconds - before;
    auto enough = [&](double extra) {
      return r.most_away(extra, before, after, p.link_bytes_per_s) >= over;
    };
    if (enough(0)) continue;
    // The links' windows grow with the extra time, so enough time always suffices.
    double lo = 0, hi = std::max(1e-6, b.baseline_seconds);
    while (!enough(hi)) hi *= 2;
    for (int i = 0; i < 60; ++i) {
      const double mid = (lo + hi) / 2;
      (enough(mid) ? hi : lo) = mid;
    }
    if (lo > worst_extra) {
      worst_extra = lo;
      b.step = s;
      b.overflow_bytes = static_cast<std::size_t>(over);
    }
  }
  b.seconds = b.baseline_seconds + worst_extra;
  return b;
}

}  // namespace memweave
