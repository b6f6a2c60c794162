// The executor: runs training iterations of a network on a device, taking every byte of
// device memory from a device_heap, following a memory plan (baseline or liveness), and
// recording per step what memory did.
//
// The step loop (DESIGN.md): for each step of the route, allocate what the plan says is
// born there (through the heap), record the step's memory, enqueue the layer's kernel on
// the compute stream (on `null`, only its simulated cost), then free what dies after the
// step. Frees right after enqueueing are safe: the compute stream is in order, so a later
// kernel that gets the same bytes runs after this one. On `null` nothing is ever read or
// written, so `plan` and `train` run this same code. On `cuda` the layers' cuDNN/cuBLAS
// kernels are enqueued from the calling thread (the memory logic is the same).
//
// Not thread-safe: one thread drives an executor. Holds a reference to the network and the
// device, which must outlive it.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "memweave/alloc/device_heap.hpp"
#include "memweave/cache/tensor_cache.hpp"
#include "memweave/conv_workspace/conv_workspace_selector.hpp"
#include "memweave/device/device.hpp"
#include "memweave/engine/cost_model.hpp"
#include "memweave/engine/data_source.hpp"
#include "memweave/engine/layer_memory.hpp"
#include "memweave/engine/liveness.hpp"
#include "memweave/engine/network.hpp"
#include "memweave/engine/route.hpp"
#include "memweave/engine/run_report.hpp"
#include "memweave/engine/solver_settings.hpp"
#include "memweave/engine/tensor_table.hpp"
#include "memweave/recompute/recompute_plan.hpp"
#include "memweave/schedule/memory_schedule.hpp"
#include "memweave/swap/transfer_engine.hpp"

