// The memory schedule planner. One greedy round: simulate the current schedule (memory per
// step, and the timeline of compute and of the two copy streams), take the step most over
// its planning budget (the budget less the headroom; a staged step's, the budget), weigh every
// tensor idle there (inside a gap that is still `keep`) as a swap and as a drop, and commit the
// action with the least added time per byte of overflow it removes. Rounds repeat until every step
// fits, or until the step most over budget has no idle tensor left: then the schedule does not fit
// (later actions could only add uses there), and planning stops.
//
// A parkable persistent tensor's gap around the iteration's end (its last use to its first)
// is weighed as a swap too, at a step outside its uses: parked, it is away over steps
// [release, end) and [0, prefetch], and back in place for its first use.
//
// Invariants: a tensor's uses are ascending and unique; gaps_[t][i] is the gap between
// uses[i] and uses[i + 1]; a swap's window [release, prefetch] lies strictly inside its gap
// and a step inside a swap's window never becomes a use (a rebuild may not read a tensor
// that is away on the host: such a drop is not a candidate). Splitting a gap at a new use
// keeps its action on both sides, so a dropped tensor that a rebuild reads is rebuilt first
// (a chain), and dropped again after that step.
//
// Cost: each round is O(tensors · log uses + steps + actions); rounds are bounded by the
// number of gaps.
#include "memweave/schedule/memory_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>

#include "memweave/core/config.hpp"
#include "memweave/core/error.hpp"
#include "recent_plans.hpp"

namespace memweave {
namespace {

constexpr std::uint32_t k_none = std::numeric_limits<std::uint32_t>::max();

// The index of the first of `uses` (ascending by step) at or after `step`; uses.size() when
// none is.
std::size_t first_use_from(const std::vector<schedule_use>& uses, std::uint32_t step) {
  const auto it =
      std::lower_bound(uses.begin(), uses.end(), step,
                       [](const schedule_use& x, std::uint32_t s) { return x.step < s; });
  return static_cast<std::size_t>(it - uses.begin());
}

// Whether `uses` has one at `step`.
bool has_use_at(const std::vector<schedule_use>& uses, std::uint32_t step) {
  const std::size_t i = first_use_from(uses, step);
  return i < uses.size() && uses[i].step == step;
}

struct gap {
  gap_action action = gap_action::keep;
  std::uint32_t release = 0, prefetch = 0;
};

// Per-step times of one simulated iteration.
struct timeline {
  std::vector<double> start, end;  // compute: each step's kernel
  // The time the device-to-host (host-to-device) stream is done with every copy issued after
  // steps <= s.
  std::vector<double> d2h_done, h2d_done;
  // The least slack (time between a copy's arrival and the moment it is needed) over the
  // offloads (prefetches) issued after steps > s; +inf when none.
  std::vector<double> d2h_slack_after, h2d_slack_after;
  // Per step: (tensor, arrival time) of each offload (prefetch) issued after it.
  std::vector<std::vector<std::pair<std::uint32_t, double>>> offloaded, prefetched;
  double total = 0;

  static double arrival(const std::vector<std::pair<std::uint32_t, double>>& issued,
                        std::uint32_t t) {
    for (const auto& [key, at] : issued) {
      if (key == t) return at;
    }
    return 0.0;
  }
};

class planner {
 public:
  planner(const schedule_problem& p, const schedule_options& o,
          const std::function<bool()>* stop = nullptr)
      : p_(p), o_(o), stop_(stop) {
    const std::size_t steps = p.step_seconds.size();
    uses_.resize(p.tensors.size());
    gaps_.resize(p.tensors.size());
    halve_.assign(p.tensors.size(), false);
    park_.resize(p.tensors.size());
    for (std::uint32_t t = 0; t < p.tensors.size(); ++t) {
      const schedule_tensor& x = p.tensors[t];
      std::uint32_t previous = k_none;
      for (const schedule_use& u : x.uses) {
        if (u.step >= steps) {
          throw invalid_argument("schedule: tensor " + std::to_string(t) + " is used at step " +
                                 std::to_string(u.step) + ", but the iteration has " +
                                 std::to_string(steps) + " steps");
        }
        if (previous != k_none && u.step <= previous) {
          throw invalid_argument("schedule: the uses of tensor " + std::to_string(t) +
                                 " are not ascending and unique (step " + std::to_string(u.step) +
                                 " after " + std::to_string(previous) + ")");
        }
        previous = u.step;
        if (u.on_host && x.persistent) {
          throw invalid_argument("schedule: persistent tensor " + std::to_string(t) +
                                 " has a use in host memory (step " + std::to_string(u.step) +
                                 "): only transient tensors are staged");
        }
      }
      for (std::uint32_t y : x.rebuild_touches) {
        if (y >= p.tensors.size() || y == t) {
          throw invalid_argument("schedule: the rebuild of tensor " + std::to_string(t) +
                                 " touches tensor " + std::to_string(y) +
                                 ", which is not another tensor of the problem");
        }
      }
      uses_[t] = x.uses;
      const bool staged = std::any_of(x.uses.begin(), x.uses.end(),
                                      [](const schedule_use& u) { return u.on_host; });
      // A staged step copies a swapped tensor's host copy as it is: never fp16.
      halve_[t] = o.compress && x.compressible && !staged;
      // The steps whose time its staging changes: its uses in host memory, and the uses right
      // after them (a copy in, where the tensor is then on the device).
      if (staged && staging_.empty()) staging_.resize(steps);
      for (std::size_t i = 0; staged && i < x.uses.size(); ++i) {
        if (x.uses[i].on_host || (i > 0 && x.uses[i - 1].on_host)) {
          staging_[x.uses[i].step].push_back(t);
        }
      }
      if (!x.uses.empty()) gaps_[t].resize(x.uses.size() - 1);
    }
    chain_.resize(steps);
    choice_.assign(steps, 0);
    for (std::size_t st = 0; st < p.step_options.size() && st < steps; ++st) {
      const auto& o = p.step_options[st];
      for (std::size_t i = 0; i + 1 < o.size(); ++i) {
        if (!(o[i].seconds <= o[i + 1].seconds)) {
          throw invalid_argument("schedule: the options of step " + std::to_string(st) +
                                 " are not fastest first");
        }
      }
    }
    planning_budget_ =
        static_cast<std::size_t>(static_cast<double>(p.budget_bytes) * (1.0 - o.headroom));
    // A TSPLIT staged step may fill the whole budget: the split plan fits its micro-steps to
    // it, and what the step keeps whole besides is what the executor's stage_step keeps where
    // no schedule runs (the budget beside the micro-step). The headroom is for the
    // fragmentation of the actions around it. Held to the planning budget, a staged step near
    // max(l_i) was over it with nothing left to move, and the schedule lost to the cache
    // alone (VGG16 b16 of 224-pixel images, width 1/16, the fewest micro-batches at 0.99 of
    // max(l_i): 9.6 ms per iteration on the cache alone, 8.4 with the schedule so;
    // PERFORMANCE.md, session 40).
    limit_.assign(steps, planning_budget_);
    for (const schedule_tensor& x : p.tensors) {
      for (const schedule_use& u : x.uses) {
        if (u.on_host) limit_[u.step] = p.budget_bytes;
      }
    }
  }

  memory_schedule run() {
    std::size_t actions = 0;
    // What liveness holds, with every step at its fastest option, fits: nothing to do.
    const std::vector<std::size_t> plain = memory_curve();
    const bool fits_plain = std::all_of(plain.begin(), plain.end(),
                                        [&](std::size_t b) { return b <= p_.budget_bytes; });
    std::size_t rounds = fits_plain ? 0 : 2 * p_.step_seconds.size() + 16;
    // Each round commits one gap (or marks a step stuck): bounded by gaps + steps, with room
    // for gaps that splits create.
    for (const auto& u : uses_) rounds += fits_plain ? 0 : 4 * u.size();
    for (const auto& o : p_.step_options) rounds += fits_plain ? 0 : o.size();
    while (rounds-- > 0) {
      throw_if_stopped();
      if (o_.max_actions != 0 && actions >= o_.max_actions) break;
      const std::vector<std::size_t> bytes = memory_curve();
      std::uint32_t worst = k_none;
      std::size_t worst_over = 0;
      for (std::uint32_t s = 0; s < bytes.size(); ++s) {
        if (bytes[s] > limit_[s] && bytes[s] - limit_[s] > worst_over) {
          worst = s, worst_over = bytes[s] - limit_[s];
        }
      }
      if (worst == k_none) break;
      timeline& tl = round_timeline_;
      simulate_into(tl, emitted(bytes));
      // A step with no idle tensor left can never come under the budget (later actions only
      // add uses): the schedule does not fit, and planning stops.
      if (!commit_best(worst, bytes, tl)) break;
      ++actions;
    }
    if (o_.allow_swap && !fits_plain) refine();
    if (!staging_.empty()) unstage();
    if (!fits_plain && o_.hold_dead) hold_chains();
    widen_workspaces();  // a plan that fits plainly is still timed with what selection takes
    defer_releases();
    const std::vector<std::size_t> bytes = memory_curve();
    memory_schedule s = emit(bytes);
    s.predicted_seconds = simulate(s).total;
    for (std::size_t st = 0; st < p_.step_seconds.size(); ++st) {
      s.baseline_seconds += has_options(st) ? p_.step_options[st][0].seconds : p_.step_seconds[st];
    }
    s.fits = all_fit(bytes);
    return s;
  }

  // The iteration's timeline under `s`, mirroring the executor: before a step, releases
  // (the compute stream waits for the offload) and the inputs' prefetches (it waits for the
  // copy) and rebuilds (replays run on the compute stream); after it, offloads (after the
  // tensor's last writer, in issue order on their stream) and prefetches (after the step, in
  // issue order on theirs).
  timeline simulate(const memory_schedule& s) const {
    timeline tl;
    simulate_into(tl, s);
    return tl;
  }

