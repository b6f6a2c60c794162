// Runs of the same runtime on the null device, with the schedule's link and model: what
// `memweave plan` reports, and what `all`'s weighing compares (executor::weigh_policy,
// executor::weigh_split_plans). No communicator (the plan's buckets are kept by `ranks`), no
// files written, nothing re-planned, and no weighing inside.
#pragma once

#include <optional>

#include "memweave/device/device.hpp"
#include "memweave/engine/executor.hpp"
#include "memweave/schedule/memory_schedule.hpp"

namespace memweave {

/// `options` for such a run.
executor_options null_run_options(const executor_options& options);

/// The null device it runs on: at least 1 TiB of address space, the schedule's host link.
device_options null_run_device(const executor_options& options);

/// One iteration of `net` under `options` so run: its modelled seconds, 0 where it does not
/// run (out of budget or host memory); its schedule, where one was planned, in `*schedule`.
double null_run_seconds(const network& net, const executor_options& options,
                        std::optional<memory_schedule>* schedule = nullptr);

}  // namespace memweave
