// The memory schedule: one training iteration repeats exactly, so what happens to every
// tensor under a budget is planned once, ahead of time (TFLMS/LDFG's graph rewriting,
// Capuchin's cost choice), instead of being decided by LRU when the heap cannot serve.
//
// The planner sees an iteration as steps (the route) with a modelled time each, and tensors
// known only by key: their bytes (heap-rounded), the steps that use them, and, for those a
// cheap layer can rebuild, what rebuilding costs and reads. Between two consecutive uses of a
// tensor lies a gap; for each gap the schedule says one of
//   keep      it stays on the device;
//   swap      offloaded after the gap's first use, its memory released at step `release`
//             (the compute stream first waits for the copy), prefetched after step
//             `prefetch` into fresh memory, ready for the gap's last use;
//   drop      freed after the gap's first use and rebuilt (its producer's forward replayed)
//             right before the gap's last use; the replay's reads become uses of theirs.
// A persistent tensor (a parameter, a momentum) also has the gap from its last use around
// the iteration's end to its first use: parked, it is offloaded after its last use, released
// before a later step, and is on the host at the iteration boundary, prefetched after a step
// before its first use (VGG16's FC weights, idle while the convolutions run both ways).
// It picks gaps greedily at the step most over budget: the action that removes the most
// overflow per second it adds to the iteration (a swap whose copies hide under compute adds
// nothing), timing each swap by slack (LDFG: the offload starts once its writer is done and
// the link is free, the release waits for the copy's arrival, the prefetch is issued as late
// as lets it land before the step that needs it). Copies run in issue order on one stream per
// direction, both directions overlapping compute and each other, as on the device.
// A TSPLIT staged step reaches some tensors in host memory, slice by slice
// (schedule_use::on_host): a gap closing at such a use is kept or swapped one way (never
// prefetched), one opening there takes no action, and after the greedy rounds the planner
// keeps whole on the device those the staged step has room for where that saves time. A
// staged step is planned within the whole budget (its micro-steps are fitted to it), every
// other step within the planning budget the headroom leaves.
// A tensor dead by the time a replay needs it is rebuilt for that replay and freed after it
// (a chain); one that replays need at several steps stays from the first to the last where
// the steps between have room (scheduled_step::hold).
//
// Pure arithmetic on plain data: knows no engine type. Thread-safe: planning shares only
// the process's recent plans (schedule/recent_plans.hpp), behind a lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace memweave {

/// One use of a tensor by a step.
struct schedule_use {
  std::uint32_t step = 0;
  bool writes = false;  ///< the step writes the tensor (an offload after it waits for it)
  /// The step reaches the tensor in host memory, slice by slice (a TSPLIT staged step): it
  /// holds no device bytes of it there, and from here to its next use the tensor is in host
  /// memory (that use, on the device, fetches it: the caller puts that copy in its time). A
  /// gap opening at such a use takes no action; one closing there is kept (the staged step
  /// copies the tensor out first, charged to it at the link's rate) or swapped one way
  /// (offloaded with its copy timed by slack, never brought back: scheduled_gap::to_host).
  bool on_host = false;
  /// On host: the device bytes of its slices in the step's micro buffer, and the seconds its
  /// slices' copies add to the step. Where the step has room for the whole tensor and that
  /// makes the iteration shorter, the planner keeps it on the device there instead
  /// (scheduled_step::whole): copied in first if it comes from host memory, out at its next
  /// use if that is in host memory.
  std::size_t slice_bytes = 0;
  double staged_seconds = 0.0;
  bool operator==(const schedule_use&) const = default;
};

