// What the memory-schedule planner (memweave/schedule) is told about the executor's
// iteration under `all`, and the executor's retries when a plan does not fit. Deciding
// only: nothing here touches memory.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <vector>

#include "memweave/alloc/device_heap.hpp"
#include "memweave/conv_workspace/conv_workspace_selector.hpp"
#include "memweave/engine/cost_model.hpp"
#include "memweave/engine/layer_memory.hpp"
#include "memweave/engine/network.hpp"
#include "memweave/engine/route.hpp"
#include "memweave/engine/tensor_table.hpp"
#include "memweave/schedule/memory_schedule.hpp"

namespace memweave {

/// The executor's iteration as the planner needs it.
struct schedule_inputs {
  const network* net = nullptr;
  const route* steps = nullptr;
  const tensor_table* table = nullptr;
  const layer_memory* memory = nullptr;
  const device_heap* heap = nullptr;  ///< its block rounding
  cost_model model;                   ///< step times and CONV candidates
  double link_bytes_per_s = 0;        ///< the host link the copies are timed on
  double copy_latency_s = 0;          ///< each copy's cost besides its bytes (measured)
  std::size_t budget_bytes = 0;
  /// Where set and not dynamic: each CONV step is planned with the one algorithm this mode
  /// runs, its workspace whole (schedule_options::conv_mode_workspaces); a fixed name the
  /// model's candidates lack (a cuDNN one) leaves the step dynamic selection's ladder.
  const conv_ws_options* conv_mode = nullptr;
  /// The mode the executor runs its convolutions in, whether or not the plan takes it
  /// (conv_mode): where it names one algorithm a CONV's measured time is every option's (the
  /// step runs that algorithm whatever workspace it is left); under dynamic selection it is
  /// the fastest's within the budget, and the other options scale from there.
  const conv_ws_options* conv_run = nullptr;
  std::function<bool(tensor_id)> in_cache;  ///< the tensors the cache (and so the plan) moves
  /// Asked as the planner goes (plan_memory_schedule's `stop`); empty: never.
  std::function<bool()> stop;
  /// Per step, its measured time (Capuchin: from a first iteration on a real device), which
  /// replaces the model's; a step's CONV options take it as conv_run says. Empty, or a
  /// negative entry: the model's.
  std::vector<double> measured_seconds;
  /// Per tensor, fused_bn_act_sources' answer where the backend runs fused replays
  /// (kernel_launcher::fuses_bn_act); empty: every rebuild replays its own layer.
  std::vector<layer_id> fused;
  /// Per tensor, the CONV whose fused replay rebuilds it (an ACT's output the plan prices as
  /// two replays: `fused` names no layer for it), or invalid_layer; empty: none. That CONV's
  /// output is skipped by the replay (written straight into the ACT's output), so the plan
  /// never holds it on the device (schedule_tensor::fused_away), and the lower bound charges
  /// the rebuild the CONV alone (schedule_tensor::least_rebuild_seconds).
  std::vector<layer_id> fused_conv;
  /// TSPLIT, per route step (empty: none staged): the micro-tensors a staged step reaches in
  /// host memory (schedule_use::on_host) and, for each, the device bytes of its slices in
  /// the micro buffers and the bytes its slices' copies move between the micro-steps (the
  /// planner charges those, and a copy out of one resident before, a copy in for a step on
  /// the device after: the executor's stage and fetch_staged, on the compute stream).
  std::vector<std::vector<tensor_access>> staged;
  /// Per route step (empty: none), the micro-batches a staged step runs in: its kernels are
  /// planned at split_model_seconds (what the null device charges them).
  std::vector<int> split_parts;
  std::vector<std::vector<std::size_t>> staged_slice_bytes;
  std::vector<std::vector<std::uint64_t>> staged_copy_bytes;
  /// Per tensor (empty: none): held as fp16 in host memory (schedule_tensor::staged_fp16).
  std::vector<bool> staged_fp16;
};

/// Whether replaying the forward of `t`'s layer rebuilds it: a layer's output (not the batch
/// read by DATA, nor SOFTMAX's, whose replay would touch the loss) written by its forward.
bool rebuildable(const network& net, const tensor_table& table, tensor_id t);

/// Per tensor: a BN layer's input. Never rounded to fp16 (schedule_tensor::compressible,
/// executor_options::split_compress): BN subtracts the mean from it, which cancels where the
/// mean is large against the spread.
std::vector<bool> bn_input_tensors(const network& net, const tensor_table& table);

/// Per tensor: the BN layer whose forward, with the tensor's own ACT applied element by
/// element, rebuilds it in one pass without the BN output in between (a fused replay), or
/// invalid_layer. That holds for an ACT's output whose input is a BN's output that no step
/// but that ACT's forward reads (ACT's backward reads its output, BN's its input): the BN
/// output is dead once the ACT ran, so rebuilding the ACT's output through it would rebuild
/// a tensor only to read it once.
/// With `conv`, a CONV's output read by its ACT's forward alone likewise names the CONV: its
/// forward writes the ACT's output and the ACT runs over it in place. The executor replays
/// these fused where the schedule rebuilds the ACT's output through a dead CONV output; the
/// plan prices them as the two replays (planning with them as one changed the greedy's
/// choices for the worse: VGG16 b64 at a third of its peak, 0.90 -> 0.81 of liveness's
/// speed), so a fused CONV+ACT replay only ever takes less time and memory than planned.
std::vector<layer_id> fused_bn_act_sources(const network& net, const tensor_table& table,
                                           const route& path, bool conv = false);

/// Plans the iteration's memory schedule under the budget; nullopt when even the retries
/// cannot bring every step under it (the reactive cache alone then does better).
std::optional<memory_schedule> plan_executor_schedule(const schedule_inputs& in,
                                                      const schedule_options& options);

/// The lower bound on any exact schedule's iteration (bound_memory_schedule) that
/// plan_executor_schedule gives its plan (`bound_seconds`, with options.bound): on the problem
/// whose steps may take every workspace the budget allows.
double bound_executor_schedule(const schedule_inputs& in);

}  // namespace memweave
