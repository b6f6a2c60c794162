// A lower bound on what any exact schedule of a problem can reach: how far the greedy plan is
// from the best possible, and whether a figure asked of it is reachable in the model at all.
//
// At a step s, every byte live across s but not used by it and over the budget must be away:
//   swapped  its offload crossed the device-to-host link after the tensor was last written
//            and before s started (a persistent tensor before its first use may have left in
//            the previous iteration: no such limit), and its prefetch crosses the
//            host-to-device link after s started and before its next use starts (a
//            persistent tensor after its last use need not come back this iteration);
//   dropped  (a rebuildable transient tensor) a replay rebuilds it at least once, taking at
//            least the least time any rebuild of it takes (its producer's forward at the
//            step's fastest, or a fused CONV+ACT replay's CONV alone); one replay rebuilds
//            one tensor.
// A copy moves the tensor's own bytes (schedule_tensor::copy_bytes), and frees its
// heap-rounded ones.
// A tensor in host memory at s (a staged step's, schedule_use::on_host) is away already: its
// copies are in the steps' times.
// The iteration is made E seconds longer (stalls, replays, slower steps): B of them before s
// starts, A = E - B after. The B seconds widen the windows of the copies out (between a
// write before s and s), the A seconds those of the copies back (between s and a use after
// it); a persistent tensor written in the iteration before leaves in a window that spans
// the iteration's end, which all E may widen. Each link is one machine serving copies with
// release times (out) or deadlines (in), so what it can carry is bounded by its cuts (min
// over θ: the bytes released before θ, plus L·(the window left after θ); mirrored for
// deadlines): a tensor written just before s cannot leave in time however idle the link was
// earlier. A tensor dropped across s is rebuilt after s, before its next use: drops within
// the A seconds are at most the fractional knapsack of the cheapest-per-byte ones. So a
// replay's second does not also widen the copies out before s. The least E at which some
// split of it covers the overflow bounds s; the largest over the steps bounds the iteration.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <utility>
#include <variant>
#include <vector>

#include "memweave/schedule/memory_schedule.hpp"
#include "recent_plans.hpp"

namespace memweave {
namespace {

// How closely (and in how many trials at most) the extra time's split into before and after
// a step is searched, and the least extra time a step needs (relative to it): where the
// searches stop short, the bound is a little lower than it could be, never higher.
constexpr double k_split_precision = 1e-5;
constexpr int k_split_trials = 400;
constexpr double k_extra_precision = 1e-6;
constexpr double k_extra_floor_seconds = 1e-12;

struct drop_item {
  double bytes = 0, seconds = 0;
};

// Copies one link must carry for a step, each within a window that one end of fixes: its
// release (the tensor's last write, for the way out) or its deadline (its next use, for the
// way back), the other end being the step's start, which extra seconds move away.
struct link_jobs {
  // (seconds from the step's start to the fixed end, bytes): for the way out, how long
  // before the step the tensor was last written; for the way back, how long after the step's
  // start it is next used. `near`: windows on the step's side of the iteration, widened by
  // the extra seconds on that side; `spanning`: windows across the iteration's end, widened
  // by all of them. Each sorted nearest first by prepare().
  // The bytes are the copies' (unrounded); `pad`, what the jobs' tensors hold beyond them on
  // the device (heap rounding): whichever of them cross, they free at most all of it more.
  std::vector<std::pair<double, double>> near, spanning;
  double bytes = 0, pad = 0;

  void add(double window, double copied, double held, bool spans = false) {
    (spans ? spanning : near).emplace_back(std::max(0.0, window), copied);
    bytes += copied;
    pad += std::max(0.0, held - copied);
  }

  void prepare() {
    std::sort(near.begin(), near.end());
    std::sort(spanning.begin(), spanning.end());
  }

  // The most device bytes the link can free at `link` bytes/s with the near windows `side`
  // seconds wider and the spanning ones `whole`: the least cut, min over each job j of (the
  // bytes of the jobs after it in order of widened window, which may all fit, plus what the
  // link carries in j's window), and all the bytes; plus every job's pad. The two lists merge
  // in that order.
  double most(double side, double whole, double link) const {
    double m = bytes, before = 0;
    std::size_t i = 0, j = 0;
    while (i < near.size() || j < spanning.size()) {
      const bool take_near = j == spanning.size() ||
                             (i < near.size() && near[i].first + side <= spanning[j].first + whole);
      const auto& [window, b] = take_near ? near[i++] : spanning[j++];
      before += b;
      // Clamped: `before` adds the same bytes in another order, and may pass `bytes` by
      // a rounding.
      m = std::min(m, std::max(0.0, bytes - before) + link * (window + (take_near ? side : whole)));
    }
    return m + pad;
  }
};

// What may leave the device at one step, by which link it must cross.
struct removable {
  double both = 0;               // transient in a gap: out before the step, back after it
  double in_only = 0;            // persistent before its first use: back after the step
  double out_only = 0;           // persistent after its last use: out before the step
  double free_bytes = 0;         // persistent and never used: may stay on the host
  link_jobs out, in;             // out: both and out_only; in: both and in_only
  std::vector<drop_item> drops;  // cheapest per byte first, after prepare()
  // The seconds and bytes of the drops before each (drops.size() + 1 entries): the fractional
  // knapsack of `after` seconds in a binary search, not a walk, for each of enough's trials.
  std::vector<double> drop_seconds_before, drop_bytes_before;