  // The same into `tl`, whose lists (and the scratch below) keep their capacity: the greedy
  // rounds and refine's trials simulate a schedule each, and making them anew each time was a
  // tenth of the planning.
  void simulate_into(timeline& tl, const memory_schedule& s) const {
    const std::size_t steps = p_.step_seconds.size();
    tl.start.assign(steps, 0), tl.end.assign(steps, 0);
    tl.d2h_done.assign(steps, 0), tl.h2d_done.assign(steps, 0);
    tl.offloaded.resize(steps), tl.prefetched.resize(steps);
    for (auto& issued : tl.offloaded) issued.clear();
    for (auto& issued : tl.prefetched) issued.clear();
    const std::size_t n = p_.tensors.size();
    std::vector<double>& offload_end = scratch_.offload_end;  // per tensor, its latest copy
    std::vector<double>& prefetch_end = scratch_.prefetch_end;
    offload_end.assign(n, 0), prefetch_end.assign(n, 0);
    std::vector<std::vector<std::uint32_t>>& ready_before = scratch_.ready_before;
    ready_before.resize(steps);
    for (auto& r : ready_before) r.clear();
    for (const scheduled_gap& g : s.gaps) {
      if (g.action != gap_action::swap || g.to_host) continue;
      ready_before[g.before].push_back(g.tensor);
    }
    double now = 0, d2h = 0, h2d = 0;
    for (std::uint32_t st = 0; st < steps; ++st) {
      const scheduled_step& ss = s.steps[st];
      for (std::uint32_t t : ss.release) now = std::max(now, offload_end[t]);
      for (std::uint32_t t : ready_before[st]) now = std::max(now, prefetch_end[t]);
      for (std::uint32_t t : ss.rebuild) now += p_.tensors[t].rebuild_seconds;
      tl.start[st] = now;
      now += step_seconds(st);
      tl.end[st] = now;
      for (std::uint32_t t : ss.offload) {
        const std::uint32_t w = last_write_at_or_before(t, st);
        const double ready = w == k_none ? 0.0 : tl.end[w];
        d2h = std::max(d2h, ready) + copy_seconds(t);
        offload_end[t] = d2h;
        tl.offloaded[st].emplace_back(t, d2h);
      }
      for (std::uint32_t t : ss.prefetch) {
        h2d = std::max(h2d, tl.end[st]) + copy_seconds(t);
        prefetch_end[t] = h2d;
        tl.prefetched[st].emplace_back(t, h2d);
      }
      tl.d2h_done[st] = d2h;
      tl.h2d_done[st] = h2d;
    }
    tl.total = now;
    // Slack of each swap's copies against the step that waits for them (its release, the use
    // that closes its gap), as the least over the copies issued after each step.
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<double>& d2h_at = scratch_.d2h_at;
    std::vector<double>& h2d_at = scratch_.h2d_at;
    d2h_at.assign(steps, inf), h2d_at.assign(steps, inf);
    for (const scheduled_gap& g : s.gaps) {
      if (g.action != gap_action::swap) continue;
      const double out = tl.start[g.release] - timeline::arrival(tl.offloaded[g.after], g.tensor);
      d2h_at[g.after] = std::min(d2h_at[g.after], out);
      if (g.to_host) continue;
      const double in = tl.start[g.before] - timeline::arrival(tl.prefetched[g.prefetch], g.tensor);
      h2d_at[g.prefetch] = std::min(h2d_at[g.prefetch], in);
    }
    auto suffix_min = [steps, inf](const std::vector<double>& at, std::vector<double>& after) {
      after.assign(steps, inf);
      double m = inf;
      for (std::size_t st = steps; st-- > 0;) {
        after[st] = m;
        m = std::min(m, at[st]);
      }
    };
    suffix_min(d2h_at, tl.d2h_slack_after);
    suffix_min(h2d_at, tl.h2d_slack_after);
  }

  // Replays a given schedule: its swaps' copies are halved as it marks them.
  void take_compression_from(const memory_schedule& s) {
    for (const scheduled_gap& g : s.gaps) {
      if (g.tensor < halve_.size() && g.action == gap_action::swap) halve_[g.tensor] = g.compressed;
    }
  }

 private:
  bool has_options(std::size_t s) const {
    return s < p_.step_options.size() && !p_.step_options[s].empty();
  }
  double step_seconds(std::size_t s) const {
    return kernel_seconds(s) + (s < staging_.size() ? staging_seconds(s) : 0.0);
  }
  double kernel_seconds(std::size_t s) const {
    if (!has_options(s)) return p_.step_seconds[s];
    if (!timing_seconds_.empty()) return timing_seconds_[s];
    return p_.step_options[s][choice_[s]].seconds;
  }
  // The copies staging adds to step `s`, on the compute stream: a micro-tensor's slices in and
  // out (schedule_use::staged_seconds), and first a copy out of one still resident from its
  // use before (kept across the gap; one swapped there is already on the host); a tensor the
  // step uses on the device after a use in host memory, a copy in.
  double staging_seconds(std::size_t s) const {
    double seconds = 0;
    for (std::uint32_t t : staging_[s]) {
      const auto& u = uses_[t];
      const std::size_t i = use_index(t, static_cast<std::uint32_t>(s));
      if (i == u.size()) continue;
      if (!u[i].on_host) {
        if (i > 0 && u[i - 1].on_host) seconds += staging_copy_seconds(t);
        continue;
      }
      seconds += u[i].staged_seconds;
      if (i > 0 && !u[i - 1].on_host && gaps_[t][i - 1].action == gap_action::keep) {
        seconds += staging_copy_seconds(t);
      }
    }
    return seconds;
  }

  // The index of `t`'s use at `step`, or uses_[t].size() where it has none.
  std::size_t use_index(std::uint32_t t, std::uint32_t step) const {
    const std::size_t i = first_use_from(uses_[t], step);
    return has_use_at(uses_[t], step) ? i : uses_[t].size();
  }
  // The ways workspace selection may run step s at run time: every one, where the plan's
  // options stop at the workspaces planned for.
  const std::vector<step_option>& selectable(std::size_t s) const {
    const bool wider = s < p_.timing_options.size() && !p_.timing_options[s].empty();
    return wider ? p_.timing_options[s] : p_.step_options[s];
  }
  std::size_t step_extra(std::size_t s) const {
    if (has_options(s)) return p_.step_options[s][choice_[s]].extra_bytes;
    return s < p_.step_extra_bytes.size() ? p_.step_extra_bytes[s] : 0;
  }

  // Whether any way of running step `s` takes a workspace.
  bool takes_workspace(std::size_t s) const {
    if (has_options(s)) {
      return std::any_of(p_.step_options[s].begin(), p_.step_options[s].end(),
                         [](const step_option& o) { return o.extra_bytes != 0; });
    }
    return step_extra(s) != 0;
  }

  // A swap's memory goes back before its release step, the compute stream first waiting for
  // the copy. Where the steps from there take no workspace and hold the tensor within the
  // planning budget, the release moves on to the next step that takes one: a step that needs
  // no more memory no longer waits for a copy that a device a little faster than the model
  // has not finished (VGG16 b64 at a third of its peak: relu2_1's forward waited 1.4 ms for
  // pool1's output to land).
  void defer_releases() {
    std::vector<std::size_t> bytes = memory_curve();
    const timeline tl = simulate(emit(bytes));
    for (std::uint32_t t = 0; t < p_.tensors.size(); ++t) {
      const std::size_t b = p_.tensors[t].bytes;
      for (std::size_t i = 0; i < gaps_[t].size(); ++i) {
        gap& g = gaps_[t][i];
        if (g.action != gap_action::swap) continue;
        // Only where the copy lands within a tenth of its own time of the release step's
        // start: a release with more to spare holds memory longer for nothing.
        const double landed = timeline::arrival(tl.offloaded[uses_[t][i].step], t);
        if (tl.start[g.release] - landed >= 0.1 * copy_seconds(t)) continue;
        while (g.release < g.prefetch && !takes_workspace(g.release) &&
               bytes[g.release] + b <= limit_[g.release]) {
          bytes[g.release] += b;
          ++g.release;
        }
      }
    }
  }

  // How long before its step a prefetch whose copy takes `d` is placed to land.
  double slack(double d) const { return o_.slack_seconds + o_.slack_copy_share * d; }

  // One copy of `t` over the link, as fp16 (half the bytes) or not.
  double link_seconds(std::uint32_t t, bool fp16) const {
    const double bytes = static_cast<double>(p_.tensors[t].bytes);
    return p_.copy_latency_s + (fp16 ? bytes / 2 : bytes) / p_.link_bytes_per_s;
  }

  // One direction of a swap of `t`.
  double copy_seconds(std::uint32_t t) const { return link_seconds(t, halve_[t]); }

  // A whole copy of `t` between the device and its staging memory (the executor's stage and
  // fetch_staged).
  double staging_copy_seconds(std::uint32_t t) const {
    return link_seconds(t, p_.tensors[t].staged_fp16);
  }

  std::uint32_t last_write_at_or_before(std::uint32_t t, std::uint32_t step) const {
    std::uint32_t w = k_none;
    for (const schedule_use& u : uses_[t]) {
      if (u.step > step) break;
      if (u.writes) w = u.step;
    }
    return w;
  }

  // The index i of the gap of `t` strictly containing `step` (uses[i] < step < uses[i+1]);
  // k_none when `step` is a use or outside the first..last use.
  std::uint32_t gap_containing(std::uint32_t t, std::uint32_t step) const {
    const auto& u = uses_[t];
    const std::size_t i = first_use_from(u, step);
    if (i == 0 || i == u.size() || u[i].step == step) return k_none;
    return static_cast<std::uint32_t>(i - 1);
  }

  bool is_use(std::uint32_t t, std::uint32_t step) const { return has_use_at(uses_[t], step); }

