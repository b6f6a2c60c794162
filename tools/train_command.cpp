// `memweave train`: trains a zoo network under a budget with each policy asked for, on the
// host (or cuda) device, printing a progress line per iteration and a summary; optionally
// from a checkpoint (--init-from) and saving one (--save), with a learning-rate schedule.
// Everything the run will need (options, data, output paths) is checked before the first policy
// runs.
#include <limits>

#include "commands.hpp"
#include "memweave/core/config.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"
#include "network_run.hpp"
#include "report_writers.hpp"
#include "training_options.hpp"

namespace memweave {

int train_command(int argc, const char* const* argv, std::ostream& out) {
  cli_args args(argc, argv, 2, {});
  network_run_options o = read_network_run_options(args);
  read_init_from(args, o, true);
  read_training_options(args, o);
  const int iterations =
      static_cast<int>(args.get_int("iterations", 1, std::numeric_limits<int>::max()).value_or(10));
  const std::string data = args.get_or("data", "synthetic");
  device_options dev = device_options::from_environment();
  if (auto kind = args.get("device")) {
    MEMWEAVE_EXPECTS(*kind == "auto" || *kind == "host" || *kind == "cuda",
                     knob_value("--device", *kind) +
                         " is not a device to train on: expected auto, host or cuda "
                         "(`memweave plan` runs on the null device)");
    dev.kind = *kind;
  }
  MEMWEAVE_EXPECTS(dev.kind != "null",
                   "MEMWEAVE_DEVICE=null cannot train: use --device host|cuda|auto "
                   "(`memweave plan` runs on the null device)");
  args.reject_unused();
  check_output_paths(o);

  const network net = make_network(o.net, o.zoo);
  // One data source for every policy (its batches depend only on the iteration), made
  // before any runs so that a bad --data fails first.
  const auto source =
      make_data_source(data, net[net.data_layer()].output_shape, net.classes(), o.executor.seed);
  run_report report;
  report.command = "train";
  report.network = o.net;
  report.batch = o.zoo.batch;
  report.budget_bytes = o.budget_bytes;
  report.iterations = iterations;
  out << "memweave train " << o.net << ": " << net.size() << " layers, " << net.parameter_count()
      << " parameters, batch " << o.zoo.batch << ", data " << data << "\n";
  if (o.init) {
    out << "from " << o.init_path << ": resuming at iteration " << o.first_iteration << "\n";
  }
  // A policy that does not fit is a result, reported in the summary; exit 1 is for when
  // none does.
  return run_policies(net, o, dev, iterations, source.get(), report, out, &out);
}

}  // namespace memweave
