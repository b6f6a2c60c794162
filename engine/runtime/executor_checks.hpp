// The executor's checks of what it is given, before it takes any memory: the options'
// numbers (callers in code bypass the command line's checks), and the budget against the
// device and against the least the policy can run the network with.
#pragma once

#include "memweave/device/device.hpp"
#include "memweave/engine/data_source.hpp"
#include "memweave/engine/executor.hpp"
#include "memweave/engine/liveness.hpp"
#include "memweave/engine/network.hpp"
#include "memweave/engine/route.hpp"
#include "memweave/engine/tensor_table.hpp"

namespace memweave {

/// The heap's block the options give (0: the heap's default, 1 KiB): what budgets and split
/// plans round each tensor to.
std::size_t heap_block_bytes(const executor_options& options) noexcept;

/// Throws invalid_argument naming the first option out of its range.
void check_executor_options(const executor_options& options);

/// Throws invalid_argument when options.budget_bytes exceeds `dev`'s free memory, and
/// budget_too_small when it is below what the policy needs: the block-rounded tensors of the
/// most demanding step (l_i), plus every persistent tensor where those never leave the device
/// (under utp/all they move like the others, so a step needs only its own). Checks nothing
/// when the budget is 0 (the heap's default).
/// That `data` makes the images and labels `net` reads: its image shape (c, h, w) and its
/// class count are the DATA layer's. A larger image overran the staging buffer; a smaller
/// one trained on a partly filled batch; more classes failed the loss kernel.
/// invalid_argument naming both shapes and `who` (the call).
void check_data_source(const data_source& data, const network& net, const char* who);

/// That `options`' split_parts and channel_parts fit `net` run by `steps`: at most one entry
/// per route step, micro-batches from 1 to the batch, channel groups from 1 to the output
/// channels of a CONV (groups 1) or FC step and 1 on every other step (they were clamped or
/// ignored in silence). invalid_argument naming the field, the step and the range.
void check_split_options(const network& net, const route& steps, const executor_options& options);

void check_budget(const network& net, const route& steps, const tensor_table& table,
                  const memory_plan& plan, device& dev, const executor_options& options);

}  // namespace memweave
