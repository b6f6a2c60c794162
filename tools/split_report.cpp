// `memweave plan --split`; see split_report.hpp.
#include "split_report.hpp"

#include <algorithm>
#include <iomanip>

#include "largest_fit.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"
#include "memweave/engine/layer_memory.hpp"
#include "memweave/engine/route.hpp"
#include "memweave/engine/split_plan.hpp"
#include "memweave/engine/zoo.hpp"

namespace memweave {

namespace {

std::size_t block_of(const network_run_options& o) {
  return o.executor.heap.block_bytes ? o.executor.heap.block_bytes : 1024;
}

// The plan of `net` at the budget, or nothing when its floor is above it.
struct split_probe {
  bool fits = false;
  std::size_t floor_bytes = 0;
  std::size_t device_bytes = 0;  ///< max(budget, max(l_i)): what `all` was planned on
};

// Fits when every step's micro-steps fit the budget and the memory schedule (`all`) runs the
// rest: it is planned on a device as large as the largest whole step (at least the budget),
// with the host pool less that excess, which is where the split steps' other slices wait.
split_probe probe(const network& net, const network_run_options& o) {
  const route r(net);
  const tensor_table table(net, r);
  const layer_memory memory(table);
  split_probe p;
  try {
    const split_plan plan =
        plan_splits(net, table, memory, o.executor.model, o.budget_bytes, block_of(o), "--budget");
    p.floor_bytes = plan.floor_bytes;
    p.device_bytes = std::max(o.budget_bytes, plan.max_layer_bytes);
  } catch (const budget_too_small&) {
    return p;
  }
  const std::size_t excess = p.device_bytes - o.budget_bytes;
  if (excess >= o.executor.host_pool_bytes) return p;
  network_run_options ro = o;
  ro.budget_bytes = p.device_bytes;
  ro.executor.host_pool_bytes = o.executor.host_pool_bytes - excess;
  device_options dev;
  dev.kind = "null";
  dev.capacity_bytes = p.device_bytes;
  dev.host_link_gbps = null_link_gbps(ro);
  try {
    p.fits = run_policy(net, ro, "all", dev, 1, nullptr, nullptr, nullptr).fits;
  } catch (const error& e) {
    if (!does_not_fit(e)) throw;
  }
  return p;
}

}  // namespace

int plan_split(const network_run_options& o, std::ostream& out) {
  MEMWEAVE_EXPECTS(o.budget_bytes != 0, "--split needs --budget (the memory to fit in)");
  const network net = make_network(o.net, o.zoo);
  const route r(net);
  const tensor_table table(net, r);
  const layer_memory memory(table);
  out << "memweave plan " << o.net << " --split: batch " << o.zoo.batch << " within "
      << format_bytes(o.budget_bytes)
      << " (TSPLIT, split along the batch, then CONV/FC output channels)\n";
  split_plan plan;
  try {
    plan =
        plan_splits(net, table, memory, o.executor.model, o.budget_bytes, block_of(o), "--budget");
  } catch (const budget_too_small& e) {
    out << "  does not fit: " << e.what() << "\n";
    return 1;
  }
  out << "  max(l_i) " << format_bytes(plan.max_layer_bytes) << "; floor with splits (largest "
      << "micro-step at one image, one channel per CONV/FC group) "
      << format_bytes(plan.floor_bytes) << " at step " << plan.floor_step + 1 << " ("
      << net[r.at(plan.floor_step).layer].name << ")\n";
  out << "  " << plan.split_count() << " of " << plan.steps.size() << " steps split";
  if (plan.channel_split_count() > 0) {
    out << ", " << plan.channel_split_count() << " along output channels";
  }
  out << "\n";
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
      << " s: " << std::setprecision(3) << (split + link) / whole << "x\n";
  out.unsetf(std::ios::fixed);
  return 0;
}

int plan_split_largest(const network_run_options& o, std::ostream& out) {
  MEMWEAVE_EXPECTS(o.budget_bytes != 0, "--max-batch needs --budget (the memory to fit in)");
  out << "memweave plan " << o.net << " --split: the largest batch within "
      << format_bytes(o.budget_bytes) << " (host pool " << format_bytes(o.executor.host_pool_bytes)
      << ")\n";
  const largest_fit r = search_largest(1, 1 << 20, [&](std::int64_t v) {
    zoo_options z = o.zoo;
    z.batch = v;
    try {
      return probe(make_network(o.net, z), o).fits;
    } catch (const invalid_argument&) {
      if (v == 1) throw;
      return false;
    }
  });
  out << "  split: ";
  if (r.value == 0) {
    out << "nothing fits\n";
    return 1;
  }
  zoo_options z = o.zoo;
  z.batch = r.value;
  const split_probe best = probe(make_network(o.net, z), o);
  out << "batch " << r.value << "  (floor " << format_bytes(best.floor_bytes) << ", max(l_i) "
      << format_bytes(best.device_bytes) << " planned with the excess in host memory; " << r.probes
      << " planner runs)\n";
  return 0;
}

}  // namespace memweave
