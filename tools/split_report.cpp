// `memweave plan --split`; see split_report.hpp.
#include "split_report.hpp"

#include <algorithm>
#include <iomanip>

#include "largest_fit.hpp"
#include "memweave/core/config.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"
#include "memweave/engine/layer_memory.hpp"
#include "memweave/engine/route.hpp"
#include "memweave/engine/split_plan.hpp"
#include "memweave/engine/zoo.hpp"
#include "stop_signal.hpp"

namespace memweave {

namespace {

// Whether the executor trains `net` within the budget with --split under `all` (its split
// steps staged, the rest under the memory policy), on the null device.
struct split_probe {
  bool fits = false;
  std::size_t floor_bytes = 0;  ///< the largest micro-step at one image per micro-batch
};

split_probe probe(const network& net, const network_run_options& o) {
  const route r(net);
  const tensor_table table(net, r);
  const layer_memory memory(table);
  split_probe p;
  try {
    p.floor_bytes =
        plan_splits(net, table, memory, o.executor.model, o.budget_bytes, heap_block_of(o),
                    "--budget", true, false, promised_workspace_bytes(table, o.executor.conv_ws))
            .floor_bytes;
  } catch (const budget_too_small&) {
    return p;
  }
  network_run_options ro = o;
  ro.split = true;
  const device_options dev = planning_device(ro, o.budget_bytes);
  p.fits = plan_fits_budget(net, ro, "all", dev);
  return p;
}

}  // namespace

int plan_split(const network& net, const network_run_options& o, std::ostream& out) {
  MEMWEAVE_EXPECTS(o.budget_bytes != 0, "--split needs --budget (the memory to fit in)");
  const route r(net);
  const tensor_table table(net, r);
  const layer_memory memory(table);
  out << "memweave plan " << o.net << " --split: batch " << o.zoo.batch << " within "
      << format_bytes(o.budget_bytes) << " (TSPLIT: the steps over it run in micro-batches)\n";
  // The floors hold the workspace a CONV micro-step takes whatever is free (fixed, max), not
  // the one dynamic selection fits to what is left (it falls back to direct where none fits).
  const std::vector<std::size_t> workspace = promised_workspace_bytes(table, o.executor.conv_ws);
  if (std::any_of(workspace.begin(), workspace.end(), [](std::size_t b) { return b != 0; })) {
    out << "  the floors and micro-steps below hold each CONV step's workspace under "
        << knob_value(o.executor.conv_ws.source, o.executor.conv_ws.mode_name())
        << " (the micro-step takes it whole; dynamic or fixed:direct run without one)\n";
  }
  // The floor along the batch alone, and with CONV/FC output-channel groups (what runs).
  const auto describe_batch_floor = [&] {
    try {
      const split_plan batch =
          plan_splits(net, table, memory, o.executor.model, std::size_t{1} << 62, heap_block_of(o),
                      "--budget", false, false, workspace);
      out << "  floor with micro-batches alone (the largest micro-step at one image) "
          << format_bytes(batch.floor_bytes) << " at step " << batch.floor_step + 1 << " ("
          << net[r.at(batch.floor_step).layer].name << ")\n";
    } catch (const budget_too_small&) {
      // Cannot happen at an unbounded budget; nothing to add.
    }
  };
  split_plan plan;
  try {
    plan = plan_splits(net, table, memory, o.executor.model, o.budget_bytes, heap_block_of(o),
                       "--budget", true, false, workspace);
  } catch (const budget_too_small& e) {
    out << "  does not fit: " << e.what() << "\n";
    describe_batch_floor();
    return 1;
  }
  out << "  max(l_i) " << format_bytes(plan.max_layer_bytes) << "; floor (the largest "
      << "micro-step at one image, one output channel per CONV/FC group) "
      << format_bytes(plan.floor_bytes) << " at step " << plan.floor_step + 1 << " ("
      << net[r.at(plan.floor_step).layer].name << ")\n";
  describe_batch_floor();
  out << "  " << plan.split_count() << " of " << plan.steps.size() << " steps split, "
      << plan.channel_split_count() << " in output-channel groups\n";
  for (const split_step& s : plan.steps) {
    if (s.parts == 1 && s.channel_parts == 1) continue;
    out << "    step " << std::setw(4) << s.step + 1 << " " << std::left << std::setw(28)
        << (net[s.layer].name + (s.forward ? " F" : " B")) << std::right << std::setw(6) << s.parts
        << " parts";
    if (s.channel_parts > 1) out << " x " << s.channel_parts << " channel groups";
    out << "  whole " << std::setw(10) << format_bytes(s.fixed_bytes + s.batch_bytes)
        << "  micro-step " << format_bytes(s.micro_bytes) << "\n";
  }
  const double whole = plan.whole_seconds(), split = plan.split_seconds(),
               link = plan.link_seconds();
  out << std::fixed << std::setprecision(4) << "  model time: unsplit " << whole << " s, split "
      << split << " s (kernels " << std::setprecision(3) << split / whole
      << "x), + micro-tensor link " << std::setprecision(4) << link
      << " s: " << std::setprecision(3) << (split + link) / whole
      << "x (the split planner's estimate; the runs below charge every staging copy)"
      << std::endl;  // before the runs, whose weighing can take minutes
  out.unsetf(std::ios::fixed);
  return 0;
}

int plan_split_largest(network_run_options o, std::ostream& out) {
  MEMWEAVE_EXPECTS(o.budget_bytes != 0, "--max-batch needs --budget (the memory to fit in)");
  if (!o.executor.heap.trace_path.empty()) {
    // Each probe would replace the file, leaving one nobody can tell apart: as without
    // --split, a search writes no trace.
    out << "MEMWEAVE_TRACE is not written by a search (--split --max-batch); plan one batch "
           "to trace it\n";
    o.executor.heap.trace_path.clear();
  }
  // The search runs the fewest split plan (probe): `all`'s weighing of split plans at a batch
  // may fit larger ones, and fitting is not monotonic where host memory runs short.
  out << "memweave plan " << o.net << " --split: the largest batch the search finds `all` "
      << "trains within " << format_bytes(o.budget_bytes)
      << ", the steps over it in micro-batches, the fewest each (host pool "
      << format_bytes(o.executor.host_pool_bytes != 0
                          ? o.executor.host_pool_bytes
                          // The variable's, which the executor takes (it printed 0 B).
                          : option_bytes("MEMWEAVE_HOST_POOL_BYTES").value_or(0))
      << ")\n";
  constexpr std::int64_t limit = 1 << 20;
  // Ctrl-C or SIGTERM ends the search at its running probe, and says so.
  const stop_signal_scope stop_scope;
  largest_fit r;
  try {
    r = search_largest(1, limit, [&](std::int64_t v) {
      zoo_options z = o.zoo;
      z.batch = v;
      try {
        return probe(make_network(o.net, z), o).fits;
      } catch (const invalid_argument&) {
        if (v == 1) throw;
        return false;
      }
    });
  } catch (const stopped_by_signal&) {
    throw search_stopped(out, "split");
  }
  out << "  split: ";
  if (r.value == 0) {
    out << "nothing fits\n";
    return 1;
  }
  zoo_options z = o.zoo;
  z.batch = r.value;
  const split_probe best = probe(make_network(o.net, z), o);
  out << "batch " << r.value;
  if (r.value == limit) out << " (the search's limit: larger ones were not tried)";
  out << "  (floor " << format_bytes(best.floor_bytes) << "; " << r.probes
      << " runs of the executor; all's weighing of split plans, `plan --split --batch N`, may "
         "fit a larger one)\n";
  return 0;
}

}  // namespace memweave