namespace memweave {

class residency_table;
class fp16_codec;
class kernel_launcher;
class communicator;
class comm_request;
class stream_timeline;
struct schedule_inputs;
namespace layers {
struct staged_tensor;
}
struct timeline_span;
struct conv_step;

/// Which memory techniques a run uses (`--policy`, MEMWEAVE_POLICY):
///   baseline  every transient tensor lives for the whole iteration (the paper's baseline);
///   liveness  each lives from its first to its last use (§3.2);
///   offload   liveness + every checkpoint (CONV) output goes to host memory after its last
///             forward use and comes back, prefetched, in backward (vDNN-like: no cache);
///   utp       liveness + the tensor cache: tensors stay on the device while they fit; when
///             the heap cannot serve, unlocked tensors leave for host memory from the LRU
///             end, and come back prefetched ahead of use (§3.3).
///   recompute liveness + cost-aware recomputation (§3.4): the outputs of cheap layers are
///             dropped after their last forward use and rebuilt in backward from the
///             nearest kept tensors (speed- or memory-centric per segment).
///   all       a memory schedule planned ahead (memweave/schedule): nothing is dropped or
///             moved while everything fits; under a budget that liveness exceeds, each
///             tensor idle across an over-budget step is swapped (copies timed to hide under
///             compute) or dropped and rebuilt, whichever adds the least time. The executor
///             carries the schedule out at fixed points of the step loop; what the plan did
///             not foresee (fragmentation, workspaces) falls to utp's reactive cache, which
///             drops a recomputable tensor or offloads it.
struct executor_policy {
  std::string name = "liveness";
  memory_policy plan = memory_policy::liveness;  ///< when transient tensors are born and die
  bool offload_checkpoints = false;  ///< proactive offload of checkpoint outputs (offload)
  bool evict_to_host = false;        ///< the tensor cache may evict to host memory (utp)
  bool recompute = false;            ///< dropped tensors are rebuilt (recompute, all)
  bool drop_after_forward = false;   ///< drop cheap outputs after their last forward use
  bool planned = false;              ///< carry out a memory schedule planned ahead (all)
  /// Parses a policy name; invalid_argument listing the known ones otherwise.
  static executor_policy parse(const std::string& name);
  /// Whether tensors may move to host memory (a transfer engine and host pool are needed).
  bool moves_tensors() const noexcept { return offload_checkpoints || evict_to_host; }
};

struct executor_options {
  executor_policy policy = {};
  /// The heap's arena: everything the network needs (parameters, momenta, activations,
  /// gradients, workspaces) must fit in it. 0 = heap_options' default (a fraction of the
  /// device's free memory).
  std::size_t budget_bytes = 0;
  /// Other heap settings (fit policy, block size, trace); pool_bytes is taken from
  /// budget_bytes when that is set.
  heap_options heap = {};
  /// Host kernel threads (0 = every core; the command line reads MEMWEAVE_THREADS into it).
  int threads = 0;
  /// Convolution workspace selection (MEMWEAVE_CONV_WS): at each CONV step, after its
  /// functional tensors, the fastest algorithm whose workspace fits the heap's largest free
  /// run (dynamic), or none / max / fixed:<algorithm>. Workspaces are not in the memory plan:
  /// they are taken from the heap for the step's kernel and given back right after.
  conv_ws_options conv_ws = {};
  /// The solver's initial settings (solver_settings.hpp: Caffe-form SGD, checked as
  /// solver_settings::validate); executor::set_solver changes them between iterations.
  float learning_rate = 0.01f;
  float momentum = 0.9f;
  float weight_decay = 5e-4f;
  /// Seeds the parameters' initial values and the dropout masks.
  std::uint64_t seed = 1;
  /// offload/utp: in backward, tensors in host memory are prefetched for the backward steps
  /// of this many checkpoint (CONV/FC) layers ahead (the paper: the previous checkpoint's).
  int prefetch_distance = 1;
  /// offload: an offload started after step s is waited for, and its device memory freed,
  /// at the start of step s + offload_lag (deterministic, so plan and train agree; 2 lets
  /// the copy run under the next layer's kernel).
  int offload_lag = 2;
  /// Pinned host memory for offloaded tensors (0 = MEMWEAVE_HOST_POOL_BYTES).
  std::size_t host_pool_bytes = 0;
  /// What sized it, named where host memory runs out (the option or variable the user gave:
  /// the tools set it); the default names both.
  std::string host_pool_knob = "--host-pool or MEMWEAVE_HOST_POOL_BYTES";
  /// What sizes the activations, named where the budget is too small ("lower ..."): an ONNX
  /// model's image size is its own (the tools set "--batch" for one).
  std::string shape_knobs = "--batch or --image-side";
  /// Transfer settings (verification; MEMWEAVE_VERIFY_TRANSFERS).
  bool verify_transfers = false;
  /// recompute/all: how segments are rebuilt (MEMWEAVE_RECOMPUTE): cost_aware (the paper's
  /// rule), speed_centric or memory_centric.
  std::string recompute_strategy = "cost_aware";
  /// all: the memory schedule's controls (headroom, thresholds, what it may do).
  schedule_options schedule = {};
  /// When set, each iteration's kernels (and replays) and tensor copies are recorded here,
  /// the timeline cleared at the start of each iteration so it holds the last one (not
  /// owned; it must outlive the executor).
  stream_timeline* timeline = nullptr;
  /// The host link the schedule's timing assumes, GB/s (0: MEMWEAVE_HOST_LINK_GBPS, or
  /// model.link_bytes_per_s when that is 0).
  double link_gbps = 0.0;
  /// The device the timings model: the null device's kernel times, the schedule's step
  /// times, and the eviction rule's rebuild-or-move weighing (each throughput > 0;
  /// MEMWEAVE_COST_MODEL names a preset).
  cost_model model = {};
  /// all, on a device that computes (host, cuda): the first iteration's measured step and
  /// copy times (on cuda the second's: the first loads kernels and builds cuDNN's plans)
  /// replace the model's and the schedule is planned again from them, once
  /// (Capuchin; MEMWEAVE_SCHEDULE_REPLAN). The new schedule is used only when it runs one
  /// iteration in the budget on the null device; else the model's stays (replan_report::note).
  /// It is then on trial: it and the model's run in turn, two iterations each (the second
  /// to the fifth on host, one later on cuda), timed, and the faster in total runs on after
  /// them: the measured times
  /// do not see all that the device does (on the host backend, copies take the cores the
  /// kernels run on).
  bool replan_from_measured = true;
  /// Results must be bit-identical to baseline (the oracle's mode): a lossy technique (FP16
  /// compression of swapped tensors or of staged micro-tensors) is refused with
  /// invalid_argument.
  bool exact = false;
  /// Data parallelism (engine/runtime/executor_parallel.cpp): this rank's communicator (not
  /// owned; it must outlive the executor). With more than one rank, rank 0's parameters are
  /// broadcast at construction, the network's batch is this rank's share of the global
  /// batch, and the solver's updates move from the backward steps to gradient buckets whose
  /// gradients are summed over the ranks (each scaled by its share) under the backward
  /// kernels that follow. BN keeps per-rank batch statistics (as PyTorch DDP without
  /// SyncBatchNorm). nullptr: one process.
  communicator* comm = nullptr;
  /// Asked before each run of `all`'s (and the split plans') weighing on the null device;
  /// true throws `interrupted` from the constructor, so that a stop asked while it weighs
  /// (a split plan at a large batch weighed for minutes) ends the policy there rather than
  /// after it. Empty: never. Not for data parallelism (every rank weighs alike).
  std::function<bool()> stop;
  /// Ranks the memory plan assumes when there is no communicator (plan --ranks: buckets
  /// planned, nothing reduced); comm->size() otherwise.
  int ranks = 1;
  /// The global batch (0: the network's batch times the ranks).
  std::int64_t global_batch = 0;
  /// This rank's first image in the global batch: DROPOUT draws each image's mask as one
  /// process does at that position.
  std::int64_t first_sample = 0;
  /// A gradient bucket closes once it holds this many bytes (MEMWEAVE_BUCKET_BYTES).
  std::size_t bucket_bytes = 25ull << 20;
  /// The executor only evaluates (`memweave eval`): the budget must hold the forward steps
  /// only (not the backward's) and no momenta (they are not kept: persistent_names() omits
  /// them, write() discards them, read() refuses them), no memory schedule is planned, and
  /// run_iteration is refused.
  bool evaluation_only = false;
  /// TSPLIT: per route step (0..2N-1; shorter: the rest 1), the number of micro-batches the
  /// step's kernels run in (split_plan.hpp plans them). The bits are the same as unsplit.
  /// Under utp/all a split step (but DATA's) is staged: its batch-shaped tensors stay in host
  /// memory and only the running micro-batch's slices are on the device, so the budget
  /// needs each step's micro-step (split_plan.hpp's micro_step_bytes), not l_i
  /// (engine/runtime/executor_staging.hpp). On cuda the micro-steps are the cuda kernels on
  /// the slices, the whole values in page-locked host memory; the results agree with the
  /// unsplit step to float rounding there (cuDNN and cuBLAS sum in their own orders).
  std::vector<int> split_parts;
  /// TSPLIT: per route step (shorter: the rest 1), the output-channel groups a CONV (groups
  /// 1) or FC step runs each micro-batch in (split_plan.hpp's channel_parts), where the batch
  /// cannot be cut further (batch 1, or weights larger than the budget). Under utp/all the
  /// step is staged: its output, output gradient, parameters, their gradients and momenta
  /// stay in host memory and one group's rows are on the device at a time; a persistent
  /// tensor so cut lives in host memory from the start. Bit-identical for FC and CONV
  /// `direct` (CONV's im2col algorithms round differently: ARCHITECTURE.md, TSPLIT). Not
  /// with data parallelism (its gradient buckets reduce whole tensors). On cuda the results
  /// agree to float rounding (cuda_split_step.hpp's run_cuda_channel_split_step).
  std::vector<int> channel_parts;
  /// TSPLIT: whether the split plans `all`'s weighing makes (split_weighed) may cut CONV/FC
  /// steps into output-channel groups (plan_splits' channel_splits).
  bool split_channel_groups = true;
  /// TSPLIT: split_parts and channel_parts are plan_splits' fewest for budget_bytes (what
  /// `--split` gives): under `all` the weighing (weigh_alternatives) also runs the plans whose
  /// micro-steps fit a smaller share of the budget (split_plan_shares), each leaving the memory
  /// schedule more room beside its micro-steps for more micro-batches, and the fastest runs.
  bool split_weighed = false;
  /// TSPLIT: a staged step's micro-tensors are held in host memory as fp16 and cross the link
  /// as half the bytes (MEMWEAVE_SPLIT_COMPRESS=fp16; LDFG's compression for micro-tensors).
  /// Lossy, so never the default and refused with `exact`: each value written out is rounded
  /// to nearest even (relative error <= 2^-11, the largest reported). Activations only (as
  /// LDFG compresses the feature maps it swaps), not: gradients (small values fall into fp16's
  /// subnormals, where a value of 1e-6 keeps three bits, or to zero), the batch and labels,
  /// the loss's output, a dropout mask, a BN's input (backward subtracts the mean from it:
  /// rounded to 2^-11 of a mean large against the deviation, x - mean would lose its bits),
  /// nor what a step in channel groups cuts.
  bool split_compress = false;
  /// TSPLIT with split_weighed: the weighed plans are then mixed step by step. The steps whose
  /// parts differ between them are cut into runs of consecutive route steps (regions); each
  /// region in turn takes each other plan's micro-batches and channel groups, kept where the
  /// iteration runs faster in the model (one null iteration a trial, at the configuration the
  /// weighing chose). Passes of 4, 8, ... regions, up to this many (at most the steps that
  /// differ). 0: the fastest whole plan runs (MEMWEAVE_SPLIT_REGIONS, 0 to 1024).
  int split_regions = 64;
  /// all under a budget: before it starts, `all` (with the schedule's headroom, and with half
  /// of it when schedule.headroom_auto; at each CONV workspace share unless
  /// schedule.workspace_share names one) and `recompute` are each run for one iteration on a
  /// null device of the same model (what `memweave plan` reports), and the fastest runs: the
  /// schedule's greedy planner does not always find what recomputing every cheap layer gives,
  /// nor how much room the heap's fragmentation takes. The report says which ran.
  bool weigh_alternatives = true;
};

/// `options` with neither swaps nor drops: `all` on the reactive cache alone, no schedule
/// planned. The weighing runs it beside its schedules, and the searches ask it first (`all`
/// fits wherever it does), so both mean the same run.
executor_options on_cache_alone(executor_options options);

/// What executor::evaluate measured over its batches.
struct evaluation_result {
  std::int64_t batches = 0;
  std::int64_t images = 0;
  std::int64_t correct = 0;  ///< images whose largest probability is at their label
  double loss = 0;           ///< mean cross-entropy per image (the batches' mean losses averaged)
  double accuracy = 0;       ///< correct / images
};

class executor {
 public:
  /// Prepares `net` on `dev`: route, tensor table, liveness plan, the heap (taking its
  /// arena), and the persistent tensors (parameters initialized from the seed, momenta 0,
  /// BN running statistics 0 and 1). Throws invalid_argument when the budget cannot hold
  /// even the persistent tensors plus the largest layer (no policy could run), or exceeds
  /// the device; out_of_memory when the device cannot give the arena.
  executor(const network& net, device& dev, const executor_options& requested);
  ~executor();
  executor(const executor&) = delete;
  executor& operator=(const executor&) = delete;

