// What `train` and `eval` read besides the network options: the solver's settings and
// learning-rate schedule (train), and checkpoints in (--init-from) and out (--save).
#pragma once

#include <memory>
#include <string>

#include "cli_args.hpp"
#include "memweave/engine/checkpoint.hpp"
#include "network_run.hpp"

namespace memweave {

/// Reads --init-from FILE (the whole checkpoint, checked: a bad file fails here, before
/// anything runs) into o.init. With it, the seed (for the data source and dropout) and,
/// when `solver` is set, the momentum, weight decay and base learning rate not given on the
/// command line are the checkpoint's, and training resumes at its iteration.
void read_init_from(cli_args& args, network_run_options& o, bool solver);

/// Reads --momentum, --weight-decay, --lr-schedule, --warmup and --save into `o`, each
/// number to its range, each error naming the option. --save needs a single policy. Resumed
/// (read_init_from first), the schedule and warm-up not given are the checkpoint's; from a
/// file that records none (version 1) a warning says the rate stays constant.
void read_training_options(cli_args& args, network_run_options& o);

}  // namespace memweave
