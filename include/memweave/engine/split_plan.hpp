// TSPLIT's planner, first stage: how many micro-batches each layer step runs in so that its
// micro-step working set fits a budget (split along the sample dimension; split_step.hpp runs
// them, bit-identical to the whole step on the host).
//
// A micro-step holds its step's batch-independent tensors whole (parameters, their gradients
// and momenta, BN statistics) and, of every batch-shaped tensor it touches (activations,
// gradients, the dropout mask, the labels), only the current micro-batch's slice: the other
// slices are on the host. Each step takes the fewest parts that fit (fewest splits: a split
// costs kernel efficiency and link traffic); a step that fits whole is not split. The floor of
// a budget is then the largest step at one image per micro-batch, not max(l_i).
//
// The cost model: a step in k parts costs k micro-steps, each the larger of its compute
// (flops / k) and its memory traffic (its micro working set: the fixed tensors are read
// again by every micro-step, which is what smaller kernels lose), plus the link time of the
// slices that must come from and go back to the host ((k-1)/k of the step's batch-shaped
// bytes, inputs of BN's two passes twice), not overlapped with compute.
//
// Where one image per micro-batch still does not fit (batch 1, or FC weights), a CONV
// (groups 1) or FC step also splits along its output channels (features): a micro-step then
// holds 1/channel_parts of its output, output gradient, weights, bias and their gradients and
// momenta, and the whole input (split_step.hpp's run_channel_split_step runs it). It takes
// the fewest channel parts that fit at one image per micro-batch, then the fewest
// micro-batches at those channel parts. Its link time adds the weight slices not resident:
// (c-1)/c of its parameter bytes per micro-batch. The floor is the largest micro-step after
// both splits (one image, one channel per group for CONV/FC).
//
// Under a convolution mode that names its algorithm (fixed, max), a CONV micro-step also holds
// that algorithm's workspace, whole (promised_workspace_bytes), and so does the floor.
//
// Not planned here (issue 13's later stages): the memory schedule's swaps and drops of whole
// tensors around the split steps, and micro-tensors as entries of the tensor cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "memweave/conv_workspace/conv_workspace_selector.hpp"
#include "memweave/engine/cost_model.hpp"
#include "memweave/engine/layer_memory.hpp"
#include "memweave/engine/network.hpp"
#include "memweave/engine/tensor_table.hpp"

namespace memweave {

/// One step of the plan.
struct split_step {
  std::size_t step = 0;  ///< route step, 0..2N-1
  layer_id layer = invalid_layer;
  bool forward = true;
  std::size_t fixed_bytes = 0;      ///< batch-independent tensors, block-rounded
  std::size_t batch_bytes = 0;      ///< batch-shaped tensors, whole, block-rounded
  int parts = 1;                    ///< micro-batches planned
  int channel_parts = 1;            ///< output-channel groups planned (CONV/FC only)
  std::size_t micro_bytes = 0;      ///< the largest micro-step's working set at `parts`
  std::size_t least_bytes = 0;      ///< the working set at one image per micro-batch (and, for
                                    ///< CONV/FC, one output channel per group)
  std::size_t workspace_bytes = 0;  ///< a promised convolution workspace, block-rounded: in
                                    ///< micro_bytes and least_bytes
  double whole_s = 0;               ///< the model's time of the whole step
  double split_s = 0;               ///< its micro-steps' time (whole_s when not split)
  double link_s = 0;                ///< its slices' host-link time (0 when not split)
};

struct split_plan {
  std::vector<split_step> steps;  ///< every step with work, in route order
  std::size_t budget_bytes = 0;
  std::size_t max_layer_bytes = 0;  ///< max l_i, block-rounded (the floor without splits)
  std::size_t floor_bytes = 0;      ///< the largest least_bytes: the floor with splits
  std::size_t floor_step = 0;       ///< the step reaching it

