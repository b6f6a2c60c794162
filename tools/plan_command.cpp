// `memweave plan`: the same runtime as train on the null device (addresses, no memory, no
// kernels): per-step memory, peak, max(l_i), and whether each policy fits the budget.
#include "commands.hpp"
#include "largest_fit.hpp"
#include "memweave/core/config.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"
#include "network_run.hpp"
#include "report_writers.hpp"

#include <chrono>
#include <iomanip>

namespace memweave {

namespace {

// Whether `policy` runs one iteration of `net` within the budget on the null device.
bool fits_budget(const network& net, const network_run_options& o, const std::string& policy,
                 const device_options& dev) {
  try {
    return run_policy(net, o, policy, dev, 1, "", nullptr, nullptr).fits;
  } catch (const invalid_argument&) {
    return false;  // below what this policy can run at this size
  }
}

// --max-batch / --max-depth: the largest batch (or ResNet n3) that fits, per policy.
int plan_largest(const network_run_options& o, bool depth, std::ostream& out) {
  MEMWEAVE_EXPECTS(o.budget_bytes != 0, std::string(depth ? "--max-depth" : "--max-batch") +
                                            " needs --budget (the memory to fit in)");
  device_options dev;
  dev.kind = "null";
  dev.capacity_bytes = o.budget_bytes;
  const auto blocks = depth ? resnet_blocks(o.net) : std::array<std::int64_t, 4>{};
  out << "memweave plan " << o.net << ": the "
      << (depth ? "deepest ResNet (n3 growing, batch " + std::to_string(o.zoo.batch) + ")"
                : std::string("largest batch"))
      << " within " << format_bytes(o.budget_bytes) << "\n";
  for (const std::string& policy : o.policies) {
    const largest_fit r = search_largest(1, depth ? 100000 : 1 << 20, [&](std::int64_t v) {
      zoo_options z = o.zoo;
      std::string name = o.net;
      if (depth) {
        name = "resnet:" + std::to_string(blocks[0]) + "," + std::to_string(blocks[1]) + "," +
               std::to_string(v) + "," + std::to_string(blocks[3]);
      } else {
        z.batch = v;
      }
      return fits_budget(make_network(name, z), o, policy, dev);
    });
    out << "  " << policy << ": ";
    if (r.value == 0) {
      out << "nothing fits";
    } else if (depth) {
      out << "n3 = " << r.value << ", depth "
          << 3 * (blocks[0] + blocks[1] + r.value + blocks[3]) + 2;
    } else {
      out << "batch " << r.value;
    }
    out << "  (" << r.probes << " planner runs, " << std::fixed << std::setprecision(2) << r.seconds
        << " s)\n";
    out.unsetf(std::ios::fixed);
  }
  return 0;
}

}  // namespace

int plan_command(int argc, const char* const* argv, std::ostream& out) {
  cli_args args(argc, argv, 2, {"max-batch", "max-depth"});
  network_run_options o = read_network_run_options(args);
  // The planner's host memory is address space (committed only where jemalloc writes its
  // metadata), so model a large machine unless told otherwise.
  if (o.executor.host_pool_bytes == 0 && !option_raw("MEMWEAVE_HOST_POOL_BYTES")) {
    o.executor.host_pool_bytes = std::size_t{256} << 30;
  }
  const bool max_batch = args.flag("max-batch"), max_depth = args.flag("max-depth");
  args.reject_unused();
  MEMWEAVE_EXPECTS(!(max_batch && max_depth), "give --max-batch or --max-depth, not both");
  if (max_batch || max_depth) return plan_largest(o, max_depth, out);

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