  // Whether gap `i` of `t` opens at a use in host memory (a staged step): the tensor is in
  // host memory across it, nothing for the schedule to move.
  bool opens_on_host(std::uint32_t t, std::uint32_t i) const { return uses_[t][i].on_host; }

  // Whether `t` is in host memory at `step` (staged): used there in host memory, or in a gap
  // that opens at such a use.
  bool on_host_at(std::uint32_t t, std::uint32_t step) const {
    const auto& u = uses_[t];
    const std::size_t i = first_use_from(u, step);
    if (i < u.size() && u[i].step == step) return u[i].on_host;
    return i != 0 && i < u.size() && u[i - 1].on_host;
  }

  // Whether persistent `t` is parked on the host at `step`.
  bool parked_at(std::uint32_t t, std::uint32_t step) const {
    const gap& k = park_[t];
    return k.action == gap_action::swap && (step <= k.prefetch || step >= k.release);
  }

  // Whether dead `t` is kept at `step` from a rebuild at an earlier step (hold_chains).
  bool held_at(std::uint32_t t, std::uint32_t step) const {
    if (t >= held_.size()) return false;
    return std::any_of(held_[t].begin(), held_[t].end(),
                       [&](const auto& h) { return h.first < step && step <= h.second; });
  }

  // Last but for the workspaces: a tensor dead by the time replays need it is rebuilt at each
  // step whose chain reads it, and freed after it (a DenseNet block's features, which every
  // concatenation after them reads, each concatenation rebuilt in backward: the block's first
  // feature five times in a row). Where the steps between two such rebuilds have room under
  // the planning budget, it stays from the first to the last of a run instead: one replay for
  // the run, and the later steps' chains no longer rebuild what only its replay read. Those
  // replaying the most first. Not beside staged steps (their replays' reads are in host
  // memory).
  void hold_chains() {
    if (!staging_.empty()) return;
    const auto steps = static_cast<std::uint32_t>(chain_.size());
    auto rebuilt_at = [&](std::uint32_t y) {
      std::vector<std::uint32_t> at;
      for (std::uint32_t s = 0; s < steps; ++s) {
        if (std::find(chain_[s].begin(), chain_[s].end(), y) != chain_[s].end()) at.push_back(s);
      }
      return at;
    };
    std::vector<std::pair<double, std::uint32_t>> order;
    {
      std::vector<std::uint32_t> count(p_.tensors.size(), 0);
      for (const auto& c : chain_) {
        for (std::uint32_t y : c) ++count[y];
      }
      for (std::uint32_t y = 0; y < count.size(); ++y) {
        if (count[y] > 1 && !p_.tensors[y].fused_away) {
          order.emplace_back((count[y] - 1) * p_.tensors[y].rebuild_seconds, y);
        }
      }
    }
    if (order.empty()) return;
    std::stable_sort(order.begin(), order.end(),
                     [](const auto& x, const auto& y) { return x.first > y.first; });
    held_.resize(p_.tensors.size());
    // The curve changes only where a hold is added (then taken again below).
    std::vector<std::size_t> bytes = memory_curve();
    for (const auto& [saved, y] : order) {
      const std::vector<std::uint32_t> at = rebuilt_at(y);
      const std::size_t b = p_.tensors[y].bytes;
      // Held over (from, to]: the steps its chains rebuild it at count it already.
      auto room = [&](std::uint32_t from, std::uint32_t to) {
        for (std::uint32_t s = from + 1; s <= to; ++s) {
          const bool counted = std::binary_search(at.begin(), at.end(), s);
          if (bytes[s] + (counted ? 0 : b) > limit_[s]) return false;
        }
        return true;
      };
      for (std::size_t i = 0; i + 1 < at.size();) {
        std::size_t j = i;
        while (j + 1 < at.size() && room(at[i], at[j + 1])) ++j;
        if (j > i) {
          held_[y].emplace_back(at[i], at[j]);
          for (std::size_t k = i + 1; k <= j; ++k) gather_chain(at[k]);
          bytes = memory_curve();
        }
        i = j + 1;
      }
    }
  }

  bool alive_at(std::uint32_t t, std::uint32_t step) const {
    if (p_.tensors[t].persistent) return true;
    const auto& u = uses_[t];
    return !u.empty() && u.front().step <= step && step <= u.back().step;
  }

  // Device bytes at each step under the current gaps.
  std::vector<std::size_t> memory_curve() const {
    const std::size_t steps = p_.step_seconds.size();
    std::vector<std::int64_t> delta(steps + 1, 0);
    auto add = [&](std::uint32_t from, std::uint32_t to_inclusive, std::size_t b) {
      if (from > to_inclusive) return;
      delta[from] += static_cast<std::int64_t>(b);
      delta[to_inclusive + 1] -= static_cast<std::int64_t>(b);
    };
    for (std::uint32_t t = 0; t < p_.tensors.size(); ++t) {
      const auto& u = uses_[t];
      const std::size_t b = p_.tensors[t].bytes;
      if (u.empty()) {
        if (p_.tensors[t].persistent && steps != 0)
          add(0, static_cast<std::uint32_t>(steps - 1), b);
        continue;
      }
      if (p_.tensors[t].persistent) {
        // Parked: on the host from its release to the end and from the start to its prefetch.
        const gap& k = park_[t];
        const bool parked = k.action == gap_action::swap;
        if (u.front().step > 0) add(parked ? k.prefetch + 1 : 0, u.front().step - 1, b);
        add(u.back().step + 1, parked ? k.release - 1 : static_cast<std::uint32_t>(steps - 1), b);
      }
      for (std::size_t i = 0; i < u.size(); ++i) {
        add(u[i].step, u[i].step, u[i].on_host ? u[i].slice_bytes : b);
        if (i + 1 == u.size()) break;
        if (u[i].on_host) continue;  // in host memory until its next use
        const std::uint32_t a = u[i].step, c = u[i + 1].step;
        const gap& g = gaps_[t][i];
        switch (g.action) {
          case gap_action::keep:
            add(a + 1, c - 1, b);
            break;
          case gap_action::swap:
            add(a + 1, g.release - 1, b);
            add(g.prefetch + 1, c - 1, b);
            break;
          case gap_action::drop:
            break;
        }
      }
    }
    for (std::uint32_t t = 0; t < held_.size(); ++t) {
      for (const auto& [from, to] : held_[t]) add(from + 1, to, p_.tensors[t].bytes);
    }
    std::vector<std::size_t> bytes(steps);
    std::int64_t run = 0;
    for (std::size_t s = 0; s < steps; ++s) {
      bytes[s] = static_cast<std::size_t>(run += delta[s]);
      bytes[s] += step_extra(s);
      for (std::uint32_t y : chain_[s]) bytes[s] += p_.tensors[y].bytes;
    }
    return bytes;
  }

  // The schedule the gaps describe (lists in tensor order within a step).
  memory_schedule emit(const std::vector<std::size_t>& bytes) const {
    memory_schedule s;
    emit_into(s, bytes);
    return s;
  }

  // The schedule the gaps describe, emitted into the planner's scratch one: for a schedule
  // that is only simulated (the greedy rounds, refine's and unstage's trials).
  const memory_schedule& emitted(const std::vector<std::size_t>& bytes) const {
    emit_into(scratch_.schedule, bytes);
    return scratch_.schedule;
  }

  bool checking_trials() const noexcept {
#ifndef NDEBUG
    return true;
#else
    return o_.check_trials;
#endif
  }

  // refine's trials of one dropped gap differ only in where its prefetch is issued: the
  // schedule is emitted whole for the first, and for each next one the tensor's prefetch
  // moves to its new step (at the place emit_into gives it: the gaps' prefetches come in
  // tensor order, the parks' after them) and its gap's field follows. Emitting each trial
  // whole was a third of planning a 1116-layer ResNet. (The chain rebuilt before the gap's
  // closing step is the same in every trial: check_trials compares.)
  struct trial_emission {
    bool done = false;
    std::uint32_t prefetch = 0;  // the step t's prefetch is listed at
    std::size_t gap = 0;         // t's gap in the schedule's gaps
  };
  const memory_schedule& emitted_trial(trial_emission& e, std::uint32_t t, std::uint32_t gi,
                                       const std::vector<std::size_t>& bytes) const {
    memory_schedule& s = scratch_.schedule;
    const gap& g = gaps_[t][gi];
    const std::uint32_t after = uses_[t][gi].step;
    if (!e.done) {
      emit_into(s, bytes);
      e.done = true;
      e.prefetch = g.prefetch;
      e.gap = 0;
      while (e.gap < s.gaps.size() &&
             !(s.gaps[e.gap].tensor == t && s.gaps[e.gap].after == after && !s.gaps[e.gap].wraps)) {
        ++e.gap;
      }
      if (e.gap == s.gaps.size()) {
        throw std::logic_error("schedule: refine's trial emitted no gap of its tensor");
      }
      return s;
    }
    if (g.prefetch != e.prefetch) {
      auto& from = s.steps[e.prefetch].prefetch;
      const auto listed = std::find(from.begin(), from.end(), t);
      if (listed == from.end()) {
        throw std::logic_error("schedule: refine's trial tensor is not where its prefetch was");
      }
      from.erase(listed);
      auto& to = s.steps[g.prefetch].prefetch;
      const auto parked_here = [&](std::uint32_t u) {
        return park_[u].action == gap_action::swap && park_[u].prefetch == g.prefetch;
      };
      std::size_t i = 0;
      while (i < to.size() && !parked_here(to[i]) && to[i] < t) ++i;
      to.insert(to.begin() + static_cast<std::ptrdiff_t>(i), t);
      s.gaps[e.gap].prefetch = g.prefetch;
      e.prefetch = g.prefetch;
    }
    s.bytes_per_step = bytes;
    s.predicted_peak_bytes = bytes.empty() ? 0 : *std::max_element(bytes.begin(), bytes.end());
    if (checking_trials()) {
      memory_schedule whole;
      emit_into(whole, bytes);
      if (whole.gaps != s.gaps || whole.steps != s.steps ||
          whole.predicted_peak_bytes != s.predicted_peak_bytes ||
          whole.bytes_swapped != s.bytes_swapped || whole.rebuilds != s.rebuilds) {
        throw std::logic_error("schedule: refine's moved prefetch differs from emit_into");
      }
    }
    return s;
  }