  double total() const { return both + in_only + out_only + free_bytes; }

  void prepare() {
    std::sort(drops.begin(), drops.end(), [](const drop_item& x, const drop_item& y) {
      return x.seconds * y.bytes < y.seconds * x.bytes;
    });
    drop_seconds_before.assign(1, 0.0);
    drop_bytes_before.assign(1, 0.0);
    for (const drop_item& d : drops) {
      drop_seconds_before.push_back(drop_seconds_before.back() + d.seconds);
      drop_bytes_before.push_back(drop_bytes_before.back() + d.bytes);
    }
    out.prepare();
    in.prepare();
  }

  // The most bytes replays of `seconds` can drop: the cheapest whole, then part of the next.
  double dropped_within(double seconds) const {
    const auto whole = static_cast<std::size_t>(
        std::upper_bound(drop_seconds_before.begin(), drop_seconds_before.end(), seconds) -
        drop_seconds_before.begin() - 1);
    double dropped = drop_bytes_before[whole];
    if (whole < drops.size()) {
      dropped += drops[whole].bytes * (seconds - drop_seconds_before[whole]) / drops[whole].seconds;
    }
    return dropped;
  }

  // The most bytes away at the step if the iteration is `extra` seconds longer, at most
  // `before` of them up to the step's start and at most `after` from there: what each link
  // carries in its windows so widened, replays within `after`.
  double most_away(double before, double after, double extra, double link) const {
    const double o = out.most(before, extra, link);
    const double i = in.most(after, extra, link);
    const double swapped =
        std::min({both + in_only + out_only, i + out_only, o + in_only, i + o}) + free_bytes;
    return std::min(swapped + dropped_within(after), total());
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

// The last step at or before `u` (a use of `t`) that writes it: a copy out can start only
// once that step is done. A transient tensor's first use writes it (it is born there); a
// persistent one never written: none (k_unwritten).
constexpr std::uint32_t k_unwritten = std::numeric_limits<std::uint32_t>::max();
std::uint32_t last_write(const schedule_tensor& t, const schedule_use* u) {
  for (const schedule_use* w = u;; --w) {
    if (w->writes) return w->step;
    if (w == t.uses.data()) return t.persistent ? k_unwritten : w->step;
  }
}

// Per step, the device bytes the bound counts there (what must be away or may stay: every
// tensor live across or used by the step but those in host memory since a staged use, every
// persistent one, the step's least workspace), by a sweep over the uses: where it is within
// the budget the step cannot bound anything, and is not looked at tensor by tensor. Without
// it every step walked every tensor: a 20,000-layer chain planned `all` in 9 s, 68 % of it
// here, at a budget nothing came near (session 42's hostile run).
std::vector<std::size_t> counted_bytes(const schedule_problem& p,
                                       const std::vector<std::size_t>& least_extra) {
  const std::size_t steps = least_extra.size();
  std::vector<std::size_t> add(steps + 1, 0), remove(steps + 1, 0);
  std::size_t everywhere = 0;
  for (const schedule_tensor& t : p.tensors) {
    if (t.bytes == 0) continue;
    if (t.uses.empty()) {
      if (t.persistent) everywhere += t.bytes;
      continue;
    }
    const std::uint32_t first = t.uses.front().step, last = t.uses.back().step;
    if (t.persistent) {
      everywhere += t.bytes;
    } else if (first < steps) {
      add[first] += t.bytes;
      remove[std::min<std::size_t>(last, steps - 1) + 1] += t.bytes;
    }
    // From a use in host memory to the next use (the last one: itself only), not counted.
    for (std::size_t i = 0; i < t.uses.size(); ++i) {
      if (!t.uses[i].on_host || t.uses[i].step >= steps) continue;
      const std::size_t end = i + 1 < t.uses.size() ? t.uses[i + 1].step : t.uses[i].step + 1;
      remove[t.uses[i].step] += t.bytes;
      add[std::min(end, steps)] += t.bytes;
    }
  }
  std::vector<std::size_t> bytes(steps);
  std::size_t live = everywhere;
  for (std::size_t s = 0; s < steps; ++s) {
    live = live + add[s] - remove[s];
    bytes[s] = live + least_extra[s];
  }
  return bytes;
}

schedule_bound bound_problem(const schedule_problem& p) {
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
  std::vector<double> start(steps + 1, 0);  // each step's start with every step at its fastest
  for (std::size_t s = 0; s < steps; ++s) start[s + 1] = start[s] + fastest[s];
  b.baseline_seconds = start[steps];
  double worst_extra = 0;
  double best_share = 0.5;  // enough's: the share before the step of the split that covered last
  std::vector<std::pair<double, double>> open;  // enough's: ranges of B not yet ruled out
  const std::vector<std::size_t> counted = counted_bytes(p, least_extra);
  for (std::uint32_t s = 0; s < steps; ++s) {
    // Within the budget: the walk below would find nothing over it (`over` <= 0).
    if (counted[s] <= p.budget_bytes) continue;
    const double before = start[s];
    std::size_t fixed = least_extra[s];
    removable r;
    for (const schedule_tensor& t : p.tensors) {
      if (t.bytes == 0) continue;
      const double bytes = static_cast<double>(t.bytes);
      const double copied = t.copy_bytes == 0 ? bytes : static_cast<double>(t.copy_bytes);
      if (t.uses.empty()) {
        if (t.persistent) r.free_bytes += bytes;
        continue;
      }
      const std::uint32_t first = t.uses.front().step, last = t.uses.back().step;
      // Out after its last write (once that step is done), back before its next use starts.
      auto out_after = [&](const schedule_use* u) {
        const std::uint32_t w = last_write(t, u);
        if (w != k_unwritten) return r.out.add(before - start[w + 1], copied, bytes);
        // Persistent, not written yet this iteration: it may have left since its last write
        // in the one before; never written, its host copy from any earlier one will do.
        const std::uint32_t previous = last_write(t, &t.uses.back());
        r.out.add(previous == k_unwritten ? std::numeric_limits<double>::infinity()
                                          : before + b.baseline_seconds - start[previous + 1],
                  copied, bytes, /*spans=*/true);
      };
      auto in_before = [&](std::uint32_t next) { r.in.add(start[next] - before, copied, bytes); };
      if (s < first || s > last) {
        if (!t.persistent) continue;
        if (s < first) {
          r.in_only += bytes;
          in_before(first);
        } else {
          r.out_only += bytes;
          out_after(&t.uses.back());
        }
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
      out_after(u);
      in_before(std::next(u)->step);
      if (t.rebuildable && !t.persistent) {
        const double least =
            t.least_rebuild_seconds >= 0 ? t.least_rebuild_seconds : t.rebuild_seconds;
        r.drops.push_back({bytes, least});
      }
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
    r.prepare();
    // Whether some split of `extra` seconds into B before the step and A = extra - B after it
    // covers the overflow. most_away grows with B and with A, so over a range [lo, hi] of B
    // it is at most most_away(hi, extra - lo): a range whose most falls short is out, one
    // whose middle covers answers yes, the others are halved (what a link carries is not
    // concave in B, a spanning window's order among the near ones moving with it, so no
    // search that assumes one best would be sound). A range narrower than k_split_precision
    // of `extra` still open, or k_split_trials spent, counts as covering: the bound can only
    // come out lower for it, never higher.
    auto enough = [&](double extra) {
      const auto away = [&](double before) {
        return r.most_away(before, extra - before, extra, p.link_bytes_per_s);
      };
      const auto most = [&](double lo, double hi) {
        return r.most_away(hi, extra - lo, extra, p.link_bytes_per_s);
      };
      if (most(0, extra) < over) return false;
      // The share before the step that covered last, at this step or one before, first:
      // neighbouring steps and the bisection's trials mostly split alike.
      if (away(best_share * extra) >= over) return true;
      open.assign(1, {0.0, extra});
      for (int trials = 0; !open.empty(); ++trials) {
        const auto [lo, hi] = open.back();
        open.pop_back();
        const double mid = (lo + hi) / 2;
        if (away(mid) >= over) {
          best_share = mid / extra;
          return true;
        }
        if (hi - lo <= k_split_precision * extra || trials >= k_split_trials) return true;
        // The more promising half last, so it is tried first.
        const bool left_first = most(lo, mid) > most(mid, hi);
        for (const bool left : {!left_first, left_first}) {
          const double a = left ? lo : mid, z = left ? mid : hi;
          if (most(a, z) >= over) open.emplace_back(a, z);
        }
      }
      return false;
    };
    // Where the extra time the worst step so far needs is enough here too, this step cannot
    // raise the bound (enough is monotonic in the extra time): no bisection. The bisection
    // below would have ended under worst_extra, so the bound is the same to the bit.
    if (enough(worst_extra)) continue;
    // The links' windows grow with the extra time, so enough time always suffices. Not
    // enough at worst_extra: this step's least extra time is above it.
    double lo = worst_extra, hi = std::max({1e-6, b.baseline_seconds, 2 * worst_extra});
    while (!enough(hi)) hi *= 2;
    // Relative precision, and an absolute floor: were a step covered at every extra time above
    // 0 but not at 0 itself, the relative test alone would halve hi forever.
    while (hi - lo > k_extra_precision * hi && hi - lo > k_extra_floor_seconds) {
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

}  // namespace

schedule_bound bound_memory_schedule(const schedule_problem& problem) {
  // Each run that plans bounds its plan too: the weighing's trials bound the same problems.
  static recent_plans<std::monostate, schedule_bound> recent(16, std::size_t{16} << 20);
  if (std::optional<schedule_bound> known = recent.find(problem, {})) return *known;
  const schedule_bound bound = bound_problem(problem);
  recent.insert(problem, {}, bound);
  return bound;
}

}  // namespace memweave
