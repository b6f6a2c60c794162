// What one `memweave train` or `memweave plan` run measured, per policy: totals and one row
// per step. The field names are the JSON/CSV names and are kept stable: scripts read them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "memweave/engine/cost_model.hpp"
#include "memweave/engine/tiling_plan.hpp"

namespace memweave {

/// One step of the route (forward steps 1..N, backward N+1..2N), after it ran.
struct step_record {
  int step = 0;                     ///< 1-based position in the route
  std::string layer;                ///< layer name
  char pass = 'F';                  ///< 'F' forward, 'B' backward
  std::size_t bytes_live = 0;       ///< sum of the bytes of tensors resident during the step
  std::size_t heap_bytes = 0;       ///< the heap's bytes in use during the step (block-rounded)
  int tensors_live = 0;             ///< tensors resident during the step
  std::size_t workspace_bytes = 0;  ///< convolution workspace taken for this step
  std::string algorithm;            ///< convolution algorithm used ("" when not a CONV step)
  int offloads = 0;                 ///< tensor copies to host started after the step
  int prefetches = 0;               ///< tensor copies back started after the step
  int replays = 0;                  ///< layer forwards re-run before the step (rebuilds)
  int parts = 1;                    ///< TSPLIT: micro-batches its kernels ran in
  int groups = 1;                   ///< TSPLIT: CONV/FC output-channel groups per micro-batch
  bool staged = false;              ///< TSPLIT: its micro-tensors were in host memory
};

/// all on a device that computes: re-planning the schedule from the first iteration's
/// measured step and copy times (Capuchin).
struct replan_report {
  bool replanned = false;          ///< a new schedule replaced the model's
  double model_seconds = 0.0;      ///< the model's schedule: its predicted iteration
  double measured_seconds = 0.0;   ///< the measured iteration's steps (their sum)
  int measured_iteration = 0;      ///< which (1-based): the first, on cuda the second
  double link_gbps = 0.0;          ///< the host link as its copies measured it (0: none ran)
  double copy_latency_us = 0.0;    ///< each copy's cost besides its bytes, as measured
  std::uint64_t gaps_changed = 0;  ///< gaps whose action or timing differs from the model's
  std::string note;                ///< why it was not replaced, when not
  /// The trial: the re-planned schedule's iterations and the model's, run in turn (two each),
  /// their mean time; 0 until the trial is over. The faster is kept (replanned false: the
  /// model's).
  double replanned_iteration_seconds = 0.0;
  double model_iteration_seconds = 0.0;
};

/// Data parallelism: one rank's figures, gathered by rank 0.
struct rank_report {
  int rank = 0;
  std::size_t peak_bytes = 0;           ///< its heap's peak (its own budget)
  std::uint64_t bytes_moved = 0;        ///< offloaded + prefetched, one iteration
  double seconds_per_iteration = 0.0;   ///< measured
  double allreduce_seconds = 0.0;       ///< its reductions' own time, one iteration
  double allreduce_wait_seconds = 0.0;  ///< of which backward did not hide
};

/// The result of one policy.
struct policy_report {
  std::string policy;           ///< "baseline", "liveness", ...
  bool fits = true;             ///< whether it ran within the budget
  std::string failure;          ///< why not, when !fits
  std::int64_t image_side = 0;  ///< the input side planned or trained (0: none)
  bool failed = false;          ///< stopped by an error other than not fitting
                                ///< (fits is false, failure holds the error)
  /// The signal that stopped the run during this policy ("SIGINT", "SIGTERM"; the command
  /// line's stop_signal_scope), after iterations_run of the iterations asked; "" when none.
  std::string stopped_by;
  int iterations_run = 0;      ///< iterations (eval: batches) the policy ran; fewer when stopped_by
  std::size_t peak_bytes = 0;  ///< max over steps of heap_bytes
  std::size_t peak_live_bytes = 0;   ///< max over steps of bytes_live
  int peak_step = 0;                 ///< the step where peak_bytes is reached
  std::size_t max_layer_bytes = 0;   ///< max_i l_i (the paper's lower bound); an evaluation's: of
                                     ///< the forward steps, max_i l_i^f
  std::size_t persistent_bytes = 0;  ///< parameters, their momentum and state
  std::uint64_t tensors_allocated = 0;  ///< tensor allocations in one iteration
  std::uint64_t bytes_offloaded = 0;    ///< device->host bytes in one iteration
  std::uint64_t bytes_prefetched = 0;   ///< host->device bytes in one iteration
  std::uint64_t recomputations = 0;     ///< extra forward layer computations per iteration
  std::uint64_t cache_hits = 0;         ///< tensor cache: tensors found resident
  std::uint64_t cache_misses = 0;       ///< tensor cache: tensors brought back
  std::uint64_t evictions = 0;          ///< tensor cache: tensors pushed out to make room
  double transfer_wait_s = 0.0;         ///< seconds the step loop blocked on transfers
  std::uint64_t scheduled_swaps = 0;    ///< all: gaps the memory schedule swaps
  std::uint64_t scheduled_drops = 0;    ///< all: gaps the memory schedule drops and rebuilds
  /// all: of scheduled_swaps, persistent tensors parked on the host across the iteration's
  /// end, and their bytes
  std::uint64_t scheduled_parks = 0;
  std::uint64_t parked_bytes = 0;
  /// all with staged split steps: micro-tensors the schedule keeps whole at a staged step
  /// (scheduled_step::whole), and swaps offloaded for a staged step that never come back
  /// (scheduled_gap::to_host)
  std::uint64_t scheduled_whole = 0;
  std::uint64_t scheduled_to_host = 0;
  std::uint64_t schedule_misses = 0;  ///< all: scheduled actions the safety net pre-empted
  double predicted_seconds = 0.0;     ///< all: the schedule's modelled iteration time
  /// all: the schedule the last iteration ran (the one these figures describe) was planned
  /// from measured times, and predicted_seconds is in them, not in the model.
  bool schedule_measured = false;
  double bound_seconds = 0.0;  ///< all: the least any exact schedule could take
  /// all under a budget: the modelled iterations it was weighed by before it started (0: not
  /// weighed, or the policy could not run there), and whether it ran as recompute for it.
  double weighed_all_seconds = 0.0;
  double weighed_recompute_seconds = 0.0;
  double weighed_headroom = 0.0;  ///< the schedule's headroom that ran faster
  /// The share of the budget (1/N) its CONV workspaces were planned within that ran fastest.
  std::size_t weighed_workspace_share = 0;
  /// Whether the schedule that ran faster keeps what a replay rebuilt early until its use
  /// (schedule_options::keep_rebuilt).
  bool weighed_keep_rebuilt = false;
  std::size_t weighed_min_bytes = 0;  ///< the schedule's size threshold that ran
  /// Whether that schedule planned each CONV with its workspace mode's one algorithm
  /// (schedule_options::conv_mode_workspaces), not dynamic selection's ladder.
  bool weighed_conv_mode_workspaces = false;
  bool ran_as_recompute = false;
  /// all ran without its schedule, on the reactive cache alone, which was faster in the
  /// model (weighed_reactive_seconds: that run; 0 where not weighed against it).
  bool ran_without_schedule = false;
  double weighed_reactive_seconds = 0.0;
  /// TSPLIT (executor_options::split_weighed): the share of the budget the fastest whole split
  /// plan fits each micro-step in (0: not weighed; 1: plan_splits' fewest micro-batches), how
  /// many steps it splits, and the fewest plan's split steps and modelled iteration.
  double weighed_split_share = 0.0;
  std::size_t weighed_split_steps = 0;
  std::size_t fewest_split_steps = 0;
  double weighed_fewest_split_seconds = 0.0;
  /// ... and with executor_options::split_regions, how many steps took their micro-batches
  /// from another plan than the fastest whole one, which ran weighed_whole_split_seconds
  /// (0: none did).
  std::size_t mixed_split_steps = 0;
  double weighed_whole_split_seconds = 0.0;
  cost_model model;                    ///< the timing model it planned with
  replan_report replan;                ///< all: re-planning from measured times
  std::uint64_t bytes_compressed = 0;  ///< fp32 bytes offloaded as fp16 (lossy; opt-in)
  /// The memory schedule's swaps were asked to move fp16 (MEMWEAVE_SCHEDULE_COMPRESS): with
  /// bytes_compressed 0, the opt-in compressed nothing (and the summary says so).
  bool schedule_compress = false;
  std::size_t staged_steps = 0;         ///< TSPLIT: split steps run on micro-tensors
  std::size_t channel_group_steps = 0;  ///< TSPLIT: of those, CONV/FC in output-channel groups
  std::uint64_t bytes_staged = 0;       ///< TSPLIT: bytes they copied over the link
  /// TSPLIT: bytes a split step found on the device, left by the split step before it (the
  /// slices of its last micro-batch), that would have crossed the link again.
  std::uint64_t bytes_handed = 0;
  /// TSPLIT with MEMWEAVE_SPLIT_COMPRESS=fp16: of bytes_staged, those that crossed as fp16
  /// (two bytes a value: the values would have taken twice as many), and the largest relative
  /// error of a value rounded to fp16 on its way into host memory (host only: on null nothing
  /// is computed, 0). Lossy, opt-in.
  std::uint64_t bytes_staged_fp16 = 0;
  double staged_fp16_error = 0.0;
  /// all: values in host memory given back when it ran out, to be rebuilt by replays.
  std::uint64_t host_drops = 0;
  double max_compression_error = 0.0;  ///< the largest relative fp16 round-trip error
  double images_per_s = 0.0;           ///< train only
  double seconds_per_iteration = 0.0;  ///< train: measured; plan: simulated
  /// train: the iterations (1-based, of this run) images_per_s and seconds_per_iteration
  /// were timed over: after the first, and after all's re-planning trial where the run is
  /// long enough to have iterations past it; 0 where none was timed.
  int timed_first = 0, timed_last = 0;
  double bookkeeping_us_per_step = 0.0;   ///< time the engine spends outside kernels per step
  int ranks = 1;                          ///< data-parallel ranks (gradients reduced)
  std::uint64_t allreduce_bytes = 0;      ///< gradient bytes reduced per iteration
  double allreduce_seconds = 0.0;         ///< this rank's reductions' own time, last iteration
  double allreduce_wait_seconds = 0.0;    ///< compute stream blocked on them (a late rank too)
  std::vector<rank_report> rank_reports;  ///< every rank's, when ranks > 1 (rank 0's report)
  int tightest_rank = 0;                  ///< the rank with the highest peak
  std::vector<double> losses;             ///< train: loss per iteration (global batch)
  /// eval: its batches' mean loss (losses holds it too), accuracy, and the images counted
  /// (null device: 0, nothing computed).
  double eval_loss = 0.0, accuracy = 0.0;
  std::int64_t correct = 0, images = 0;
  std::string timeline_path;  ///< where its streams' trace was written ("": none)
  /// --tile: where the budget's segments (run_report::tiling) did not fit this policy, it ran
  /// tiled for this smaller target (the layers over it tiled), with these segments; 0 and none
  /// where it ran with the budget's.
  std::size_t tiling_target_bytes = 0;
  std::vector<tiled_segment_choice> tiling;
  std::vector<step_record> steps;  ///< one iteration's rows
};

/// A whole run.
struct run_report {
  std::string command;  ///< "train", "plan" or "eval"
  std::string network;  ///< zoo name
  std::int64_t batch = 0;
  std::size_t budget_bytes = 0;
  std::string device;  ///< device name
  int iterations = 0;
  int ranks = 1;                             ///< data-parallel ranks; batch is the global batch
  std::vector<tiled_segment_choice> tiling;  ///< --tile: the segments run tile by tile
  /// "max_image_side" when each policy's row is its plan at the largest side that fits
  /// (plan --max-image-side); "" for a run at the given side.
  std::string search;
  std::int64_t first_batch = 0;  ///< eval: the first batch of the data evaluated
  std::vector<policy_report> policies;
};

}  // namespace memweave
