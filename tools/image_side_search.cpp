// The search of image_side_search.hpp. Single-threaded.
#include "image_side_search.hpp"

#include <iomanip>
#include <optional>

#include "largest_fit.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"
#include "policy_tiling.hpp"
#include "report_writers.hpp"
#include "stop_signal.hpp"

namespace memweave {

int plan_max_image_side(network_run_options o, std::ostream& out) {
  MEMWEAVE_EXPECTS(o.budget_bytes != 0, "--max-image-side needs --budget (the memory to fit in)");
  MEMWEAVE_EXPECTS(!is_onnx_net(o.net),
                   "--max-image-side varies a zoo network's input side; a "
                   "model file's (--net " +
                       o.net + ") is its own");
  MEMWEAVE_EXPECTS(o.zoo.image_side == 0,
                   "--max-image-side searches the side: give it without --image-side");
  MEMWEAVE_EXPECTS(o.timeline.empty(),
                   "--max-image-side writes no --trace-timeline; plan the side it finds to get "
                   "one");
  check_output_paths(o);
  if (!o.executor.heap.trace_path.empty()) {
    out << "MEMWEAVE_TRACE is not written by a search (--max-image-side); plan one side to "
           "trace it\n";
    o.executor.heap.trace_path.clear();
  }
  const device_options dev = planning_device(o, o.budget_bytes);
  // The network at this side, untiled (--tile cuts it for the budget where it runs).
  auto network_at = [&](std::int64_t side) {
    zoo_options z = o.zoo;
    z.image_side = side;
    return make_network(o.net, z);
  };
  std::optional<std::int64_t> first_side;  // the report's tiling: one side's, where all agree
  bool one_side = true;
  const std::int64_t step = k_image_side_step;
  const std::int64_t low = (zoo_min_side(o.net) + step - 1) / step;  // in steps
  out << "memweave plan " << o.net << ": the largest image side (a multiple of " << step
      << ") at batch " << o.zoo.batch << " within " << format_bytes(o.budget_bytes) << "\n";
  run_report report;
  report.command = "plan";
  report.network = o.net;
  report.batch = o.zoo.batch;
  report.budget_bytes = o.budget_bytes;
  report.iterations = 1;
  report.search = "max_image_side";
  report.device = make_device(dev)->name();  // named even where no side fits (no plan runs)
  bool any_fits = false;
  // Ctrl-C or SIGTERM ends the search at its running probe: the answers found are printed and
  // written, the stop said.
  const stop_signal_scope stop_scope;
  std::optional<stopped_by_signal> stopped;
  for (const std::string& policy : o.policies) {
    largest_fit r;
    try {
      r = search_largest(low, k_max_image_side / step, [&](std::int64_t v) {
        std::optional<network> net;
        try {
          net.emplace(network_at(v * step));
        } catch (const invalid_argument&) {
          // The smallest side's errors are the user's (a width, a class count); a larger side
          // that does not build has a tensor beyond any address space: it does not fit.
          if (v == low) throw;
          return false;
        }
        try {
          return plan_fits_budget_tiled(*net, o, policy, dev);
        } catch (const budget_too_small&) {
          return false;  // --tile: no segment's tile fits at this side
        }
      });
    } catch (const stopped_by_signal&) {
      stopped.emplace(search_stopped(out, policy));
      break;
    }
    out << "  " << policy << ": ";
    if (r.value == 0) {
      one_side = false;  // the report's tiling would not be this policy's
      out << "nothing fits, not even side " << low * step;
      policy_report none;
      none.policy = policy;
      none.fits = false;
      none.failure = "no image side from " + std::to_string(low * step) + " fits " +
                     format_bytes(o.budget_bytes);
      report.policies.push_back(std::move(none));
    } else {
      const std::int64_t side = r.value * step;
      network_run_options at_side = o;
      network net = network_at(side);
      if (o.tile) {
        at_side.untiled = std::make_shared<const network>(net);
        net = tile_if_asked(std::move(net), o, &at_side.tiling);
      }
      policy_report p = run_policy_retiling(net, at_side, policy, dev, 1, nullptr, nullptr,
                                            &report.device, nullptr, nullptr);
      // Tiled for a smaller target than the budget: those segments are the ones it ran.
      if (p.tiling_target_bytes != 0) at_side.tiling = p.tiling;
      out << "side " << side << " (" << side << "x" << side << "), peak "
          << format_bytes(p.peak_bytes);
      // Its tiled segments (the plan at this side ran with them), in the text and, where
      // every policy found this side, in the report's tiled_segments.
      const std::string tiles = describe_tiling(at_side);
      if (!tiles.empty()) out << "; " << tiles.substr(0, tiles.size() - 1);
      if (!first_side) {
        first_side = side;
        report.tiling = at_side.tiling;
      } else if (*first_side != side) {
        one_side = false;
      }
      report.policies.push_back(std::move(p));
    }
    out << "  (" << r.probes << " planner runs, " << std::fixed << std::setprecision(2) << r.seconds
        << " s)\n";
    out.unsetf(std::ios::fixed);
    any_fits = any_fits || r.value > 0;
  }
  if (!one_side) report.tiling.clear();  // each policy's segments are in its line above
  write_summary(out, report);
  write_run_outputs(o, report, out);
  if (stopped) throw *stopped;
  return any_fits ? 0 : 1;
}

}  // namespace memweave