  /// Runs one forward and backward pass with the solver's updates on the batch `iteration`
  /// of `data` (null on the null device), waits for it, and returns the loss (0 on null).
  /// Throws out_of_memory naming the step, the layer and the tensor when the budget cannot
  /// serve an allocation; the executor can then only be destroyed.
  double run_iteration(data_source* data, std::int64_t iteration);
  /// Whether the next iteration runs the schedule that stays: false while `all` on a device
  /// that computes still has to re-plan from the next iteration's measured times, or is
  /// trying the re-planned schedule and the model's in turn. Those iterations carry the
  /// re-planning and each switch's re-placement of the parameters; a caller that reports
  /// the steady speed times the iterations after this turns true.
  bool settled() const noexcept { return !replan_pending() && trial_iterations_ < 0; }

  /// The solver's settings the next iteration uses (at first executor_options').
  const solver_settings& solver() const noexcept { return solver_; }
  /// Changes them from the next iteration on (a learning-rate schedule calls it before each
  /// iteration); invalid_argument naming the field out of range, and nothing changes.
  void set_solver(const solver_settings& settings);

  /// The seed of the dropout masks (at first executor_options::seed, which also seeded the
  /// initial values); set_seed changes it from the next iteration on (a checkpoint's).
  std::uint64_t seed() const noexcept { return seed_; }
  void set_seed(std::uint64_t seed);