/// A tensor as the planner sees it.
struct schedule_tensor {
  std::size_t bytes = 0;  ///< device bytes it holds (heap-rounded)
  /// The bytes a copy of it moves (its own, unrounded; 0: `bytes`). The planner charges its
  /// copies `bytes`, a little more; the lower bound charges these (bound_memory_schedule).
  std::size_t copy_bytes = 0;
  /// Persistent tensors (parameters, momenta) are resident before their first use and after
  /// their last; transient ones live from their first use to their last.
  bool persistent = false;
  /// Never swapped or dropped by the schedule (it stays where it is).
  bool pinned = false;
  /// A persistent tensor that may be parked on the host across the iteration's end (the
  /// executor puts it there before the first iteration), even when `pinned` keeps it put
  /// between its uses.
  bool parkable = false;
  std::vector<schedule_use> uses;  ///< ascending by step, one entry per step
  /// Whether a replay of its producer's forward can rebuild it (a cheap layer's output).
  bool rebuildable = false;
  /// An fp32 tensor that may cross the link as fp16 (half the bytes each way) when
  /// schedule_options::compress is on; the caller decides which (values, not indices).
  bool compressible = false;
  /// TSPLIT: its value is held in host memory as fp16 where a staged step puts it there
  /// (executor_options::split_compress): the copies out to a staged use and in after one move
  /// half its bytes (its swaps keep their own encoding: `compressible`).
  bool staged_fp16 = false;
  /// Its rebuilds happen only inside a replay that writes the next tensor straight from its
  /// inputs (the executor's fused CONV+ACT): it is never on the device by itself, so the
  /// schedule never keeps it there between replays (scheduled_step::hold).
  bool fused_away = false;
  double rebuild_seconds = 0.0;  ///< the replay's modelled time
  /// The least time any rebuild of it takes (a fused replay may take less than the plan's
  /// `rebuild_seconds`); the lower bound charges this. Negative: rebuild_seconds.
  double least_rebuild_seconds = -1.0;
  /// Every other tensor the replay touches (its inputs, parameters, auxiliary outputs):
  /// each must be resident, or rebuilt first, at the step of the rebuild.
  std::vector<std::uint32_t> rebuild_touches;
  bool operator==(const schedule_tensor&) const = default;
};

/// One way to run a step (a CONV's algorithms): its time and the workspace it takes.
struct step_option {
  double seconds = 0.0;
  std::size_t extra_bytes = 0;
  bool operator==(const step_option&) const = default;
};

/// The planner's input.
struct schedule_problem {
  std::vector<double> step_seconds;  ///< modelled time of each step's kernel
  /// Bytes a step takes besides its tensors (a convolution's workspace); empty = none.
  std::vector<std::size_t> step_extra_bytes;
  /// Per step, alternatives to (step_seconds, step_extra_bytes), fastest first: the planner
  /// starts each step at its fastest and trades workspace for time where memory is short,
  /// weighed against the tensors' actions. Empty (or an empty list) = the fixed values.
  std::vector<std::vector<step_option>> step_options;
  /// Per step, every way workspace selection may run it (fastest first), where step_options
  /// may stop at the workspaces planned for: the timeline counts the fastest whose workspace
  /// fits the whole budget beside the step's planned bytes, as selection takes what is free
  /// at run time. Empty (or an empty list) = step_options.
  std::vector<std::vector<step_option>> timing_options;
  std::vector<schedule_tensor> tensors;
  std::size_t budget_bytes = 0;    ///< what the tensors may hold at any step
  double link_bytes_per_s = 16e9;  ///< host link, each direction
  /// Device memory, to tell a memory-bound replay (an element-wise layer's) from a costlier
  /// one: drops turned into swaps after planning take the costlier first. 0 = unknown: by
  /// replay time alone.
  double device_bytes_per_s = 0.0;
  /// What each copy costs besides its bytes (issuing it, the stream's turn-around): 0 in the
  /// model; measured on a real device, where it dominates small tensors' copies.
  double copy_latency_s = 0.0;
  bool operator==(const schedule_problem&) const = default;
};