  // The same into `s`, its steps' lists cleared rather than made anew (they keep their
  // capacity); every other field back to its default.
  void emit_into(memory_schedule& s, const std::vector<std::size_t>& bytes) const {
    static_assert(sizeof(scheduled_step) == 7 * sizeof(std::vector<std::uint32_t>),
                  "scheduled_step has a field that emit_into does not clear");
    std::vector<scheduled_step> steps = std::move(s.steps);
    std::vector<scheduled_gap> gaps = std::move(s.gaps);
    s = memory_schedule{};
    steps.resize(p_.step_seconds.size());
    for (scheduled_step& st : steps) {
      st.release.clear(), st.drop.clear(), st.offload.clear(), st.prefetch.clear();
      st.rebuild.clear(), st.whole.clear(), st.hold.clear();
    }
    gaps.clear();
    s.steps = std::move(steps);
    s.gaps = std::move(gaps);
    // A swap's three fixed points (a park's too: its offload after its last use, its
    // prefetch before its first).
    auto emit_swap = [&](scheduled_gap sg, bool back) {
      s.steps[sg.release].release.push_back(sg.tensor);
      s.steps[sg.after].offload.push_back(sg.tensor);
      if (back) s.steps[sg.prefetch].prefetch.push_back(sg.tensor);
      s.bytes_swapped += p_.tensors[sg.tensor].bytes;
      sg.compressed = halve_[sg.tensor];
      if (sg.compressed) s.bytes_compressed += p_.tensors[sg.tensor].bytes;
      s.gaps.push_back(sg);
    };
    for (std::uint32_t t = 0; t < p_.tensors.size(); ++t) {
      const auto& u = uses_[t];
      for (std::size_t i = 0; i + 1 < u.size(); ++i) {
        const gap& g = gaps_[t][i];
        if (g.action == gap_action::keep) continue;
        scheduled_gap sg{t, g.action, u[i].step, u[i + 1].step, g.release, g.prefetch};
        if (g.action == gap_action::swap) {
          // Closing at a staged step: it stays on the host (scheduled_gap::to_host).
          sg.to_host = u[i + 1].on_host;
          emit_swap(sg, !sg.to_host);
          continue;
        }
        s.steps[sg.after].drop.push_back(t);
        s.steps[sg.before].rebuild.push_back(t);
        ++s.rebuilds;
        s.gaps.push_back(sg);
      }
    }
    for (std::uint32_t t = 0; t < p_.tensors.size(); ++t) {
      const gap& k = park_[t];
      if (k.action != gap_action::swap) continue;
      scheduled_gap sg{t,         gap_action::swap, uses_[t].back().step, uses_[t].front().step,
                       k.release, k.prefetch};
      sg.wraps = true;
      emit_swap(sg, true);
    }
    for (std::size_t st = 0; st < chain_.size(); ++st) {
      for (std::uint32_t y : chain_[st]) s.steps[st].rebuild.push_back(y), ++s.rebuilds;
    }
    for (std::uint32_t t = 0; t < held_.size(); ++t) {
      for (const auto& [from, to] : held_[t]) s.steps[from].hold.emplace_back(t, to);
    }
    for (std::size_t st = 0; st < staging_.size(); ++st) {
      for (std::uint32_t t : staging_[st]) {
        // Given in host memory there, planned on the device.
        const auto at = static_cast<std::uint32_t>(st);
        const std::size_t i = use_index(t, at);
        const auto& given = p_.tensors[t].uses;
        const std::size_t g = first_use_from(given, at);
        if (i < uses_[t].size() && !uses_[t][i].on_host && g < given.size() &&
            given[g].step == at && given[g].on_host) {
          s.steps[st].whole.push_back(t);
        }
      }
    }
    s.bytes_per_step = bytes;
    s.step_choice = choice_;
    for (std::size_t b : bytes) s.predicted_peak_bytes = std::max(s.predicted_peak_bytes, b);
  }

  // The steps of a memory curve over the planning budget, ascending, and their overflow. A
  // round weighs every idle tensor's gap against them (value), and most steps are under the
  // budget: summed over the gap's steps, that was most of the planner's time.
  struct overflow {
    std::vector<std::uint32_t> step;
    std::vector<std::size_t> bytes;
    std::vector<std::size_t> prefix;  // prefix[i]: the sum of bytes[0, i)
  };

  overflow overflow_of(const std::vector<std::size_t>& bytes) const {
    overflow o;
    o.prefix.push_back(0);
    for (std::uint32_t s = 0; s < bytes.size(); ++s) {
      if (bytes[s] > limit_[s]) {
        o.step.push_back(s);
        o.bytes.push_back(bytes[s] - limit_[s]);
        o.prefix.push_back(o.prefix.back() + o.bytes.back());
      }
    }
    return o;
  }

  // At least value(over, from, to, b), in O(log n): b off every step over the budget in
  // [from, to], and no more than all their overflow.
  static double value_bound(const overflow& over, std::uint32_t from, std::uint32_t to,
                            std::size_t b) {
    const auto i = std::lower_bound(over.step.begin(), over.step.end(), from) - over.step.begin();
    const auto j = std::upper_bound(over.step.begin(), over.step.end(), to) - over.step.begin();
    if (j <= i) return 0.0;
    const auto steps = static_cast<std::size_t>(j - i);
    return static_cast<double>(std::min(b * steps, over.prefix[j] - over.prefix[i]));
  }

  // Overflow removed if `b` bytes leave the device over steps [from, to], summed in integers:
  // exact, as the doubles it was once summed in were for any total a plan reaches (below 2^53
  // bytes), so the same number, without a chain of floating-point additions.
  static double value(const overflow& over, std::uint32_t from, std::uint32_t to, std::size_t b) {
    auto i = static_cast<std::size_t>(std::lower_bound(over.step.begin(), over.step.end(), from) -
                                      over.step.begin());
    std::size_t v = 0;
    for (; i < over.step.size() && over.step[i] <= to; ++i) v += std::min(b, over.bytes[i]);
    return static_cast<double>(v);
  }

  // A drop of `t`'s gap closing at `c`: the seconds of its rebuild chain (its replay, and the
  // replays of dropped tensors the replay touches, which are rebuilt first at `c`), or a
  // negative number when a touched tensor cannot be had at `c` (dead, or away on the host).
  double rebuild_chain_seconds(std::uint32_t t, std::uint32_t c,
                               std::vector<std::uint32_t>& visited) const {
    if (std::find(visited.begin(), visited.end(), t) != visited.end()) return 0.0;
    visited.push_back(t);
    const schedule_tensor& x = p_.tensors[t];
    if (!x.rebuildable) return -1.0;
    double seconds = x.rebuild_seconds;
    for (std::uint32_t y : x.rebuild_touches) {
      if (on_host_at(y, c)) return -1.0;  // staged: its value is in host memory
      if (!alive_at(y, c)) {
        // Dead by then (read by no later step): rebuilt for this replay and freed after it.
        if (std::find(chain_[c].begin(), chain_[c].end(), y) != chain_[c].end()) continue;
        const double chain = rebuild_chain_seconds(y, c, visited);
        if (chain < 0) return -1.0;
        seconds += chain;
        continue;
      }
      if (is_use(y, c)) continue;
      if (parked_at(y, c)) return -1.0;
      const std::uint32_t gi = gap_containing(y, c);
      if (gi == k_none) continue;  // persistent, outside its uses: resident
      const gap& g = gaps_[y][gi];
      if (g.action == gap_action::keep) continue;
      if (g.action == gap_action::swap) return -1.0;
      const double chain = rebuild_chain_seconds(y, c, visited);
      if (chain < 0) return -1.0;
      seconds += chain;
    }
    return seconds;
  }

  // Makes `step` a use of `t` (a rebuild touches it there), splitting its gap; a dropped
  // part closing at `step` is rebuilt there, so its own touches become uses too.
  void add_use(std::uint32_t t, std::uint32_t step) {
    if (is_use(t, step)) return;
    const std::uint32_t gi = gap_containing(t, step);
    if (gi == k_none) return;  // persistent outside its uses: resident
    const gap g = gaps_[t][gi];
    uses_[t].insert(uses_[t].begin() + gi + 1, schedule_use{step, false});
    gaps_[t].insert(gaps_[t].begin() + gi + 1, g);
    if (g.action != gap_action::drop) return;
    rebuild_at(t, step);
    if (!o_.keep_rebuilt) return;
    // Rebuilt at `step`, it may as well stay until its next use where that costs no memory
    // over the budget, saving the replay there.
    gaps_[t][gi + 1] = gap{};
    const std::vector<std::size_t> bytes = memory_curve();
    const std::uint32_t c = uses_[t][gi + 2].step;
    for (std::uint32_t s = step + 1; s < c; ++s) {
      if (bytes[s] > limit_[s]) {
        gaps_[t][gi + 1] = g;
        break;
      }
    }
  }

  // `t` is rebuilt before step `step`: what its replay touches is had there, as a use, or
  // (dead by then) rebuilt there too and held for the step (chain_).
  void rebuild_at(std::uint32_t t, std::uint32_t step) {
    for (std::uint32_t y : p_.tensors[t].rebuild_touches) {
      if (alive_at(y, step)) {
        add_use(y, step);
      } else if (std::find(chain_[step].begin(), chain_[step].end(), y) == chain_[step].end()) {
        chain_[step].push_back(y);
        rebuild_at(y, step);
      }
    }
  }