  /// parts per route step (steps without work: 1), for executor_options::split_parts.
  std::vector<int> parts(std::size_t step_count) const;
  /// channel_parts per route step (1 where none), for executor_options::channel_parts.
  std::vector<int> channel_parts(std::size_t step_count) const;
  /// How many steps run in more than one part.
  std::size_t split_count() const noexcept;
  /// How many steps (CONV/FC) run in more than one channel group.
  std::size_t channel_split_count() const noexcept;
  double whole_seconds() const noexcept;  ///< Σ whole_s
  double split_seconds() const noexcept;  ///< Σ split_s (the compute lost to smaller kernels)
  double link_seconds() const noexcept;   ///< Σ link_s
};

/// The working set of step `s` of `table` in `parts` micro-batches (and, for a CONV of
/// groups 1 or an FC step, `channel_parts` output-channel groups; other steps ignore it),
/// each tensor rounded up to `block_bytes` (the heap's block).
std::size_t micro_step_bytes(const tensor_table& table, std::size_t s, int parts,
                             std::size_t block_bytes, int channel_parts = 1);
/// The same for a step of layer `l` touching `accesses` (a step's own, or a replayed
/// forward's).
std::size_t micro_step_bytes(const tensor_table& table, const layer& l,
                             std::span<const tensor_access> accesses, int parts,
                             std::size_t block_bytes, int channel_parts = 1);

/// The cost model's time of a step run as `micro_steps` micro-steps (its micro-batches times
/// its output-channel groups): each the larger of its share of `compute_s` (the whole
/// step's compute) and its working set's traffic, `micro_bytes` at the model's device memory
/// rate. The fixed tensors (weights) are read again by every micro-step: the efficiency
/// smaller kernels lose. The null device charges a split step's kernels this (never less than
/// the whole step), the memory schedule plans a staged step with it, and plan_splits reports
/// it (split_step::split_s).
double micro_steps_seconds(const cost_model& model, double compute_s, std::size_t micro_bytes,
                           std::int64_t micro_steps) noexcept;

/// Whether tensor `t` holds one slice per image of a batch of `batch` (activations, their
/// gradients, the dropout mask, the labels): a micro-batch needs only its own slice.
bool batch_shaped(const tensor_info& t, std::int64_t batch) noexcept;

/// The images of the largest of `parts` micro-batches of `batch` (parts clamped to
/// [1, batch], as micro_batch_bounds splits them).
std::int64_t largest_micro_batch(std::int64_t batch, int parts) noexcept;

/// The output channels (features) a step of `l` can be split into: CONV of groups 1 and FC,
/// their output channels; 1 for every other layer.
std::int64_t splittable_channels(const layer& l) noexcept;

/// Whether tensor `t`, touched by a step of `l`, is cut by a split of l's output channels:
/// its output and output gradient, its parameters, their gradients and momenta.
bool channel_cut(const tensor_info& t, const layer& l) noexcept;

/// The shares of the budget that `all`'s weighing fits each micro-step in, one split plan each
/// (executor_options::split_weighed): the whole budget gives the fewest micro-batches; a
/// smaller share more, which leaves the memory schedule room beside them. Measured in
/// PERFORMANCE.md (issue 13): each of 0.8 to 0.9, 0.7, 0.55 and 0.4 ran fastest somewhere
/// (AlexNet b128 at 0.8 x max(l_i): 228 ms per iteration with 0.85, 180 with 0.4).
inline constexpr double split_plan_shares[] = {1.0, 0.85, 0.7, 0.55, 0.4};

/// The convolution workspace each route step of `table` takes whatever memory is free, under
/// `conv_ws` (fixed: its algorithm's, as the host's candidates size it; max: the largest of
/// the step's candidates, since the fastest is known only once measured): a micro-step needs
/// it beside its tensors, whole (the executor sizes it for the whole step). 0 for the other
/// steps, and under dynamic and none (a step runs without one where none fits). A fixed
/// algorithm the host lacks is invalid_argument naming the knob and what is available
/// (check_fixed_algorithm), before any budget is weighed: bad input, not a floor of no
/// workspace (host and null run these candidates; cuda plans no workspace: see its callers).
std::vector<std::size_t> promised_workspace_bytes(const tensor_table& table,
                                                  const conv_ws_options& conv_ws);

/// The fewest parts per step whose micro-steps fit `budget_bytes`. Throws budget_too_small
/// naming the step, its layer and its smallest micro-step when even one image per
/// micro-batch does not fit (`knob`: the flag or variable that set the budget).
/// `channel_splits` false plans micro-batches only (a step that does not fit at one image is
/// then too small a budget). `forward_only` plans the forward steps alone (an evaluation's).
/// `workspace_bytes` (per route step, promised_workspace_bytes; empty: none) is added to each
/// micro-step of its step, block-rounded: the floor then holds it too (max(l_i) does not).
split_plan plan_splits(const network& net, const tensor_table& table, const layer_memory& memory,
                       const cost_model& model, std::size_t budget_bytes, std::size_t block_bytes,
                       const char* knob, bool channel_splits = true, bool forward_only = false,
                       std::span<const std::size_t> workspace_bytes = {});

}  // namespace memweave