/// Controls (TFLMS's and LDFG's, where they make sense here).
struct schedule_options {
  /// Leave this fraction of the budget unplanned, for heap fragmentation (the reactive cache
  /// is the safety net for it): every step is planned within the rest, the planning budget,
  /// but a TSPLIT staged step, whose planning budget is the whole budget (its micro-step is
  /// fitted to it). 0.08: at 0.04, DenseNet-121's many concatenated tensors
  /// fragment the heap enough at 0.9 x liveness's peak to make the cache evict 1.5k times.
  double headroom = 0.08;
  /// Whether the executor may also try half the headroom (executor::weigh_policy runs both
  /// on the null device, where the heap fragments as it will, and keeps the faster). Off
  /// when the user fixes it (MEMWEAVE_SCHEDULE_HEADROOM).
  bool headroom_auto = true;
  /// Gaps shorter than this many steps are never swapped (LDFG's lower bound on distance).
  std::uint32_t min_swap_distance = 2;
  /// Tensors smaller than this are never swapped or dropped (LDFG's size threshold).
  std::size_t min_bytes = 0;
  /// When set (MEMWEAVE_SCHEDULE_MIN_BYTES unset), executor::weigh_policy also runs with a
  /// threshold of 1/16384 of the budget (at the headroom, share and keep_rebuilt it chose)
  /// and keeps the faster: a tiny tensor frees next to nothing, but its swap's release
  /// waits for its copy, queued behind the large ones on the link (DenseNet-121 b32 at a
  /// third of its peak swapped BN's saved statistics, 512 bytes each: 0.881 -> 0.891 of
  /// liveness's speed without them); elsewhere small tensors' actions help (ResNet-50 there:
  /// 0.904 with them, 0.900 without).
  bool min_bytes_auto = true;
  /// At most this many gaps get an action (TFLMS's n_tensors); 0 = no limit.
  std::size_t max_actions = 0;
  /// The share of a swap's link time (both directions) charged as added time even when its
  /// copies hide under compute: the link they take is then unavailable to later swaps, so a
  /// cheap rebuild is preferred to a hidden round trip.
  double link_charge = 0.5;
  /// Which share suits a problem depends on how busy the link ends up (no one share is best
  /// across the zoo's networks and budgets): when set, the executor plans with link_charge,
  /// twice it and four times it, and keeps the fastest predicted plan. Off when the user
  /// fixes the share (MEMWEAVE_SCHEDULE_LINK_CHARGE); plan_memory_schedule itself plans once.
  bool link_charge_auto = true;
  /// The executor plans CONV steps' workspaces within 1/workspace_share of the budget. 0: it
  /// plans with a sixteenth, a quarter and all of it and keeps the fastest predicted plan;
  /// executor::weigh_policy runs each instead (the heap can overturn the prediction).
  /// plan_memory_schedule does not read it.
  std::size_t workspace_share = 0;
  /// The executor plans each CONV step with the one algorithm its convolution-workspace mode
  /// runs (fixed: the named one; max: the fastest; none: the fastest without a workspace),
  /// its workspace whole, instead of dynamic selection's ladder of workspaces within the
  /// share. Nothing under dynamic selection. executor::weigh_policy runs both (the greedy
  /// can plan worse with the larger, true workspaces than the run does with the evictions
  /// the ladder leaves to the cache); plan_memory_schedule does not read it.
  bool conv_mode_workspaces = false;
  /// When set, executor::weigh_policy also runs conv_mode_workspaces flipped and keeps the
  /// faster (MEMWEAVE_SCHEDULE_CONV_MODE=ladder|mode fixes it; the executor reads it).
  bool conv_mode_workspaces_auto = true;
  /// A prefetch is issued at least this many steps before the step that needs it (TFLMS's
  /// lb; 0 or 1 = right before it at the latest).
  std::uint32_t prefetch_lb = 0;
  /// ... and at most this many steps before it (TFLMS's ub; 0 = no bound): a copy that needs
  /// longer to hide then stalls instead of holding memory for longer.
  std::uint32_t prefetch_ub = 0;
  /// A prefetch is placed to land at least this long before its step (LDFG's slack
  /// threshold): a margin for a device slower than the model.
  double slack_seconds = 0.0;
  /// ... and, beyond that, this share of its own copy time: a margin that grows with the copy
  /// (where the run's compute goes faster than planned, or copies queue, the largest
  /// prefetches are the ones that stall: ResNet-50 at a third of its peak, res2's).
  double slack_copy_share = 0.0;
  /// When set, the executor plans with slack_copy_share 0, 0.5 and 1 (at the link charge it
  /// chose) and keeps the fastest predicted plan. Off when the user fixes the slack
  /// (MEMWEAVE_SCHEDULE_SLACK_MS); plan_memory_schedule itself plans once.
  bool slack_auto = true;
  /// A dropped tensor that a replay needs before its own use is rebuilt there; when set, it
  /// then stays on the device until that use wherever the steps between have room under the
  /// planning budget (one replay instead of two), else it is dropped again.
  bool keep_rebuilt = false;
  /// When set, executor::weigh_policy also runs keep_rebuilt flipped (at the headroom and
  /// workspace share it chose) on the null device and keeps the faster: held longer, the
  /// rebuilt tensors can fragment the heap. Off when the user fixes it
  /// (MEMWEAVE_SCHEDULE_KEEP_REBUILT=yes|no).
  bool keep_rebuilt_auto = true;
  bool allow_swap = true;
  bool allow_drop = true;
  /// A dead tensor that replays at several steps read is kept from its first rebuild to its
  /// last where the steps between have room (scheduled_step::hold), not rebuilt at each.
  bool hold_dead = true;
  /// A drop whose rebuild first rebuilds other tensors (a chain) is weighed only where those
  /// fit beside what the step of the rebuild holds under the planning budget.
  bool chain_room = false;
  /// Swaps of compressible tensors move fp16, half the bytes (LDFG): copies take half the
  /// time, so more of them hide. Lossy, never the default (MEMWEAVE_SCHEDULE_COMPRESS=fp16);
  /// refused where results must be bit-identical (require_exact).
  bool compress = false;
  /// The executor bounds the plan it keeps (memory_schedule::bound_seconds); off in the
  /// null runs that only compare iteration times (null_run_options: the weighing's, the
  /// split plans' mixing).
  bool bound = true;
  /// For tests: each of refine's trials, taken as a change to the last (its memory curve, its
  /// schedule with one prefetch moved), is also computed whole and compared; a difference is
  /// a std::logic_error. Always on in builds without NDEBUG.
  bool check_trials = false;
  /// Throws invalid_argument naming the field when a value is out of range.
  void validate() const;
  /// The MEMWEAVE_SCHEDULE* variables (defaults as above); invalid_argument naming the
  /// variable when one is malformed or out of range.
  static schedule_options from_environment();
  bool operator==(const schedule_options&) const = default;
};