  // After the greedy rounds: the link is often idle where drops were chosen (a drop was
  // cheaper than a round trip charged its share of the link). Each dropped gap, costliest
  // rebuild first, becomes a swap timed by slack on the current timeline when the schedule
  // still fits and the iteration gets shorter; else it stays dropped.
  void refine() {
    // memory_curve() as the trials change it, kept here: a trial changes only its gap's bytes
    // and the chain rebuilt before the gap's closing step (trial_curve), so one curve is
    // taken, not one per trial (they were a fifth of planning DenseNet-121).
    std::vector<std::size_t> curve = memory_curve();
    if (!all_fit(curve)) return;
    struct candidate {
      std::uint32_t tensor, gap;
      double seconds;
    };
    std::vector<candidate> drops;
    for (std::uint32_t t = 0; t < gaps_.size(); ++t) {
      for (std::uint32_t i = 0; i < gaps_[t].size(); ++i) {
        if (gaps_[t][i].action != gap_action::drop) continue;
        const std::uint32_t a = uses_[t][i].step, c = uses_[t][i + 1].step;
        if (c - a < o_.min_swap_distance) continue;
        // Only from a step that really uses it: a use a rebuild added may be a touch the
        // replay does not need resident (an output it rewrites), so the tensor need not be
        // on the device there to be copied out.
        const auto& own = p_.tensors[t].uses;
        if (!std::binary_search(
                own.begin(), own.end(), schedule_use{a, false},
                [](const schedule_use& x, const schedule_use& y) { return x.step < y.step; })) {
          continue;
        }
        drops.push_back({t, i, p_.tensors[t].rebuild_seconds});
      }
    }
    std::stable_sort(drops.begin(), drops.end(),
                     [](const candidate& x, const candidate& y) { return x.seconds > y.seconds; });
    // Memory-bound replays last (no more than three passes over the tensor at device-memory
    // speed: a BN+ACT or concat replay reads and writes it once): a round trip spends the
    // link on them that a costlier drop's would save more with. DenseNet-121 b32 at a third
    // of its peak swapped the stem's two 98 MiB BN+ReLU outputs first, and the forward's
    // link then had no room for block 1's CONV outputs.
    if (p_.device_bytes_per_s > 0) {
      std::stable_partition(drops.begin(), drops.end(), [&](const candidate& d) {
        return d.seconds >
               3.0 * static_cast<double>(p_.tensors[d.tensor].bytes) / p_.device_bytes_per_s;
      });
    }
    timeline tl = simulate(emit(curve));
    std::vector<std::size_t> trial_bytes, best_bytes;
    for (const candidate& k : drops) {
      throw_if_stopped();
      const std::uint32_t t = k.tensor, a = uses_[t][k.gap].step, c = uses_[t][k.gap + 1].step;
      const double d = copy_seconds(t);
      const std::uint32_t w = last_write_at_or_before(t, a);
      const double off_end = std::max(tl.d2h_done[a], w == k_none ? 0.0 : tl.end[w]) + d;
      const auto rit = std::lower_bound(tl.start.begin() + a + 1, tl.start.begin() + c, off_end);
      const auto r = static_cast<std::uint32_t>(rit - tl.start.begin());
      const std::uint32_t lb = std::max<std::uint32_t>(o_.prefetch_lb, 1);
      if (r >= c || c < r + lb) continue;
      const std::uint32_t earliest =
          o_.prefetch_ub != 0 && c > r + o_.prefetch_ub ? c - o_.prefetch_ub : r;
      std::uint32_t b = c - lb;
      auto pre_end = [&](std::uint32_t x) { return std::max(tl.h2d_done[x], tl.end[x]) + d; };
      while (b > earliest && pre_end(b) + slack(d) > tl.start[c]) --b;
      // The latest prefetch that lands in time can still push back the copies queued after
      // it (at the end of backward, where the first layers' tensors all come back, the link
      // is busy while it idles for most of the iteration): earlier ones hold the memory
      // longer but take the link while it is free. The fastest that fits is kept.
      gap& g = gaps_[t][k.gap];
      const gap before = g;
      gap best = before;
      double best_total = tl.total - 1e-12;
      timeline best_tl, trial_tl;
      const std::vector<std::uint32_t> chain_before = chain_[c];
      // Swapped in every trial, `t` is no longer rebuilt before `c`: the other drops are.
      const std::vector<std::uint32_t> roots = drops_closing_at(c, t);
      trial_emission emission;
      for (std::uint32_t back = 0;; back = back == 0 ? 1 : 2 * back) {
        if (b < earliest + back) break;
        g = gap{gap_action::swap, r, b - back};
        // Swapped, it is no longer rebuilt before `c`: nor is what only its replay needed.
        gather_chain_from(c, roots);
        trial_curve(curve, t, k.gap, chain_before, trial_bytes);
        const std::vector<std::size_t>& bytes = trial_bytes;
        if (!all_fit(bytes)) continue;
        // An earlier prefetch holds its bytes over more steps, which the heap may not find
        // in one run where the plan is full (fragmentation is not modelled): there, it keeps
        // the headroom once more below each step's planning budget (twice the headroom
        // where that is the budget less it).
        const std::size_t headroom = p_.budget_bytes - planning_budget_;
        bool full = false;
        for (std::size_t x = b - back; back != 0 && x <= b && !full; ++x) {
          full = bytes[x] + headroom > limit_[x];
        }
        if (full) continue;
        simulate_into(trial_tl, emitted_trial(emission, t, k.gap, bytes));
        if (trial_tl.total < best_total) {
          best_total = trial_tl.total;
          best = g;
          std::swap(best_tl, trial_tl);  // trial_tl's lists are rewritten by the next trial
          std::swap(best_bytes, trial_bytes);
        }
      }
      g = best;
      if (best.action == gap_action::swap) {
        tl = std::move(best_tl);
        gather_chain_from(c, roots);
        std::swap(curve, best_bytes);
      } else {
        chain_[c] = chain_before;
      }
    }
  }

  // refine's trial: `curve` (memory_curve() with gap `gi` of `t` dropped and `chain_before`
  // rebuilt before its closing step c) with that gap now as gaps_ says and chain_[c] as it is
  // now, into `out`. Nothing else differs: a swap's trial adds no use (the uses its drop's
  // replay added stay) and holds nothing (hold_chains runs after refine).
  void trial_curve(const std::vector<std::size_t>& curve, std::uint32_t t, std::uint32_t gi,
                   const std::vector<std::uint32_t>& chain_before,
                   std::vector<std::size_t>& out) const {
    out = curve;
    const std::uint32_t a = uses_[t][gi].step, c = uses_[t][gi + 1].step;
    const std::size_t b = p_.tensors[t].bytes;
    const gap& g = gaps_[t][gi];
    auto add = [&](std::uint32_t from, std::uint32_t to_inclusive) {
      for (std::uint32_t s = from; s <= to_inclusive && s < out.size(); ++s) out[s] += b;
    };
    if (!uses_[t][gi].on_host) {
      if (g.action == gap_action::keep) add(a + 1, c - 1);
      if (g.action == gap_action::swap) add(a + 1, g.release - 1), add(g.prefetch + 1, c - 1);
    }
    for (std::uint32_t y : chain_before) out[c] -= p_.tensors[y].bytes;
    for (std::uint32_t y : chain_[c]) out[c] += p_.tensors[y].bytes;
    if (checking_trials()) {
      if (out != memory_curve()) {
        throw std::logic_error("schedule: refine's trial curve differs from memory_curve()");
      }
    }
  }

  // Per step, the bytes of what it uses (slices for uses in host memory), its extra bytes and
  // the dead tensors rebuilt there: what no action can take off it.
  std::vector<std::size_t> fixed_bytes() const {
    std::vector<std::size_t> fixed(p_.step_seconds.size(), 0);
    // A pinned tensor stays between its uses: added over those steps as differences, as
    // memory_curve does (the spans are long and this runs every greedy round).
    std::vector<std::int64_t> delta(fixed.size() + 1, 0);
    for (std::uint32_t t = 0; t < uses_.size(); ++t) {
      const auto& u = uses_[t];
      for (std::size_t i = 0; i < u.size(); ++i) {
        fixed[u[i].step] += u[i].on_host ? u[i].slice_bytes : p_.tensors[t].bytes;
        if (!p_.tensors[t].pinned || i + 1 == u.size() || u[i].step + 1 >= u[i + 1].step) {
          continue;
        }
        delta[u[i].step + 1] += static_cast<std::int64_t>(p_.tensors[t].bytes);
        delta[u[i + 1].step] -= static_cast<std::int64_t>(p_.tensors[t].bytes);
      }
    }
    std::int64_t between = 0;  // bytes of pinned tensors between their uses at step s
    for (std::size_t s = 0; s < fixed.size(); ++s) {
      between += delta[s];
      fixed[s] += static_cast<std::size_t>(between) + step_extra(s);
      for (std::uint32_t y : chain_[s]) fixed[s] += p_.tensors[y].bytes;
    }
    return fixed;
  }

  // What a drop of `t` rebuilt before step `c` adds to what nothing can take off `c`: the
  // other tensors its chain (`chain`, from rebuild_chain_seconds) rebuilds there, and those
  // its replays touch that are idle at `c` now (kept there, then uses).
  std::size_t pinned_by_rebuild(std::uint32_t t, std::uint32_t c,
                                const std::vector<std::uint32_t>& chain) const {
    std::size_t pinned = 0;
    std::vector<std::uint32_t> seen;
    for (std::uint32_t z : chain) {
      if (z != t) pinned += p_.tensors[z].bytes;
      for (std::uint32_t y : p_.tensors[z].rebuild_touches) {
        if (std::find(chain.begin(), chain.end(), y) != chain.end() ||
            std::find(seen.begin(), seen.end(), y) != seen.end() || !alive_at(y, c) ||
            is_use(y, c) || parked_at(y, c) || gap_containing(y, c) == k_none) {
          continue;
        }
        seen.push_back(y);
        pinned += p_.tensors[y].bytes;
      }
    }
    return pinned;
  }

