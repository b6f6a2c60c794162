// A lower bound on what any exact schedule of a problem can reach: how far the greedy plan is
// from the best possible, and whether a figure asked of it is reachable in the model at all.
//
// At a step s, every byte live across s but not used by it and over the budget must be away:
//   swapped  its offload crossed the device-to-host link after the tensor was last written
//            and before s started (a persistent tensor before its first use may have left in
//            the previous iteration: no such limit), and its prefetch crosses the
//            host-to-device link after s started and before its next use starts (a
//            persistent tensor after its last use need not come back this iteration);
//   dropped  (a rebuildable transient tensor) its producer's forward is replayed at least
//            once, at least at the step's fastest time; one layer rebuilds one tensor.
// A tensor in host memory at s (a staged step's, schedule_use::on_host) is away already: its
// copies are in the steps' times.
// Every second E the iteration is made longer (stalls and replays) lengthens both windows
// by E (a stall right before s, or right after it, widens every copy's window). Each link is
// one machine serving copies with release times (out) or deadlines (in), so what it can carry
// is bounded by its cuts (min over θ: the bytes released before θ, plus L·(the window left
// after θ); mirrored for deadlines): a tensor written just before s cannot leave in time
// however idle the link was earlier. Drops within E seconds of replays are at most the
// fractional knapsack of the cheapest-per-byte ones. The least E at which the two reach the
// overflow bounds s; the largest over the steps bounds the iteration.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <utility>
#include <vector>

#include "memweave/schedule/memory_schedule.hpp"

namespace memweave {
namespace {

struct drop_item {
  double bytes = 0, seconds = 0;
};

// Copies one link must carry for a step, each within a window that one end of fixes: its
// release (the tensor's last write, for the way out) or its deadline (its next use, for the
// way back), the other end being the step's start, which E seconds of stalls move away.
struct link_jobs {
  // (seconds from the step's start to the fixed end, bytes): for the way out, how long
  // before the step the tensor was last written; for the way back, how long after the step's
  // start it is next used. Sorted nearest first by prepare().
  std::vector<std::pair<double, double>> jobs;
  std::vector<double> farther;  // per job: the bytes of the jobs sorted after it

  void add(double window, double bytes) { jobs.emplace_back(window, bytes); }

  void prepare() {
    std::sort(jobs.begin(), jobs.end());
    farther.assign(jobs.size(), 0);
    double sum = 0;
    for (std::size_t i = jobs.size(); i-- > 0;) {
      farther[i] = sum;
      sum += jobs[i].second;
    }
  }

  // The most bytes the link can carry at `link` bytes/s with every window `extra` seconds
  // wider: the least cut, min over each job j of (the bytes of jobs with wider windows, which
  // may all fit, plus what the link carries in j's window), and all the bytes.
  double most(double extra, double link) const {
    double m = jobs.empty() ? 0 : farther.front() + jobs.front().second;
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      m = std::min(m, farther[i] + link * (std::max(0.0, jobs[i].first) + extra));
    }
    return m;
  }
};

// What may leave the device at one step, by which link it must cross.
struct removable {
  double both = 0;               // transient in a gap: out before the step, back after it
  double in_only = 0;            // persistent before its first use: back after the step
  double out_only = 0;           // persistent after its last use: out before the step
  double free_bytes = 0;         // persistent and never used: may stay on the host
  link_jobs out, in;             // out: both and out_only; in: both and in_only
  std::vector<drop_item> drops;  // cheapest per byte first

  double total() const { return both + in_only + out_only + free_bytes; }

  // The most bytes away at the step if the iteration is `extra` seconds longer than its
  // fastest: what each link carries in its windows widened by `extra`, replays within it.
  double most_away(double extra, double link) const {
    const double o = out.most(extra, link), i = in.most(extra, link);
    const double swapped =
        std::min({both + in_only + out_only, i + out_only, o + in_only, i + o}) + free_bytes;
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
  std::vector<double> start(steps + 1, 0);  // each step's start with every step at its fastest
  for (std::size_t s = 0; s < steps; ++s) start[s + 1] = start[s] + fastest[s];
  b.baseline_seconds = start[steps];
  double worst_extra = 0;
  for (std::uint32_t s = 0; s < steps; ++s) {
    const double before = start[s];
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
      // Out after its last write (once that step is done), back before its next use starts.
      auto out_after = [&](const schedule_use* u) {
        const std::uint32_t w = last_write(t, u);
        if (w != k_unwritten) return r.out.add(before - start[w + 1], bytes);
        // Persistent, not written yet this iteration: it may have left since its last write
        // in the one before; never written, its host copy from any earlier one will do.
        const std::uint32_t previous = last_write(t, &t.uses.back());
        r.out.add(previous == k_unwritten ? std::numeric_limits<double>::infinity()
                                          : before + b.baseline_seconds - start[previous + 1],
                  bytes);
      };
      auto in_before = [&](std::uint32_t next) { r.in.add(start[next] - before, bytes); };
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
    r.out.prepare();
    r.in.prepare();
    auto enough = [&](double extra) { return r.most_away(extra, p.link_bytes_per_s) >= over; };
    // Where the extra time the worst step so far needs is enough here too, this step cannot
    // raise the bound (enough is monotonic in the extra time): no bisection. The bisection
    // below would have ended under worst_extra, so the bound is the same to the bit.
    if (enough(worst_extra)) continue;
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