enum class gap_action : std::uint8_t { keep, swap, drop };
/// "keep", "swap", "drop".
const char* to_string(gap_action a) noexcept;

/// What the executor does at fixed points of the step loop.
struct scheduled_step {
  std::vector<std::uint32_t> release;   ///< before the step: wait for the offload, free
  std::vector<std::uint32_t> drop;      ///< after the kernel: free, to be rebuilt
  std::vector<std::uint32_t> offload;   ///< after the kernel: start copying out
  std::vector<std::uint32_t> prefetch;  ///< after the kernel: allocate and start copying in
  std::vector<std::uint32_t> rebuild;   ///< before the kernel: rebuilt (informational)
  /// A staged step's tensors given as uses in host memory that it keeps whole on the device.
  std::vector<std::uint32_t> whole;
  /// Tensors dead by now that this step's rebuilds re-create for a replay and that replays
  /// read again at later steps: kept on the device until the step given (freed before its
  /// kernel), instead of rebuilt again at each (one replay for several).
  std::vector<std::pair<std::uint32_t, std::uint32_t>> hold;

  bool operator==(const scheduled_step&) const = default;
};

/// One planned gap with an action other than keep.
struct scheduled_gap {
  std::uint32_t tensor = 0;
  gap_action action = gap_action::keep;
  std::uint32_t after = 0;     ///< the use that opens the gap
  std::uint32_t before = 0;    ///< the use that closes it
  std::uint32_t release = 0;   ///< swap: the step before which its memory is freed
  std::uint32_t prefetch = 0;  ///< swap: the step after which the copy back is issued
  bool compressed = false;     ///< swap: both copies move fp16 (transfer_encoding::fp16)
  /// swap of a persistent tensor across the iteration's end (parked): `after` is its last
  /// use, `before` its first (so before <= after, equal for a momentum: one use), released
  /// before step `release` > after, on the host at the iteration boundary, prefetched after
  /// step `prefetch` < before.
  bool wraps = false;
  /// swap closing at a use in host memory (a staged step, schedule_use::on_host): no
  /// prefetch (`prefetch` = before - 1); the staged step takes the host copy.
  bool to_host = false;

  bool operator==(const scheduled_gap&) const = default;
};