  // After the rest is planned: a micro-tensor that a staged step reaches in host memory stays
  // whole on the device there instead where every step still fits and the iteration gets
  // shorter (its slices no longer cross the link; a copy in or out may take their place),
  // those saving the most copy time per byte first. So the schedule decides, per tensor and
  // step, what staging the split steps need, by the same model as its swaps and drops.
  void unstage() {
    if (!all_fit(memory_curve())) return;
    struct candidate {
      std::uint32_t tensor, step;
      double per_byte;
    };
    std::vector<candidate> staged;
    for (std::size_t st = 0; st < staging_.size(); ++st) {
      for (std::uint32_t t : staging_[st]) {
        const std::size_t i = use_index(t, static_cast<std::uint32_t>(st));
        if (i == uses_[t].size() || !uses_[t][i].on_host || !(uses_[t][i].staged_seconds > 0)) {
          continue;
        }
        const std::size_t more =
            p_.tensors[t].bytes - std::min(p_.tensors[t].bytes, uses_[t][i].slice_bytes);
        staged.push_back(
            {t, static_cast<std::uint32_t>(st),
             uses_[t][i].staged_seconds / static_cast<double>(std::max<std::size_t>(more, 1))});
      }
    }
    std::stable_sort(staged.begin(), staged.end(), [](const candidate& x, const candidate& y) {
      return x.per_byte > y.per_byte;
    });
    double total = simulate(emit(memory_curve())).total;
    timeline trial_tl;
    for (const candidate& k : staged) {
      const std::size_t i = use_index(k.tensor, k.step);
      auto& u = uses_[k.tensor];
      // Swapped towards this use (never brought back): whole, it would need a prefetch.
      if (i > 0 && !u[i - 1].on_host && gaps_[k.tensor][i - 1].action != gap_action::keep) {
        continue;
      }
      u[i].on_host = false;
      const std::vector<std::size_t> bytes = memory_curve();
      double trial = total;
      if (all_fit(bytes)) {
        simulate_into(trial_tl, emitted(bytes));
        trial = trial_tl.total;
      }
      if (trial < total) {
        total = trial;
      } else {
        u[i].on_host = true;
      }
    }
  }

  // chain_[c] anew from the drops whose replays run before step `c`: the dead tensors those
  // replays touch, and theirs in turn.
  void gather_chain(std::uint32_t c) {
    gather_chain_from(c, drops_closing_at(c));
  }

  // The tensors with a dropped gap that closes at step `c` (those rebuilt before it), but
  // `except` (a tensor has one gap closing at `c` at most).
  std::vector<std::uint32_t> drops_closing_at(std::uint32_t c,
                                              std::uint32_t except = k_none) const {
    std::vector<std::uint32_t> roots;
    for (std::uint32_t t = 0; t < gaps_.size(); ++t) {
      if (t == except) continue;
      for (std::uint32_t i = 0; i < gaps_[t].size(); ++i) {
        if (gaps_[t][i].action == gap_action::drop && uses_[t][i + 1].step == c) {
          roots.push_back(t);
        }
      }
    }
    return roots;
  }

  // gather_chain with the drops closing at `c` given (`roots`: drops_closing_at(c)).
  void gather_chain_from(std::uint32_t c, std::vector<std::uint32_t> pending) {
    chain_[c].clear();
    while (!pending.empty()) {
      const std::uint32_t t = pending.back();
      pending.pop_back();
      for (std::uint32_t y : p_.tensors[t].rebuild_touches) {
        if (alive_at(y, c) || held_at(y, c) ||
            std::find(chain_[c].begin(), chain_[c].end(), y) != chain_[c].end()) {
          continue;
        }
        chain_[c].push_back(y);
        pending.push_back(y);
      }
    }
  }

  // Last: a step whose memory, once every action is placed, leaves room for a faster way to
  // run it takes the fastest that fits under the planning budget (the room is then planned
  // for it); and the timeline counts each step at the fastest way whose workspace fits the
  // whole budget, as workspace selection picks at run time from what is free (the headroom
  // left for fragmentation included).
  void widen_workspaces() {
    std::vector<std::size_t> bytes = memory_curve();
    if (!all_fit(bytes)) return;
    // The fastest option no slower than the one planned whose workspace, with the step's
    // other bytes, stays within `bound`.
    auto fastest_within = [&](std::size_t st, std::size_t others, std::size_t bound) {
      for (std::uint32_t j = 0; j < choice_[st]; ++j) {
        if (others + p_.step_options[st][j].extra_bytes <= bound) return j;
      }
      return choice_[st];
    };
    std::vector<double> timing(bytes.size(), 0.0);
    for (std::size_t st = 0; st < bytes.size(); ++st) {
      if (!has_options(st)) continue;
      const std::size_t others = bytes[st] - step_extra(st);
      choice_[st] = fastest_within(st, others, limit_[st]);
      // The fastest selection can take from the whole budget (the planned one always fits).
      timing[st] = p_.step_options[st][choice_[st]].seconds;
      for (const step_option& o : selectable(st)) {
        if (others + o.extra_bytes <= p_.budget_bytes) {
          timing[st] = std::min(timing[st], o.seconds);
          break;
        }
      }
    }
    timing_seconds_ = std::move(timing);
  }

  bool all_fit(const std::vector<std::size_t>& bytes) const {
    for (std::size_t s = 0; s < bytes.size(); ++s) {
      if (bytes[s] > limit_[s]) return false;
    }
    return true;
  }

  // Weighs every tensor idle at `worst` and commits the best action; false when none.
  bool commit_best(std::uint32_t worst, const std::vector<std::size_t>& bytes, const timeline& tl) {
    struct choice {
      std::uint32_t tensor = k_none, gap = 0;
      gap_action action = gap_action::keep;
      std::uint32_t release = 0, prefetch = 0;
      double score = std::numeric_limits<double>::infinity();
      bool park = false;
    } best;
    const std::size_t steps = p_.step_seconds.size();
    std::vector<std::uint32_t> visited;
    // chain_room: per step, the bytes nothing can take off it (what it uses, its extra bytes
    // and rebuild chains): the floor a drop's rebuild must leave room above.
    std::vector<std::size_t> fixed;
    if (o_.chain_room) fixed = fixed_bytes();
    const overflow over = overflow_of(bytes);
    for (std::uint32_t t = 0; t < p_.tensors.size(); ++t) {
      const schedule_tensor& x = p_.tensors[t];
      if (x.bytes == 0 || x.bytes < o_.min_bytes) continue;
      if (const auto k = park_candidate(t, worst, over, tl); k && k->score < best.score) {
        best = {t, 0, gap_action::swap, k->release, k->prefetch, k->score, true};
      }
      if (x.pinned) continue;
      const std::uint32_t gi = gap_containing(t, worst);
      if (gi == k_none || opens_on_host(t, gi) || gaps_[t][gi].action == gap_action::drop) {
        continue;
      }
      const std::uint32_t a = uses_[t][gi].step, c = uses_[t][gi + 1].step;
      const bool to_host = uses_[t][gi + 1].on_host;
      if (gaps_[t][gi].action == gap_action::swap) {
        // Swapped, but `worst` lies outside the window: widen it to `worst`, paying the wait
        // for a copy that has not landed by then (the part not already paid).
        const gap& g = gaps_[t][gi];
        double cost = 0;
        std::uint32_t from = 0, to = 0, release = g.release, prefetch = g.prefetch;
        if (worst < g.release) {
          const double landed = timeline::arrival(tl.offloaded[a], t);
          cost =
              std::max(0.0, landed - tl.start[worst]) - std::max(0.0, landed - tl.start[g.release]);
          from = worst, to = g.release - 1, release = worst;
        } else if (worst > g.prefetch && c >= worst + std::max<std::uint32_t>(o_.prefetch_lb, 1)) {
          const double old_end = timeline::arrival(tl.prefetched[g.prefetch], t);
          const double d = copy_seconds(t);
          const double new_end = std::max(tl.h2d_done[worst], tl.end[worst]) + d;
          cost = std::max(0.0, new_end - tl.start[c]) - std::max(0.0, old_end - tl.start[c]);
          from = g.prefetch + 1, to = worst, prefetch = worst;
        } else {
          continue;
        }
        const double v = value(over, from, to, x.bytes);
        if (v <= 0) continue;
        const double score = cost > 0 ? cost / v : -v;
        if (score < best.score) best = {t, gi, gap_action::swap, release, prefetch, score};
        continue;
      }
      auto consider = [&](gap_action action, std::uint32_t r, std::uint32_t b, double cost) {
        // Most candidates cannot beat the best so far even if they removed all they could:
        // skip their sum (the same choice, most of the planner's time saved: a score only
        // grows as v shrinks, and only a smaller one is taken).
        const double most = value_bound(over, r, b, x.bytes);
        if (most <= 0 || (cost > 0 ? cost / most : -most) >= best.score) return;
        const double v = value(over, r, b, x.bytes);
        if (v <= 0) return;
        // Least added time per byte-step of overflow removed; among free actions, the most
        // overflow removed.
        const double score = cost > 0 ? cost / v : -v;
        if (score < best.score) best = {t, gi, action, r, b, score};
      };
      if (to_host) {
        // Closing at a staged step, which takes it from host memory as well: offloaded after
        // `a` with its copy hidden, it never comes back, and the staged step no longer copies
        // it out on the compute stream (its copy leaves that step's time).
        if (!o_.allow_swap || c - a < o_.min_swap_distance) continue;
        const timed_swap k = time_swap(t, a, c, c, worst, worst, tl, false);
        consider(gap_action::swap, k.release, c - 1,
                 k.stall + (p_.tensors[t].staged_fp16
                                ? o_.link_charge * copy_seconds(t) - staging_copy_seconds(t)
                                : (o_.link_charge - 1.0) * copy_seconds(t)));
        continue;
      }
      if (o_.allow_drop && x.rebuildable) {
        visited.clear();
        const double chain = rebuild_chain_seconds(t, c, visited);
        // What its chain rebuilds besides it is on the device together at `c`: a chain that
        // puts `c` over the budget trades one overflow for another, at a step where those
        // tensors are then in use and nothing can take them off again (chain_room).
        const bool room =
            !o_.chain_room || fixed[c] + pinned_by_rebuild(t, c, visited) <= limit_[c];
        if (chain >= 0 && room) {
          consider(gap_action::drop, a + 1, c - 1, chain);
        }
      }
      if (!o_.allow_swap || c - a < o_.min_swap_distance) continue;
      if (c < worst + std::max<std::uint32_t>(o_.prefetch_lb, 1)) continue;
      // Released at `worst` at the latest, prefetched after it at the earliest.
      const timed_swap k = time_swap(t, a, c, c, worst, worst, tl);
      // A hidden copy still takes the link from later swaps: part of its time is charged.
      const double stall = k.stall + o_.link_charge * 2.0 * copy_seconds(t);
      if (k.release <= k.prefetch && k.prefetch < steps) {
        consider(gap_action::swap, k.release, k.prefetch, stall);
      }
    }
    // A slower way to run `worst` itself, with less workspace.
    std::uint32_t option = k_none;
    if (has_options(worst)) {
      const auto& o = p_.step_options[worst];
      const step_option& now = o[choice_[worst]];
      const std::size_t over = bytes[worst] - std::min(bytes[worst], limit_[worst]);
      for (std::uint32_t j = choice_[worst] + 1; j < o.size(); ++j) {
        if (o[j].extra_bytes >= now.extra_bytes) continue;
        const double v = static_cast<double>(std::min(now.extra_bytes - o[j].extra_bytes, over));
        const double cost = o[j].seconds - now.seconds;
        const double score = cost > 0 ? cost / v : -v;
        if (score < best.score) best.score = score, option = j;
      }
    }
    if (option != k_none) {
      choice_[worst] = option;
      return true;
    }
    if (best.tensor == k_none) return false;
    const std::uint32_t t = best.tensor;
    gap& g = best.park ? park_[t] : gaps_[t][best.gap];
    g.action = best.action;
    g.release = best.release;
    g.prefetch = best.prefetch;
    if (best.action == gap_action::drop) rebuild_at(t, uses_[t][best.gap + 1].step);
    return true;
  }

