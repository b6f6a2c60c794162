// `memweave plan`: the same runtime as train on the null device (addresses, no memory, no
// kernels): per-step memory, peak, max(l_i), and whether each policy fits the budget.
#include "commands.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"
#include "network_run.hpp"
#include "report_writers.hpp"

#include <chrono>
#include <iomanip>

namespace memweave {

int plan_command(int argc, const char* const* argv, std::ostream& out) {
  cli_args args(argc, argv, 2, {});
  network_run_options o = read_network_run_options(args);
  args.reject_unused();

  const auto t0 = std::chrono::steady_clock::now();
  const network net = make_network(o.net, o.zoo);
  device_options dev;
  dev.kind = "null";
  // Without a budget the planning device is as large as address space allows, so that
  // every policy fits and its real peak is measured.
  dev.capacity_bytes = o.budget_bytes ? o.budget_bytes : (std::size_t{1} << 40);
  run_report report;
  report.command = "plan";
  report.network = o.net;
  report.batch = o.zoo.batch;
  report.budget_bytes = o.budget_bytes;
  report.iterations = 1;
  for (const std::string& policy : o.policies) {
    report.policies.push_back(run_policy(net, o, policy, dev, 1, "", nullptr, &report.device));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out << "memweave plan " << o.net << ": " << net.size() << " layers, " << net.parameter_count()
      << " parameters, batch " << o.zoo.batch << " (planned in " << std::fixed
      << std::setprecision(3) << seconds << " s)\n";
  out.unsetf(std::ios::fixed);
  write_summary(out, report);
  write_outputs(o, report, out);
  return 0;
}

}  // namespace memweave