/// The plan for one iteration.
struct memory_schedule {
  std::vector<scheduled_step> steps;
  std::vector<scheduled_gap> gaps;          ///< in the order they were chosen
  std::vector<std::size_t> bytes_per_step;  ///< predicted device bytes at each step
  std::vector<std::uint32_t> step_choice;   ///< per step: the index in step_options taken
  std::size_t predicted_peak_bytes = 0;
  double predicted_seconds = 0.0;  ///< the iteration with the schedule's stalls and replays
  double baseline_seconds = 0.0;   ///< the same with no action (Σ step_seconds)
  /// The least any exact schedule of the problem could take (bound_memory_schedule, with the
  /// whole budget open to workspaces); 0 where the caller did not bound it.
  double bound_seconds = 0.0;
  std::uint64_t bytes_swapped = 0;  ///< one direction, device bytes
  /// Of bytes_swapped, the fp32 bytes that travel as fp16 (half of them cross the link).
  std::uint64_t bytes_compressed = 0;
  std::uint64_t rebuilds = 0;  ///< replays the schedule adds
  /// Every step within the planning budget (a TSPLIT staged step within the whole budget: its
  /// micro-steps are fitted to it).
  bool fits = true;
  /// The link charge and prefetch margin it was planned with (schedule_options: the executor
  /// tries several and keeps the fastest prediction).
  double link_charge = 0.0;
  double slack_copy_share = 0.0;
  /// The headroom it was planned within: the option's, or 0 where it fit only without
  /// (plan_executor_schedule's last retry, near max(l_i)).
  double headroom = 0.0;
};

/// The least iteration time any exact schedule of a problem can reach in its model (no
/// FP16 compression): a lower bound, to say how far a plan is from the best possible.
struct schedule_bound {
  double seconds = 0.0;           ///< no schedule's iteration is shorter than this
  double baseline_seconds = 0.0;  ///< every step at its fastest way, nothing moved
  /// The step that binds it, and the bytes that must leave the device there.
  std::uint32_t step = 0;
  std::size_t overflow_bytes = 0;
  bool feasible = true;  ///< false: some step's own tensors exceed the budget
};

/// Bounds `problem` step by step: whatever is live across a step but not used by it and over
/// the budget must be away, on the host or dropped. A tensor's offload crosses the link
/// between its last write and the step's start, its prefetch between that and its next use's
/// start (each link a single machine: its cuts bound what it carries); the seconds the
/// iteration is made longer widen the first windows where they come before the step and the
/// second where they come after it, and dropped ones cost at least their replays, which run
/// after the step, cheapest per byte first. Each of these is relaxed in the schedule's
/// favour (persistent and pinned tensors may move, the step takes its smallest workspace, the
/// whole budget is usable, no chain or fragmentation is charged), so the bound is loose but
/// sound. O(steps · tensors · log), times the split's search where a step raises the bound.
schedule_bound bound_memory_schedule(const schedule_problem& problem);

/// Plans `problem` under `options`. Throws invalid_argument on malformed input (a use out
/// of range or out of order, a rebuild touching an unknown tensor). `stop`, where given, is
/// asked at each round of the greedy and of refine's trials: true throws `interrupted` (a
/// deep ResNet's plan takes minutes, and a Ctrl-C waited for it).
memory_schedule plan_memory_schedule(const schedule_problem& problem,
                                     const schedule_options& options = {},
                                     const std::function<bool()>& stop = {});

/// Whether no schedule plan_memory_schedule could make under `options` fits `problem`'s
/// whole budget, for a reason that needs no planning to see: some step holds more than the
/// budget of what no action can take off it (its own uses at its smallest workspace, the
/// pinned tensors idle there, a persistent one that cannot park outside its uses, those below
/// min_bytes, what no swap or drop may touch). Sound in one direction only: true means the
/// greedy cannot fit (at any headroom, with or without its workspace options); false decides
/// nothing. O(tensors + uses + steps). The step and its bytes in `*step`, `*floor_bytes`.
bool memory_schedule_cannot_fit(const schedule_problem& problem, const schedule_options& options,
                                std::uint32_t* step = nullptr, std::size_t* floor_bytes = nullptr);

/// Throws invalid_argument when `options` would make results differ from a run with no
/// memory technique (FP16 compression is lossy); `context` names who needs exact results
/// ("the oracle's bit-identity mode"). What an exact mode calls before planning.
void require_exact(const schedule_options& options, const std::string& context);

/// Replays `schedule` on `problem`'s timing model: the iteration's seconds with the
/// schedule's stalls and replays (what plan_memory_schedule reports as predicted_seconds);
/// its swaps marked compressed copy half the bytes.
double simulate_memory_schedule(const schedule_problem& problem, const memory_schedule& schedule);

}  // namespace memweave