  struct timed_swap {
    std::uint32_t release = 0, prefetch = 0;
    double stall = 0;
  };

  // A round trip of `t` on the current timeline, out after step `out` and back for step
  // `in`. The offload is issued after `out`, behind the copies issued up to it, once its
  // writer is done; released before the first step of (out, release_end) that starts after
  // it lands, or before `latest`, waiting for it. The prefetch is issued after the latest
  // step of [earliest, in - lb] whose copy lands before step `in` starts, with the slack
  // threshold (LDFG's) to spare, the prefetch bounds (TFLMS's lb/ub) narrowing the range; or
  // after `earliest`, step `in` then waiting for it. The stall counts those waits and the
  // copies issued later on each stream, pushed back by the copy as far as their slack does
  // not absorb it.
  // With `back` false there is no prefetch (prefetch = in - 1: the tensor stays on the host).
  timed_swap time_swap(std::uint32_t t, std::uint32_t out, std::uint32_t in,
                       std::uint32_t release_end, std::uint32_t latest, std::uint32_t earliest,
                       const timeline& tl, bool back = true) const {
    const double d = copy_seconds(t);
    timed_swap k;
    const std::uint32_t w = last_write_at_or_before(t, out);
    const double off_end = std::max(tl.d2h_done[out], w == k_none ? 0.0 : tl.end[w]) + d;
    const auto rit =
        std::lower_bound(tl.start.begin() + out + 1, tl.start.begin() + release_end, off_end);
    k.release = static_cast<std::uint32_t>(rit - tl.start.begin());
    if (k.release > latest) {
      k.release = latest;
      k.stall += off_end - tl.start[latest];
    }
    k.stall += std::max(0.0, d - tl.d2h_slack_after[out]);
    if (!back) {
      k.prefetch = in - 1;
      return k;
    }
    const std::uint32_t lb = std::max<std::uint32_t>(o_.prefetch_lb, 1);
    if (o_.prefetch_ub != 0 && in > earliest + o_.prefetch_ub) earliest = in - o_.prefetch_ub;
    auto pre_end = [&](std::uint32_t b) { return std::max(tl.h2d_done[b], tl.end[b]) + d; };
    k.prefetch = in - lb;
    while (k.prefetch > earliest && pre_end(k.prefetch) + slack(d) > tl.start[in]) --k.prefetch;
    if (pre_end(k.prefetch) > tl.start[in]) k.stall += pre_end(k.prefetch) - tl.start[in];
    k.stall += std::max(0.0, d - tl.h2d_slack_after[k.prefetch]);
    return k;
  }

  struct park_choice {
    std::uint32_t release = 0, prefetch = 0;
    double score = 0;
  };

  // Parking persistent `t` (offloaded after its last use L, released before step r > L, on
  // the host at the iteration boundary, prefetched after step p before its first use F) to
  // take it off `worst`, which lies outside [F, L]: timed by slack as a swap is, on the
  // current timeline; none when it is not parkable, already parked, or cannot be timed.
  std::optional<park_choice> park_candidate(std::uint32_t t, std::uint32_t worst,
                                            const overflow& over, const timeline& tl) const {
    const schedule_tensor& x = p_.tensors[t];
    const auto& u = uses_[t];
    const auto steps = static_cast<std::uint32_t>(p_.step_seconds.size());
    if (!o_.allow_swap || !x.parkable || !x.persistent || u.empty() ||
        park_[t].action != gap_action::keep) {
      return std::nullopt;
    }
    const std::uint32_t first = u.front().step, last = u.back().step;
    const std::uint32_t lb = std::max<std::uint32_t>(o_.prefetch_lb, 1);
    if ((worst >= first && worst <= last) || last + 1 >= steps || first < lb) return std::nullopt;
    if (worst < first && first < worst + lb) return std::nullopt;
    // Released before any later step (`worst` at the latest when that lies after its last
    // use), prefetched after any earlier one (`worst` at the earliest when that lies before
    // its first use).
    const timed_swap k = time_swap(t, last, first, steps, worst > last ? worst : steps - 1,
                                   worst < first ? worst : 0, tl);
    // No share of the link is charged beyond that (link_charge): it is there to prefer a
    // cheap rebuild to a hidden round trip, and a persistent tensor has no rebuild; charged,
    // a park lost to slower workspaces where its copies hide (VGG16 b64 at half its peak:
    // 0.937 of liveness's speed charged, 0.952 not).
    const double v =
        value(over, k.release, steps - 1, x.bytes) + value(over, 0, k.prefetch, x.bytes);
    if (v <= 0) return std::nullopt;
    return park_choice{k.release, k.prefetch, k.stall > 0 ? k.stall / v : -v};
  }

  const schedule_problem& p_;
  const schedule_options& o_;
  const std::function<bool()>* stop_ = nullptr;  // asked each round (plan_memory_schedule)

