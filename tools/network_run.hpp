// What `train` and `plan` share: reading the network options, building the network from
// the zoo or an ONNX model file, running one policy through the executor on a device into a
// policy_report, and running a list of policies so that nothing finished is lost when a later one
// fails.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "cli_args.hpp"
#include "memweave/core/error.hpp"
#include "memweave/device/device.hpp"
#include "memweave/engine/checkpoint.hpp"
#include "memweave/engine/data_source.hpp"
#include "memweave/engine/executor.hpp"
#include "memweave/engine/network.hpp"
#include "memweave/engine/run_report.hpp"
#include "memweave/engine/tiling_plan.hpp"
#include "memweave/engine/zoo.hpp"
#include "memweave/onnx/import_onnx.hpp"

namespace memweave {

/// The largest --image-side (a network at it has tensors beyond any address space anyway).
inline constexpr std::int64_t k_max_image_side = std::int64_t{1} << 20;
/// The largest --batch (the global batch under data parallelism): an int32, as frameworks
/// index a batch.
inline constexpr std::int64_t k_max_batch = std::numeric_limits<std::int32_t>::max();

/// The options common to train and plan.
struct network_run_options {
  std::string net;  ///< a zoo name, or an ONNX model's path (see is_onnx_net)
  zoo_options zoo;  ///< for an ONNX model only batch applies (0: the model's own)
  std::vector<std::string> policies;
  std::size_t budget_bytes = 0;  ///< 0 = no budget
  executor_options executor;     ///< policy and budget are filled per run; heap.trace_path
                                 ///< is MEMWEAVE_TRACE (see trace_path_of)
  std::string json, csv, svg;    ///< output paths ("" = none)
  /// --trace-timeline: the last iteration's streams as a Chrome/Perfetto trace ("" = none;
  /// see timeline_path_of).
  std::string timeline;
  /// Called on each policy's report before the summary (plan --ranks adds the network).
  std::function<void(policy_report&)> amend;
  bool lr_given = false, seed_given = false;  ///< --lr, --seed on the command line
  /// --cost-model / MEMWEAVE_COST_MODEL was auto: each run's device is asked for its own
  /// figures (cost_model::for_device); executor.model is the default until then.
  bool model_from_device = false;
  // train/eval (training_options.hpp): the learning rate of iteration i is
  // schedule.rate(executor.learning_rate, i); --init-from's checkpoint (null: none) is
  // loaded into every policy's executor, which then starts at first_iteration; --save
  // receives the weights after the last iteration ("" = none).
  lr_schedule schedule;
  /// Resumed: the schedule or its warm-up (or both) came from --init-from's checkpoint.
  bool schedule_from_checkpoint = false;
  std::string init_path;
  std::shared_ptr<const checkpoint_file> init;
  std::int64_t first_iteration = 0;
  std::string save;
  /// --tile: fuse the layers over the budget into tiled segments (SFT, tiling_plan.hpp);
  /// what the last network made was cut into is kept in `tiling`.
  bool tile = false;
  std::vector<tiled_segment_choice> tiling;
  /// --tile: the network before make_run_network tiled it, which a policy that does not fit
  /// with the budget's segments is tiled again from (policy_tiling.hpp).
  std::shared_ptr<const network> untiled;
  /// --split: TSPLIT: the steps whose working set exceeds --budget run in micro-batches, and
  /// CONV/FC steps where one image is too much in output-channel groups
  /// (split_parts_if_asked), their micro-tensors in host memory under utp and all.
  bool split = false;
  /// With --split, `all` weighs the split plans of split_plan_shares, mixes the fastest with
  /// the others region by region (MEMWEAVE_SPLIT_REGIONS) and runs the fastest
  /// (executor_options::split_weighed); the searches, which ask only whether it fits, do not.
  bool split_weighed = true;
  /// train --export-onnx: a copy of the ONNX model with the trained weights ("" = none).
  std::string export_onnx;
  /// --net PATH.onnx, read once (load_onnx_net) for every network made from it.
  std::shared_ptr<const onnx_model> onnx_file;
  /// Persistent tensors to set before the first iteration, by name (an ONNX model's
  /// weights); written only on a device that touches memory.
  std::map<std::string, std::vector<float>> initial_weights;
  /// Called once, with the first policy that ran every iteration, before its executor goes
  /// (train --export-onnx reads the trained weights there).
  std::function<void(const std::string& policy, const memweave::executor&)> on_trained;
};

/// Runs `parse`; an invalid_argument it throws is rethrown prefixed with `knob`, the option
/// or variable the text came from (parsers of names know the name, not where it came from).
template <class F>
auto from_knob(const std::string& knob, F&& parse) {
  try {
    return parse();
  } catch (const invalid_argument& e) {
    throw invalid_argument(knob + ": " + e.what());
  }
}

/// --budget's largest: 64 TiB, half of x86-64's 128 TiB of user address space: `plan`'s null
/// device reserves the budget's addresses (it touches no memory), and above about 80-100 TiB
/// that reservation failed, even `plan --max-batch` (session 42's hostile run); no device
/// holds that much.
inline constexpr std::uint64_t k_max_budget = std::uint64_t{64} << 40;

/// Whether --net names an ONNX model file (a path ending in ".onnx") rather than a zoo network.
bool is_onnx_net(const std::string& net);

/// Reads --net's ONNX model into o.onnx_file, once (its errors naming --net); nothing for a
/// zoo name.
void load_onnx_net(network_run_options& o);

/// The network of `o` at `batch`, without weights (planning): the zoo's, or the ONNX
/// model's (o.onnx_file, which load_onnx_net must have read).
network make_planning_network(const network_run_options& o, std::int64_t batch);

/// The network of `o` at its batch (loading an ONNX model if needed). For an ONNX model and
/// `weights` (train, eval), its weights go into o.initial_weights, and the rest of the
/// import (bindings, source) into `*onnx` when given.
network make_run_network(network_run_options& o, bool weights,
                         std::optional<imported_model>* onnx = nullptr);
/// --init-from's checkpoint (none: nothing to do) checked against `net` before anything runs,
/// naming --net as given: a file that does not match is bad input, refused once (each policy
/// refused it in its row, after "resuming at iteration N" had been printed). `evaluation`:
/// an evaluation keeps no momenta, so the file's are not looked for.
void check_init_matches(const network_run_options& o, const network& net, bool evaluation);
/// make_run_network, where --tile's budget_too_small (the budget below the least segment
/// step) is "does not fit": said on `out` ("memweave COMMAND NET: --tile does not fit: ...")
/// and nullopt, for exit 1 as a policy below its floor; other errors are thrown.
std::optional<network> make_run_network_or_unfit(network_run_options& o, bool weights,
                                                 std::optional<imported_model>* onnx,
                                                 const std::string& command, std::ostream& out);

/// `net` cut into tiled segments for o.budget_bytes when o.tile (the segments into
/// `*segments` when given); `net` itself otherwise. --tile needs --budget. A budget too
/// small names the least that tiles where `name_least_budget` (one plan, not a search).
network tile_if_asked(network net, const network_run_options& o,
                      std::vector<tiled_segment_choice>* segments = nullptr,
                      bool name_least_budget = false);
/// The heap's block size the planners round to (executor.heap.block_bytes; 0: the heap's 1024).
std::size_t heap_block_of(const network_run_options& o) noexcept;
/// --split: the micro-batches and CONV/FC output-channel groups per route step of `net` at
/// o.budget_bytes (plan_splits), into executor_options::split_parts and channel_parts; none
/// without --split. budget_too_small when even one image per micro-batch, one output
/// channel per group, does not fit.
/// On the host and null devices (`host_algorithms`) the micro-steps hold a fixed or max
/// algorithm's workspace, a fixed one checked first (promised_workspace_bytes); on cuda no
/// workspace is planned. CONV/FC steps may run in output-channel groups on every device.
void split_parts_if_asked(const network& net, const network_run_options& o, executor_options& eo,
                          bool host_algorithms);
/// One line per tiled segment of o.tiling, for the command's output ("" when none).
std::string describe_tiling(const network_run_options& o);

/// Reads --net (a zoo name or a .onnx file; --image-side, --width and --classes are refused
/// with a model file, whose shapes are its own), --batch, --image-side, --width, --classes,
/// --policy, --budget, --fit,
/// --conv-ws, --recompute, --seed, --lr, --threads, --host-pool, --prefetch-distance,
/// --cost-model, --json, --csv, --svg, --trace-timeline: each number to its type and range, each
/// error naming the option.
network_run_options read_network_run_options(cli_args& args);

/// The heap trace file of `policy`: MEMWEAVE_TRACE itself when one policy runs,
/// "<MEMWEAVE_TRACE>.<policy>" when several do (each keeps its own), and on rank N > 0 of a
/// data-parallel run that with ".rank<N>" appended (each rank's heap its own file); "" when
/// unset.
std::string trace_path_of(const network_run_options& o, const std::string& policy);

/// Where the weights a run starts from come from: "from PATH" (--init-from), "the model's"
/// (--net PATH.onnx), "initial (seed)".
std::string weights_text(const network_run_options& o);

/// The host link of the planning (null) device, GB/s: MEMWEAVE_HOST_LINK_GBPS when set,
/// else the cost model's, so that its copies take what the schedule planned them to.
double null_link_gbps(const network_run_options& o);

/// The planning (null) device of `plan` and its searches: `capacity` bytes, or those of
/// MEMWEAVE_DEVICE_BYTES where it is set (as `train --device host` takes them: plan said a
/// budget fits that train refused as beyond the device), and null_link_gbps's link.
device_options planning_device(const network_run_options& o, std::size_t capacity);

/// The --trace-timeline file of `policy`: the path itself when one policy runs, the policy
/// named before its ".json" when several do ("t.json" -> "t.utp.json"); "" when unset.
std::string timeline_path_of(const network_run_options& o, const std::string& policy);

/// Warns (logs) about the variables set that this run does not use: MEMWEAVE_SPLIT_COMPRESS
/// without --split, MEMWEAVE_SCHEDULE_COMPRESS without the policy `all`. A silently ignored
/// setting reads as one that took effect.
void warn_unused_variables(const network_run_options& o);

/// Makes the device `--device KIND` asked for once, before anything runs: its failure (no
/// GPU) is a device_error naming --device, whose advice (MEMWEAVE_DEVICE=host) would not
/// apply, since the option overrides the variable.
void check_device_option(const device_options& dev, const std::string& kind);

/// Checks, before anything runs, that every file the run will write (--json, --csv, --svg,
/// --export-onnx, --save, each policy's heap trace and timeline) can be: not a directory, in an
/// existing writable directory, openable for writing (a file that exists is opened without
/// truncating it; one that does not is created and removed again), no two the same, and none
/// of them a file the run reads (--init-from, the model file of --net, the files of `data`
/// ("cifar10:PATH"), MEMWEAVE_CONV_CACHE): writing it would destroy that input. Throws
/// invalid_argument naming the options and the path.
void check_output_paths(const network_run_options& o, const std::string& data = "");

/// Writes --json, --csv and --svg from `report`, and names on `out` each file written
/// (with the policies' timelines).
void write_run_outputs(const network_run_options& o, const run_report& report, std::ostream& out);

/// Whether `e` means "this policy does not fit the budget" (out_of_memory, or a budget
/// below the policy's floor) rather than bad input or a failure.
bool does_not_fit(const std::exception& e) noexcept;

/// Runs `iterations` iterations of policy `policy` on a fresh device made from
/// `device_opts` (null: plan) with `data` (null on the null device). Not fitting becomes
/// fits = false with the message; a loss that is not finite, failed = true with a message
/// naming the iteration and --lr; any other error is thrown. `progress` (may be null) gets
/// one line per iteration. With `output_error`, a failure to write what a run that trained
/// leaves (--save, --export-onnx, its timeline) is kept there (the first one) and the report
/// returned whole; without it, it is thrown. `heap_made` (may be null) is set once the
/// policy's heap, which writes its MEMWEAVE_TRACE, is made.
policy_report run_policy(const network& net, const network_run_options& o,
                         const std::string& policy, const device_options& device_opts,
                         int iterations, data_source* data, std::ostream* progress,
                         std::string* device_name, std::exception_ptr* output_error = nullptr,
                         bool* heap_made = nullptr);

/// Whether `policy` runs one iteration of `net` within the budget on the null device `dev`.
/// Only "does not fit" is false: any other error (a bad --conv-ws, say) is the user's to
/// fix and propagates, instead of being taken for a budget too small.
bool plan_fits_budget(const network& net, const network_run_options& o, const std::string& policy,
                      const device_options& dev);

/// run_policy, and under --tile (o.untiled set) where the policy does not fit with the
/// budget's segments (o.tiling), run again tiled for the largest smaller target with which it
/// fits (retile_for_policy), its row naming that target and its segments; where none fits,
/// the row says so.
policy_report run_policy_retiling(const network& net, const network_run_options& o,
                                  const std::string& policy, const device_options& dev,
                                  int iterations, data_source* data, std::ostream* progress,
                                  std::string* device_name, std::exception_ptr* output_error,
                                  bool* heap_made);

/// Runs every policy of `o` into report.policies (report's other fields are the caller's):
/// a policy that fails is kept as a row (failed, with its error) and the next one still
/// runs; a policy that trained keeps its row when one of its outputs cannot be written. Then
/// writes the summary and every output it can, and rethrows the first error (or throws
/// invalid_argument with the first failed row's message); otherwise returns the exit code:
/// 0 when some policy fits, 1 when none does. `progress` as run_policy.
int run_policies(const network& net, const network_run_options& o, const device_options& dev,
                 int iterations, data_source* data, run_report& report, std::ostream& out,
                 std::ostream* progress);

/// What a rank reports of a failure `e`: where another rank's failure stopped this one (its
/// collective abandoned, which the stream wrapped in its own advice), "stopped: rank N failed:
/// <that rank's message>"; else e.what(). `comm` may be null (one process).
std::string failure_text(const std::exception& e, const communicator* comm);

}  // namespace memweave