  /// Evaluation: `batches` forward passes over batches first_batch, first_batch + 1, ... of
  /// `data` (null on the null device), with BN normalising by its running statistics,
  /// dropout passing everything through, and no backward pass, update or change to any
  /// persistent tensor. Memory: under every policy, forward-only liveness: each tensor is
  /// born at the step that writes it and freed right after its last forward reader (nothing
  /// is kept for a backward pass, so no offload, recomputation or schedule is needed);
  /// under utp/all the tensor cache still evicts (parameters included) when the budget
  /// cannot serve. steps() and report() then describe the last batch. The results are the
  /// same under every policy and budget. On null, loss and accuracy are 0 (nothing runs).
  /// invalid_argument for batches < 1 or first_batch < 0; out_of_memory as run_iteration.
  /// `stop`, where given, is asked after each batch: true ends the evaluation there, the result
  /// counting the batches done (a Ctrl-C's).
  evaluation_result evaluate(data_source* data, std::int64_t first_batch, std::int64_t batches,
                             const std::function<bool()>& stop = {});

  /// The last iteration's rows.
  const std::vector<step_record>& steps() const noexcept { return steps_; }
  /// Totals for the report (images_per_s and losses are the caller's).
  policy_report report() const;

  const route& steps_route() const noexcept { return route_; }
  const tensor_table& table() const noexcept { return table_; }
  const memory_plan& plan() const noexcept { return plan_; }
  const layer_memory& memory() const noexcept { return *layer_memory_; }
  /// The device heap. Its peak_bytes_in_use is reset as each step starts (the steps' own
  /// peaks are report()'s heap_bytes): the iteration's peak is report().peak_bytes.
  const device_heap& heap() const noexcept { return *heap_; }
  const conv_workspace_selector& workspace_selector() const noexcept { return *selector_; }
  const tensor_cache& cache() const noexcept { return *cache_; }
  /// all under a budget liveness exceeds: the schedule carried out; nullptr otherwise.
  const memory_schedule* schedule() const noexcept { return schedule_.get(); }

