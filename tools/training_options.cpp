// The training state on the command line: solver settings, the learning-rate schedule and
// checkpoints, resolved against a checkpoint's saved state (flags given win).
#include "training_options.hpp"

#include <limits>

#include "memweave/core/error.hpp"
#include "memweave/core/log.hpp"
#include "memweave/core/units.hpp"

namespace memweave {

void read_init_from(cli_args& args, network_run_options& o, bool solver) {
  // An empty path is refused as every path option's is ("cannot read checkpoint ''").
  const std::string path = args.get_path("init-from");
  if (path.empty()) return;
  o.init_path = path;
  o.init = std::make_shared<const checkpoint_file>(
      from_knob("--init-from", [&] { return read_checkpoint(path); }));
  const checkpoint_state& st = o.init->state;
  o.first_iteration = st.iteration;
  if (!o.seed_given) o.executor.seed = st.seed;
  if (!solver) return;
  if (!o.lr_given) o.executor.learning_rate = st.solver.learning_rate;
  o.executor.momentum = st.solver.momentum;
  o.executor.weight_decay = st.solver.weight_decay;
}

void read_training_options(cli_args& args, network_run_options& o) {
  if (auto text = args.get("momentum")) {
    const double m = parse_double_unbounded(*text, "--momentum");
    // Below 1 as the solver keeps it: a float (0.99999999999 rounds to 1). One range, one
    // message (below 0 was told "from 0 to 1", which 1 is not; session 48's hostile run).
    const auto kept = static_cast<float>(m);
    MEMWEAVE_EXPECTS(m >= 0.0 && kept < 1.0f,
                     knob_value("--momentum", *text) +
                         " is out of range: expected a number from 0 to below 1 "
                         "(the fraction of the last step kept; as a float32, at "
                         "most 0.99999994); change it");
    o.executor.momentum = kept;
  }
  if (auto wd = args.get_double("weight-decay", 0.0, 1.0)) {
    o.executor.weight_decay = static_cast<float>(*wd);
  }
  // Resumed, the schedule and the warm-up not given are the checkpoint's, each on its own
  // (a run resumed without them trained at the constant base rate, silently); the resuming
  // line says what came from the file.
  const checkpoint_state* saved = o.init ? &o.init->state : nullptr;
  const bool saved_schedule = saved != nullptr && saved->schedule.has_value();
  const auto schedule = args.get("lr-schedule");
  if (schedule) {
    o.schedule = lr_schedule::parse(*schedule, "--lr-schedule");
  } else if (saved_schedule) {
    o.schedule = *saved->schedule;
  }
  const auto warmup = args.get_int("warmup", 0, std::numeric_limits<std::int32_t>::max());
  o.schedule.warmup = warmup ? *warmup : saved_schedule ? saved->schedule->warmup : 0;
  const bool schedule_given = schedule.has_value();
  if (saved != nullptr && !saved_schedule && !schedule_given && !warmup) {
    log(log_level::warn, "--init-from " + o.init_path +
                             ": the checkpoint records no learning-rate schedule: resuming "
                             "at the constant base rate; give --lr-schedule and --warmup as "
                             "the run that saved it had them");
  }
  o.schedule_from_checkpoint = saved_schedule && (!schedule_given || !warmup);
  o.save = args.get_path("save");
  MEMWEAVE_EXPECTS(o.save.empty() || o.policies.size() == 1,
                   "--save " + o.save + " with " + std::to_string(o.policies.size()) +
                       " policies: give one --policy, whose weights are saved");
}

}  // namespace memweave
