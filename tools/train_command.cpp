// `memweave train`: trains a zoo network under a budget with each policy asked for, on the
// host (or cuda) device, printing a progress line per iteration and a summary.
#include "commands.hpp"
#include "memweave/core/config.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"
#include "network_run.hpp"
#include "report_writers.hpp"

namespace memweave {

int train_command(int argc, const char* const* argv, std::ostream& out) {
  cli_args args(argc, argv, 2, {});
  network_run_options o = read_network_run_options(args);
  const int iterations = static_cast<int>(args.get_int("iterations").value_or(10));
  const std::string data = args.get_or("data", "synthetic");
  device_options dev = device_options::from_environment();
  dev.kind = args.get_or("device", dev.kind);
  MEMWEAVE_EXPECTS(dev.kind != "null",
                   "train computes: use --device host|cuda|auto "
                   "(`memweave plan` runs on the null device)");
  args.reject_unused();

  const network net = make_network(o.net, o.zoo);
  run_report report;
  report.command = "train";
  report.network = o.net;
  report.batch = o.zoo.batch;
  report.budget_bytes = o.budget_bytes;
  report.iterations = iterations;
  out << "memweave train " << o.net << ": " << net.size() << " layers, " << net.parameter_count()
      << " parameters, batch " << o.zoo.batch << ", data " << data << "\n";
  for (const std::string& policy : o.policies) {
    report.policies.push_back(
        run_policy(net, o, policy, dev, iterations, data, &out, &report.device));
  }
  write_summary(out, report);
  write_outputs(o, report, out);
  // A policy that does not fit is a result, reported in the summary; failing is for
  // when none does.
  for (const auto& p : report.policies) {
    if (p.fits) return 0;
  }
  return 1;
}

}  // namespace memweave