  /// Whether `schedule` (planned for `net` under `options`' budget) carries one iteration
  /// through on the null device: the check a schedule re-planned from measured times passes
  /// before it replaces the model's (the heap's placement is not in the planner's model).
  /// Exact where the CONV algorithms are fixed (fixed:, max: the null device then sees the
  /// same heap sequence); under dynamic selection the device's measured choices may take
  /// other workspaces than the null device's modelled ones, which selection then fits to
  /// what is free.
  static bool runs_on_null_device(const network& net, const executor_options& options,
                                  const memory_schedule& schedule);

  /// A copy of tensor `t` (resident persistent tensors: parameters, momenta, running stats).
  /// Throws invalid_argument when it is not resident or the device touches no memory.
  std::vector<float> read_tensor(tensor_id t) const;
  /// Fault injection into the transfer engine (tests); invalid_argument when the policy
  /// moves no tensors.
  void set_transfer_faults(const transfer_faults& faults);
  /// Every persistent tensor, in tensor-id order (for bit-identity comparisons).
  std::vector<std::vector<float>> read_persistent() const;

  // ---- Tensors by name (executor_access.cpp) ----
  // Names are the tensor table's: "<layer>.<param>" for parameters ("conv1.weight",
  // "bn1.gamma") and BN running statistics ("bn1.running_mean"), "<layer>.<param>.momentum"
  // for the solver's momenta, "<layer>.<param>.grad" for parameter gradients, "<layer>.y"
  // for a layer's output, "<layer>.dy" for its gradient. Between iterations the persistent
  // tensors (parameters, momenta, running statistics) exist under every policy, on the
  // device or (utp/all) evicted to host memory; every other tensor lived within the last
  // iteration only, and is read through a copy kept by watch(). On a device that touches no
  // memory (null) nothing can be read or written: invalid_argument.

  /// The persistent tensors' names, in tensor-id order (the order of read_persistent()).
  std::vector<std::string> persistent_names() const;
  /// The tensor named `name`; invalid_argument naming it when the network has none.
  const tensor_info& find_tensor(std::string_view name) const;
  /// A copy of the tensor named `name`: a persistent tensor's current value; another one's
  /// value at the end of the last iteration, when watched. A transient tensor not watched
  /// no longer exists: invalid_argument saying after which step of the iteration the policy
  /// freed (or dropped) it.
  std::vector<float> read(std::string_view name) const;
  /// Sets the persistent tensor named `name` (initial weights, a checkpoint) to `values`,
  /// which must hold exactly its element count; invalid_argument otherwise, or when the
  /// tensor is not persistent, and nothing is written. Between iterations only.
  void write(std::string_view name, std::span<const float> values);
  /// The gradient dL/dw of the trained parameter `parameter` ("conv1.weight") computed by
  /// the last iteration (before the solver's update); needs watch_gradients() before it.
  std::vector<float> parameter_gradient(std::string_view parameter) const;
  /// From the next iteration on, keep a host copy of the transient tensor `name` taken
  /// right after the last step of each iteration that writes it (for debugging: costs a
  /// copy of it per iteration). invalid_argument for an unknown or persistent tensor.
  void watch(std::string_view name);
  /// watch() every parameter gradient.
  void watch_gradients();

 private:
  // Data parallelism (executor_parallel.cpp).
  int ranks() const noexcept;
  void broadcast_parameters();
  void reduce_buckets(std::size_t step);
  void release_bucket_locks(std::size_t step);
  double finish_reductions(double local_loss);
  struct transfers;
  // TSPLIT's staged split steps (executor_staging.cpp).
  struct staging;
  void mark_fp16_staging();
  std::size_t staging_bytes(tensor_id t) const noexcept;
  fp16_codec& staging_codec();
  void copy_to_staging(tensor_id t, const void* device_src, std::size_t first, std::size_t count);
  void copy_from_staging(tensor_id t, void* device_dst);
  float* new_staging(tensor_id t);
  void retire_staging(tensor_id t) noexcept;
  bool release_retired_staging();
  void stage(tensor_id t, access_mode mode, std::size_t step);
  void fetch_staged(tensor_id t, std::size_t step);
  void stage_step(std::size_t s, std::span<const tensor_access> accesses, bool keep,
                  std::size_t workspace_bytes = 0);
  layers::staged_tensor micro_tensor(const tensor_access& a, std::int64_t channels,
                                     int parts) const;
  void describe_staging(schedule_inputs& in) const;
  void* take_micro_buffer(std::size_t s, bool replay = false, std::size_t workspace_bytes = 0);
  std::int64_t micro_batch_left(std::size_t s) const;
  void release_handed();
  void release_handed_whole();
  void drop_handed() noexcept;
  void* acquire_staged(std::size_t s, std::span<const tensor_access> accesses,
                       std::vector<tensor_id>& locked, std::size_t workspace_bytes = 0);
  void end_staged_step() noexcept;