  void throw_if_stopped() const {
    if (stop_ != nullptr && *stop_ && (*stop_)()) {
      throw interrupted("stopped while planning the memory schedule");
    }
  }
  // What each simulation and trial emission writes into, kept for their capacity.
  struct scratch {
    memory_schedule schedule;
    std::vector<double> offload_end, prefetch_end, d2h_at, h2d_at;
    std::vector<std::vector<std::uint32_t>> ready_before;
  };
  mutable scratch scratch_;
  timeline round_timeline_;  // the greedy round's
  std::vector<gap> park_;    // per tensor: its gap around the iteration's end (swap: parked)
  std::vector<bool> halve_;  // per tensor: its swaps move fp16 (compress, and compressible)
  std::vector<std::vector<schedule_use>> uses_;
  std::vector<std::vector<gap>> gaps_;
  std::vector<std::vector<std::uint32_t>> chain_;  // per step: dead tensors rebuilt for replays
  // Per tensor (empty: none held): the runs [from, to] over which a dead tensor rebuilt at
  // `from` is kept for the replays that read it up to `to` (hold_chains).
  std::vector<std::vector<std::pair<std::uint32_t, std::uint32_t>>> held_;
  // Per step (empty: no staged step): the tensors whose staging changes its time.
  std::vector<std::vector<std::uint32_t>> staging_;
  std::vector<std::uint32_t> choice_;   // per step: the option taken
  std::vector<double> timing_seconds_;  // per step: the time counted (when set)
  std::size_t planning_budget_ = 0;
  std::vector<std::size_t> limit_;  // per step: planning_budget_, a staged step's the budget
};

}  // namespace

const char* to_string(gap_action a) noexcept {
  switch (a) {
    case gap_action::keep:
      return "keep";
    case gap_action::swap:
      return "swap";
    case gap_action::drop:
      return "drop";
  }
  return "?";
}

void schedule_options::validate() const {
  if (!(headroom >= 0.0 && headroom < 1.0)) {
    throw invalid_argument("schedule headroom " + std::to_string(headroom) +
                           " is out of range: expected a fraction of the budget in [0, 1)");
  }
  if (!(link_charge >= 0.0) || !std::isfinite(link_charge)) {
    throw invalid_argument("schedule link charge " + std::to_string(link_charge) +
                           " is out of range: expected a finite share >= 0 of a swap's link time");
  }
  if (!(slack_seconds >= 0.0) || !std::isfinite(slack_seconds)) {
    throw invalid_argument("schedule slack " + std::to_string(slack_seconds) +
                           " s is out of range: expected a finite time >= 0 that a prefetch "
                           "must land before its step");
  }
  if (!(slack_copy_share >= 0.0) || !std::isfinite(slack_copy_share)) {
    throw invalid_argument("schedule slack share " + std::to_string(slack_copy_share) +
                           " is out of range: expected a finite share >= 0 of a prefetch's "
                           "copy time that it must land before its step");
  }
  if (prefetch_ub != 0 && prefetch_lb > prefetch_ub) {
    throw invalid_argument("schedule prefetch lower bound " + std::to_string(prefetch_lb) +
                           " is greater than its upper bound " + std::to_string(prefetch_ub) +
                           ": expected lb <= ub (steps between a prefetch and its use), or "
                           "ub = 0 for no upper bound");
  }
  if (min_swap_distance < 2) {
    throw invalid_argument("schedule minimum swap distance " + std::to_string(min_swap_distance) +
                           " is out of range: a swap needs at least 2 steps between two uses");
  }
}

schedule_options schedule_options::from_environment() {
  schedule_options o;
  const std::string what = option_string("MEMWEAVE_SCHEDULE");
  o.allow_swap = what != "drop";
  o.allow_drop = what != "swap";
  // Unset: 0.08, and the executor may try half of it (headroom_auto); set: that alone.
  if (const auto headroom = option_double("MEMWEAVE_SCHEDULE_HEADROOM")) {
    o.headroom = *headroom;
    o.headroom_auto = false;
  }
  // Unset: 0, and the executor also runs a threshold of 1/16384 of the budget
  // (min_bytes_auto); set: that threshold alone.
  if (const auto min_bytes = option_bytes("MEMWEAVE_SCHEDULE_MIN_BYTES")) {
    o.min_bytes = *min_bytes;
    o.min_bytes_auto = false;
  }
  o.min_swap_distance = static_cast<std::uint32_t>(*option_int("MEMWEAVE_SCHEDULE_MIN_DISTANCE"));
  o.max_actions = static_cast<std::size_t>(*option_int("MEMWEAVE_SCHEDULE_MAX_ACTIONS"));
  // Unset: the executor tries several shares (link_charge_auto); set: that share alone.
  if (const auto charge = option_double("MEMWEAVE_SCHEDULE_LINK_CHARGE")) {
    o.link_charge = *charge;
    o.link_charge_auto = false;
  }
  // Unset: no fixed margin, and the executor tries margins of a share of each copy
  // (slack_auto); set: that margin alone.
  if (const auto slack = option_double("MEMWEAVE_SCHEDULE_SLACK_MS")) {
    o.slack_seconds = *slack / 1e3;
    o.slack_auto = false;
  }
  o.prefetch_lb = static_cast<std::uint32_t>(*option_int("MEMWEAVE_SCHEDULE_PREFETCH_LB"));
  o.prefetch_ub = static_cast<std::uint32_t>(*option_int("MEMWEAVE_SCHEDULE_PREFETCH_UB"));
  o.compress = option_string("MEMWEAVE_SCHEDULE_COMPRESS") == "fp16";
  // auto: without, and the executor runs the other way too (keep_rebuilt_auto).
  const std::string keep = option_string("MEMWEAVE_SCHEDULE_KEEP_REBUILT");
  o.keep_rebuilt = keep == "yes";
  o.keep_rebuilt_auto = keep == "auto";
  // auto: the ladder, and the executor runs the mode's algorithms too.
  const std::string conv_mode = option_string("MEMWEAVE_SCHEDULE_CONV_MODE");
  o.conv_mode_workspaces = conv_mode == "mode";
  o.conv_mode_workspaces_auto = conv_mode == "auto";
  if (o.prefetch_ub != 0 && o.prefetch_lb > o.prefetch_ub) {
    throw invalid_argument(
        "MEMWEAVE_SCHEDULE_PREFETCH_LB=" + std::to_string(o.prefetch_lb) +
        " is greater than MEMWEAVE_SCHEDULE_PREFETCH_UB=" + std::to_string(o.prefetch_ub) +
        ": expected lb <= ub, or MEMWEAVE_SCHEDULE_PREFETCH_UB=0 for no "
        "upper bound");
  }
  return o;
}

bool memory_schedule_cannot_fit(const schedule_problem& problem, const schedule_options& options,
                                std::uint32_t* step, std::size_t* floor_bytes) {
  const std::size_t steps = problem.step_seconds.size();
  if (steps == 0) return false;
  // Per step, what stays whatever the greedy does (a difference array over step ranges).
  std::vector<std::int64_t> delta(steps + 1, 0);
  auto add = [&](std::size_t from, std::size_t to_inclusive, std::size_t b) {
    if (from > to_inclusive || to_inclusive >= steps) return;
    delta[from] += static_cast<std::int64_t>(b);
    delta[to_inclusive + 1] -= static_cast<std::int64_t>(b);
  };
  for (const schedule_tensor& x : problem.tensors) {
    if (x.bytes == 0) continue;
    const auto& u = x.uses;
    // commit_best weighs no action on a tensor below min_bytes, parks or not.
    const bool movable = x.bytes >= options.min_bytes;
    if (u.empty()) {
      if (x.persistent) add(0, steps - 1, x.bytes);
      continue;
    }
    for (const schedule_use& use : u)
      add(use.step, use.step, use.on_host ? use.slice_bytes : x.bytes);
    if (x.persistent && !(movable && x.parkable && options.allow_swap)) {
      if (u.front().step > 0) add(0, u.front().step - 1, x.bytes);
      add(u.back().step + 1, steps - 1, x.bytes);
    }
    for (std::size_t i = 0; i + 1 < u.size(); ++i) {
      if (u[i].on_host) continue;  // in host memory until its next use
      // Any action the greedy may take on this gap counts as taking the tensor off every step
      // inside it (generous: swaps keep it near their ends), so the floor is never too high.
      const std::uint32_t a = u[i].step, c = u[i + 1].step;
      const bool swap = options.allow_swap && c - a >= options.min_swap_distance;
      const bool drop = options.allow_drop && x.rebuildable && !u[i + 1].on_host;
      if (!movable || x.pinned || (!swap && !drop)) add(a + 1, c - 1, x.bytes);
    }
  }
  std::int64_t run = 0;
  for (std::size_t s = 0; s < steps; ++s) {
    run += delta[s];
    std::size_t extra = s < problem.step_extra_bytes.size() ? problem.step_extra_bytes[s] : 0;
    if (s < problem.step_options.size()) {
      for (const step_option& o : problem.step_options[s]) extra = std::min(extra, o.extra_bytes);
    }
    const std::size_t floor = static_cast<std::size_t>(run) + extra;
    if (floor > problem.budget_bytes) {
      if (step != nullptr) *step = static_cast<std::uint32_t>(s);
      if (floor_bytes != nullptr) *floor_bytes = floor;
      return true;
    }
  }
  return false;
}

memory_schedule plan_memory_schedule(const schedule_problem& problem,
                                     const schedule_options& options,
                                     const std::function<bool()>& stop) {
  options.validate();
  if (!(problem.link_bytes_per_s > 0.0) || !std::isfinite(problem.link_bytes_per_s)) {
    throw invalid_argument("schedule: link speed " + std::to_string(problem.link_bytes_per_s) +
                           " bytes/s is not a positive finite number");
  }
  if (!(problem.device_bytes_per_s >= 0.0) || !std::isfinite(problem.device_bytes_per_s)) {
    throw invalid_argument("schedule: device memory speed " +
                           std::to_string(problem.device_bytes_per_s) +
                           " bytes/s is not a finite number >= 0 (0: unknown)");
  }
  if (!(problem.copy_latency_s >= 0.0) || !std::isfinite(problem.copy_latency_s)) {
    throw invalid_argument("schedule: copy latency " + std::to_string(problem.copy_latency_s) +
                           " s is not a finite time >= 0");
  }
  // Sized to the repeats of one weighing (recent_plans.hpp). Kept under the options the
  // planner reads: the executor's own (which workspace shares to plan, whether to bound the
  // plan, which controls were automatic) are reset, so the run finds what its weighing's
  // trials (which take no bound) planned.
  static recent_plans<schedule_options, memory_schedule> recent(64, std::size_t{64} << 20);
  schedule_options key = options;
  const schedule_options defaults;
  key.bound = defaults.bound;
  key.workspace_share = defaults.workspace_share;
  key.conv_mode_workspaces = defaults.conv_mode_workspaces;
  key.headroom_auto = defaults.headroom_auto;
  key.min_bytes_auto = defaults.min_bytes_auto;
  key.link_charge_auto = defaults.link_charge_auto;
  key.slack_auto = defaults.slack_auto;
  key.keep_rebuilt_auto = defaults.keep_rebuilt_auto;
  key.conv_mode_workspaces_auto = defaults.conv_mode_workspaces_auto;
  if (std::optional<memory_schedule> known = recent.find(problem, key)) return std::move(*known);
  memory_schedule planned = planner(problem, options, &stop).run();
  recent.insert(problem, key, planned);
  return planned;
}

double simulate_memory_schedule(const schedule_problem& problem, const memory_schedule& schedule) {
  const schedule_options defaults;
  MEMWEAVE_EXPECTS(schedule.steps.size() == problem.step_seconds.size(),
                   "the schedule has " + std::to_string(schedule.steps.size()) +
                       " steps, the problem " + std::to_string(problem.step_seconds.size()));
  planner replay(problem, defaults);
  replay.take_compression_from(schedule);
  return replay.simulate(schedule).total;
}

void require_exact(const schedule_options& options, const std::string& context) {
  if (!options.compress) return;
  throw invalid_argument(
      context +
      ": FP16 compression of swapped tensors (MEMWEAVE_SCHEDULE_COMPRESS=fp16) "
      "is lossy: results are not bit-identical to baseline; unset "
      "MEMWEAVE_SCHEDULE_COMPRESS (or set it to none, schedule_options::compress "
      "= false) for an exact run");
}

}  // namespace memweave
