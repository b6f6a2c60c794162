// The executor: runs training iterations of a network on a device, taking every byte of
// device memory from a device_heap, following a memory plan (baseline or liveness), and
// recording per step what memory did.
//
// The step loop (DESIGN.md): for each step of the route, allocate what the plan says is
// born there (through the heap), record the step's memory, enqueue the layer's kernel on
// the compute stream (on `null`, only its simulated cost), then free what dies after the
// step. Frees right after enqueueing are safe: the compute stream is in order, so a later
// kernel that gets the same bytes runs after this one. On `null` nothing is ever read or
// written, so `plan` and `train` run this same code.
//
// Not thread-safe: one thread drives an executor. Holds a reference to the network and the
// device, which must outlive it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "memweave/alloc/device_heap.hpp"
#include "memweave/conv_workspace/conv_workspace_selector.hpp"
#include "memweave/device/device.hpp"
#include "memweave/engine/data_source.hpp"
#include "memweave/engine/layer_memory.hpp"
#include "memweave/engine/liveness.hpp"
#include "memweave/engine/network.hpp"
#include "memweave/engine/route.hpp"
#include "memweave/engine/run_report.hpp"
#include "memweave/engine/tensor_table.hpp"

namespace memweave {

/// "baseline" or "liveness" (case-sensitive); invalid_argument listing them otherwise.
memory_policy parse_memory_policy(const std::string& name);

struct executor_options {
  memory_policy policy = memory_policy::liveness;
  /// The heap's arena: everything the network needs (parameters, momenta, activations,
  /// gradients, workspaces) must fit in it. 0 = heap_options' default (a fraction of the
  /// device's free memory).
  std::size_t budget_bytes = 0;
  /// Other heap settings (fit policy, block size, trace); pool_bytes is taken from
  /// budget_bytes when that is set.
  heap_options heap = {};
  /// Host kernel threads (0 = MEMWEAVE_THREADS, whose 0 means every core).
  int threads = 0;
  /// Convolution workspace selection (MEMWEAVE_CONV_WS): at each CONV step, after its
  /// functional tensors, the fastest algorithm whose workspace fits the heap's largest free
  /// run (dynamic), or none / max / fixed:<algorithm>. Workspaces are not in the memory plan:
  /// they are taken from the heap for the step's kernel and given back right after.
  conv_ws_options conv_ws = {};
  float learning_rate = 0.01f;
  float momentum = 0.9f;
  float weight_decay = 5e-4f;
  /// Seeds the parameters' initial values and the dropout masks.
  std::uint64_t seed = 1;
};

class executor {
 public:
  /// Prepares `net` on `dev`: route, tensor table, liveness plan, the heap (taking its
  /// arena), and the persistent tensors (parameters initialized from the seed, momenta 0,
  /// BN running statistics 0 and 1). Throws invalid_argument when the budget cannot hold
  /// even the persistent tensors plus the largest layer (no policy could run), or exceeds
  /// the device; out_of_memory when the device cannot give the arena.
  executor(const network& net, device& dev, const executor_options& options);
  ~executor();
  executor(const executor&) = delete;
  executor& operator=(const executor&) = delete;

  /// Runs one forward and backward pass with the solver's updates on the batch `iteration`
  /// of `data` (null on the null device), waits for it, and returns the loss (0 on null).
  /// Throws out_of_memory naming the step, the layer and the tensor when the budget cannot
  /// serve an allocation; the executor can then only be destroyed.
  double run_iteration(data_source* data, std::int64_t iteration);

  /// The last iteration's rows.
  const std::vector<step_record>& steps() const noexcept { return steps_; }
  /// Totals for the report (images_per_s and losses are the caller's).
  policy_report report() const;

  const route& steps_route() const noexcept { return route_; }
  const tensor_table& table() const noexcept { return table_; }
  const memory_plan& plan() const noexcept { return plan_; }
  const layer_memory& memory() const noexcept { return *layer_memory_; }
  const device_heap& heap() const noexcept { return *heap_; }
  const conv_workspace_selector& workspace_selector() const noexcept { return *selector_; }

  /// A copy of tensor `t` (resident persistent tensors: parameters, momenta, running stats).
  /// Throws invalid_argument when it is not resident or the device touches no memory.
  std::vector<float> read_tensor(tensor_id t) const;
  /// Every persistent tensor, in tensor-id order (for bit-identity comparisons).
  std::vector<std::vector<float>> read_persistent() const;

 private:
  void allocate_tensor(tensor_id t, std::size_t step);
  void free_tensor(tensor_id t) noexcept;
  void initialize_persistent();
  void run_step(std::size_t s, data_source* data, std::int64_t iteration);
  struct conv_step;
  conv_step choose_conv(const layer& l, bool forward, bool input_has_gradient);

  const network& net_;
  device& dev_;
  executor_options options_;
  route route_;
  tensor_table table_;
  std::unique_ptr<liveness> liveness_;
  std::unique_ptr<layer_memory> layer_memory_;
  memory_plan plan_;
  std::unique_ptr<device_heap> heap_;
  std::unique_ptr<conv_workspace_selector> selector_;
  struct kernel_state;
  std::unique_ptr<kernel_state> kernels_;

  std::vector<void*> ptr_;               // device pointer of each tensor (null when not resident)
  std::size_t bytes_live_ = 0;           // exact bytes of resident tensors
  std::size_t tensors_live_ = 0;         // resident tensors
  std::uint64_t tensors_allocated_ = 0;  // transient allocations in the last iteration
  std::vector<step_record> steps_;
  double bookkeeping_s_ = 0;    // host time outside kernels, last iteration
  double simulated_s_ = 0;      // null device: simulated seconds, last iteration
  double loss_ = 0;             // written by the SOFTMAX forward kernel
  std::vector<float> staging_;  // host images + labels of the current batch
};

}  // namespace memweave