  /// utp/all: persistent tensors live in the tensor cache too (and may leave for host
  /// memory); otherwise they come from the heap once and persistent_ptr_ holds them.
  bool cache_persistent() const noexcept { return options_.policy.evict_to_host; }
  bool in_cache(tensor_id t) const noexcept;
  void allocate_persistent(tensor_id t);
  void acquire(std::size_t step, std::span<const tensor_access> accesses,
               std::vector<tensor_id>& locked, bool largest_first);
  void repack(std::size_t step, std::span<const tensor_access> accesses,
              std::vector<tensor_id>& locked);
  bool read_by_running_step(tensor_id t) const;
  void* allocate_transient(tensor_id t, std::size_t step);
  void free_transient(tensor_id t) noexcept;
  void ensure_resident(tensor_id t, std::size_t step);
  bool evict(tensor_id t, void* ptr, std::size_t bytes);
  void offload_with_room(tensor_id t, const void* ptr, transfer_encoding encoding,
                         std::size_t bytes = 0);
  void start_offload(tensor_id t);
  void start_prefetch(tensor_id t, void* p);
  event& written(tensor_id t);
  bool drop_on_evict(tensor_id t) const;
  bool may_drop_now(tensor_id t) const;
  void forget_host(tensor_id t) noexcept;
  void write_back();
  void finish_offload(tensor_id t, stream* compute);
  void reap_offloads(std::size_t step, bool all);
  void prefetch_ahead(std::size_t step);
  void drop(tensor_id t) noexcept;
  void drop_dead_rebuilt(std::size_t s, bool after_kernel);
  void rebuild(tensor_id t, std::size_t step);
  void rebuild_chain(tensor_id t, std::size_t step);
  bool rebuilt_first(tensor_id t, const tensor_access& a) const;
  /// Drops the held tensors (held_) whose hold ends at step `s` or before (all of them when
  /// `s` is past the iteration); before a kernel only those unlocked that no replay reads.
  void release_held(std::size_t s, bool after_kernel);
  void evict_all();
  void replay_forward(std::size_t position, std::size_t step, const layer* fused_act = nullptr);
  void replay_staged(std::size_t position, std::size_t step);
  bool drop_one_host_value();
  std::size_t chain_replays(tensor_id t, std::vector<tensor_id>& visited) const;
  void* take_workspace(std::size_t bytes, bool may_evict);
  void launch_layer(const layer& l, bool forward, std::span<const tensor_access> accesses,
                    const conv_step& conv, void* workspace, data_source* data, bool replay,
                    const layer* fused_act = nullptr);
  void note_peak() noexcept;
  // The running step's peak of heap bytes in use: the heap's own since the step began, at
  // least what note_peak sampled.
  std::size_t step_heap_peak() const noexcept;
  void* device_ptr(tensor_id t) const;
  void initialize_persistent();
  std::optional<memory_schedule> plan_schedule(const std::vector<double>& measured_seconds = {},
                                               double link_bytes_per_s = 0,
                                               double copy_latency_s = 0) const;
  // What plan_schedule plans from (and the bound is taken on).
  schedule_inputs schedule_inputs_of(const std::vector<double>& measured_seconds,
                                     double link_bytes_per_s, double copy_latency_s) const;
  void use_schedule(memory_schedule planned);
  void replan_from(const std::vector<timeline_span>& spans);
  /// The timeline this iteration records into: the caller's, else the executor's own while
  /// it measures the iteration to re-plan from; nullptr when none.
  stream_timeline* recording() const noexcept {
    return options_.timeline != nullptr ? options_.timeline : measuring_.get();
  }
  void apply_releases(std::size_t step);
  void apply_scheduled(std::size_t step);
  void rebuild_scheduled(std::size_t step);
  // all: per tensor, the last step up to which what its replay reads can be had (its
  // producer's reads, at any remove, alive or rebuildable); empty under other policies.
  std::vector<std::size_t> rebuildable_until_;
  void restore_persistent_placement();
  void run_step(std::size_t s, data_source* data, std::int64_t iteration);
  /// Runs steps [0, count); should one fail, what the steps before it enqueued has run when
  /// the error leaves (run_steps: report() reads what that work writes).
  void run_steps(std::size_t count, data_source* data, std::int64_t iteration);
  void capture_watched(std::size_t step);
  void apply_policy_moves(std::size_t s, bool forward, std::size_t position,
                          std::span<const tensor_access> accesses);
  void begin_iteration();
  void finish_iteration();
  void copy_out_predictions(const layer& loss);
  void write_persistent(tensor_id t, const float* values);
  [[noreturn]] void throw_not_alive(tensor_id t) const;
  [[noreturn]] void throw_out_of_budget(std::size_t step, const std::string& what,
                                        std::size_t bytes) const;

  // all: what weighing it against recompute found (weigh_policy, executor_schedule.cpp).
  struct policy_choice {
    bool weighed = false;
    double all_s = 0, recompute_s = 0;  // modelled iterations
    double reactive_s = 0;  // all with no schedule (the cache alone), where one was planned
    bool reactive = false;  // ... which ran faster than with it (all_s)
    std::optional<memory_schedule> schedule;  // the weighing run's, planned the same: reused
    // split_weighed: the share of the budget the chosen split plan fits each micro-step in
    // (0: not weighed), its split steps, and the fewest plan's steps and modelled iteration.
    double split_share = 0;
    std::size_t split_steps = 0, fewest_split_steps = 0;
    double fewest_split_s = 0;
    // split_regions: the steps whose parts another plan's region gave, and the fastest whole
    // plan's modelled iteration (0: nothing mixed).
    std::size_t mixed_split_steps = 0;
    double whole_split_s = 0;
    // What the weighing found `chosen` (the options it returned) runs in, in the model.
    double chosen_s(const executor_options& chosen) const noexcept {
      if (!chosen.policy.planned) return recompute_s;
      return reactive ? reactive_s : all_s;
    }
  };
  static executor_options weigh_policy(const network& net, const executor_options& options,
                                       policy_choice& choice);
  static executor_options weigh_split_plans(const network& net, const executor_options& options,
                                            policy_choice& choice);
  // One split plan: split_parts and channel_parts per route step.
  struct split_choice {
    std::vector<int> parts, groups;
  };
  static void mix_split_plans(const network& net, std::span<const split_choice> plans,
                              executor_options& best, policy_choice& choice);

  const network& net_;
  device& dev_;
  policy_choice choice_;  // before options_: weigh_policy fills it as options_ is made
  executor_options options_;
  route route_;
  tensor_table table_;
  std::unique_ptr<liveness> liveness_;
  std::unique_ptr<layer_memory> layer_memory_;
  memory_plan plan_;
  std::unique_ptr<device_heap> heap_;
  std::unique_ptr<conv_workspace_selector> selector_;
  std::unique_ptr<kernel_launcher> launcher_;   // the backend's kernels
  std::unique_ptr<tensor_cache> cache_;         // transient tensors' device memory
  std::unique_ptr<transfers> transfers_;        // offload/utp only
  std::unique_ptr<staging> staging_;            // split steps' micro-tensors (utp/all)
  std::unique_ptr<recompute_plan> recompute_;   // recompute/all only
  std::unique_ptr<memory_schedule> schedule_;   // all, when liveness exceeds the budget
  std::uint64_t schedule_misses_ = 0;           // tensors not where the schedule put them
  std::vector<tensor_id> deferred_prefetches_;  // scheduled prefetches no free run held yet
  std::vector<conv_step> forward_conv_;         // all: per forward CONV step, what it ran
  std::vector<bool> compressed_;                // all: per tensor, its swaps travel as fp16
  replan_report replan_;                        // all: what re-planning from measured times did
  std::unique_ptr<stream_timeline> measuring_;  // the measured iteration's, when re-planning
  // The re-planned schedule and the model's, run in turn and timed before one is kept: the
  // trial's iterations so far (even: the re-planned one's), each one's seconds in total.
  static constexpr int k_trial_iterations = 4;
  int trial_iterations_ = -1;  // -1: no trial running
  double trial_seconds_[2] = {0.0, 0.0};
  std::unique_ptr<memory_schedule> other_schedule_;  // the one not running during the trial
  // The schedule the last iteration ran, where its end put another in place (re-planned, or
  // the trial's turn): report() describes the iteration it reports, not the next one.
  std::unique_ptr<memory_schedule> ran_schedule_;
  bool ran_measured_ = false;  // ran_schedule_ was planned from measured times
  void continue_replan_trial(double iteration_seconds);
  // The schedule is still to be re-planned from an iteration's measured times.
  bool replan_pending() const noexcept {
    return schedule_ && options_.replan_from_measured && dev_.touches_memory() &&
           !replan_.replanned && replan_.note.empty();
  }
  // The training iteration begun is the one measured: the first after the launcher's cold
  // ones (kernel_launcher::cold_iterations).
  bool replans_this_iteration() const noexcept;
  struct step_marks {
    int offloads = 0, prefetches = 0, replays = 0;
  } marks_;  // the current step's copies and replays, for its record

  bool persistent_moved_ = false;  // a persistent tensor was evicted since the last restore
  std::vector<bool> channel_cut_;  // TSPLIT: per tensor, cut by a staged step's channel groups
  std::vector<bool> parked_;       // all: per tensor, parked on the host across the iteration's end
  bool host_exhausted_ = false;    // an eviction found host memory exhausted
  std::vector<void*> persistent_ptr_;  // parameters, momenta, running stats
  // Tensors kept in host memory (tensor_info::host_resident: the batch a tiled segment
  // fetches tile by tile), one buffer each on a device that touches memory.
  std::vector<std::unique_ptr<float[]>> host_resident_;
  std::unique_ptr<residency_table> residency_;        // where each cached tensor is; live counters
  std::vector<std::size_t> last_forward_use_;         // per tensor: last forward step touching it
  std::vector<bool> offload_candidate_;               // offload policy: checkpoint outputs
  std::vector<std::vector<tensor_id>> offloads_due_;  // per step: offloads to reap there
  std::vector<std::vector<tensor_id>> free_after_;    // per step: tensors whose life ends there
  std::vector<bool> droppable_;                       // recompute/all: the plan may drop it
  // all: what may give its host memory back when host memory runs out (drop_one_host_value;
  // rebuilt by replays, staged where its step is).
  std::vector<bool> host_droppable_;
  std::vector<tensor_id> replaying_;  // the accesses of the replays under way: never dropped
  bool any_staged_ = false;           // some step is staged (TSPLIT)
  std::vector<bool> host_dropped_;    // this iteration, given back by drop_one_host_value
  std::uint64_t host_drops_ = 0;      // this iteration: how many
  // A staged replay's route position, whose split launch_layer runs; none otherwise.
  std::size_t replay_split_ = std::numeric_limits<std::size_t>::max();
  // all, where the backend fuses: per tensor, the BN whose forward rebuilds it with its ACT
  // (fused_bn_act_sources), or invalid_layer; empty otherwise.
  std::vector<layer_id> fused_source_;
  std::vector<std::size_t> free_step_;  // per tensor: the step whose free_after_ lists it
  std::vector<tensor_id> rebuilt_;      // tensors replays allocated in the current step
  // all: dead tensors a replay rebuilt that the schedule keeps for later replays
  // (scheduled_step::hold), and per tensor the step before whose kernel each goes.
  std::vector<tensor_id> held_;
  std::vector<std::size_t> hold_until_;
  std::vector<std::size_t> last_write_;             // per tensor: the step that last wrote it
  std::vector<std::unique_ptr<event>> step_done_;   // per step: recorded after its kernel
  std::vector<std::uint64_t> step_done_iteration_;  // per step: the iteration it was recorded in
  std::uint64_t iterations_run_ = 0;                // iterations started (tags step_done_ records)
  std::uint64_t trained_iterations_ = 0;            // run_iteration calls begun
  std::size_t current_step_ = 0;                    // the step being run
  std::size_t watermark_ = 0;            // utp/all: write back below this many free bytes
  std::uint64_t recomputations_ = 0;     // layer forwards re-run in the last iteration
  std::int64_t iteration_ = 0;           // the batch being run (dropout seeds)
  std::uint64_t tensors_allocated_ = 0;  // transient allocations in the last iteration
  std::vector<step_record> steps_;
  // A step begun and not recorded: it ran out of memory (report() counts how far it got).
  bool step_open_ = false;
  solver_settings solver_;
  std::uint64_t seed_ = 1;
  // watch(): per tensor, its host copy (empty when not watched), and per step the watched
  // tensors whose last write of an iteration it is.
  std::vector<std::vector<float>> watched_;
  std::vector<std::vector<tensor_id>> capture_after_;
  std::vector<std::uint64_t> captured_in_;
  // evaluate(): whether the step loop runs an evaluation batch; per forward step, the tensors
  // whose last forward use it is; the loss layer's probabilities and the labels, copied out.
  bool evaluating_ = false;
  std::vector<bool> discarded_;  // evaluation_only: per tensor, a momentum not kept
  std::vector<std::vector<tensor_id>> eval_free_after_;
  std::vector<float> eval_probabilities_,
      eval_labels_;           // per tensor: iterations_run_ when captured (0: never)
  double bookkeeping_s_ = 0;  // host time outside kernels, last iteration
  double simulated_s_ = 0;    // null device: simulated seconds, last iteration
  double loss_ = 0;           // written by the SOFTMAX forward kernel
  // Data parallelism: per gradient bucket, its reduction in flight this iteration, and the
  // last iteration's totals.
  std::vector<std::unique_ptr<comm_request>> reductions_;
  // Per gradient bucket: its gradients' locks given up before its update step
  // (release_bucket_locks), so that the update step does not unlock them again.
  std::vector<bool> bucket_released_;
  double reduce_s_ = 0, reduce_wait_s_ = 0;
  std::uint64_t reduce_bytes_ = 0;
};

}  // namespace memweave
