// The search of budget_search.hpp. Single-threaded.
#include "budget_search.hpp"

#include <chrono>
#include <iomanip>
#include <optional>

#include "memweave/core/config.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"
#include "policy_tiling.hpp"
#include "stop_signal.hpp"

namespace memweave {

int plan_min_budget(network_run_options o, std::ostream& out) {
  if (!o.executor.heap.trace_path.empty()) {
    // Every probe would replace the file: a search writes no trace.
    out << "MEMWEAVE_TRACE is not written by a search (--min-budget); plan one budget to "
           "trace it\n";
    o.executor.heap.trace_path.clear();
  }
  load_onnx_net(o);  // read once; each probe imports it (and cuts its tiles) for its budget
  const std::size_t block = heap_block_of(o);
  // The largest budget tried: --budget's own limit, or the device MEMWEAVE_DEVICE_BYTES
  // describes (a budget past it is refused, as train refuses it).
  const std::size_t capacity = planning_device(o, k_max_budget).capacity_bytes;
  const std::int64_t limit = static_cast<std::int64_t>(capacity / block);
  // A device below one block holds no budget at all (the first probe's budget was refused
  // as larger than the device, naming a --budget never given; session 44's hostile run).
  MEMWEAVE_EXPECTS(
      limit > 0,
      knob_value("MEMWEAVE_DEVICE_BYTES",
                 option_raw("MEMWEAVE_DEVICE_BYTES").value_or(std::to_string(capacity))) +
          ": the device (" + format_bytes(capacity) + ") is smaller than one heap block (" +
          format_bytes(block) + "): no budget runs on that device; raise it or unset it");
  // The user's network, built once before any search: its errors (a bad width, a model
  // file's) are theirs, not a budget's.
  {
    network_run_options whole = o;
    whole.tile = false;
    const network net = make_planning_network(whole, o.zoo.batch);
    out << "memweave plan " << o.net << ": the smallest budget each policy trains batch "
        << net.batch() << " in"
        << (o.split  ? " (--split)"
            : o.tile ? " (--tile)"
                     : "")
        << ", to one heap block (" << format_bytes(block) << ")\n";
  }
  // --tile: the network untiled, once, and the ladder of finer tilings every probe shares
  // (its rungs do not depend on the budget; a tiling plan takes seconds).
  std::optional<network> untiled;
  std::optional<tiling_ladder> ladder;
  if (o.tile) {
    network_run_options whole = o;
    whole.tile = false;
    untiled.emplace(make_planning_network(whole, o.zoo.batch));
    ladder.emplace(*untiled, o);
  }
  bool any_fits = false;
  // Ctrl-C or SIGTERM ends the search at its running probe, the answers found printed.
  const stop_signal_scope stop_scope;
  for (const std::string& policy : o.policies) {
    const auto t0 = std::chrono::steady_clock::now();
    int probes = 0;
    const auto fits = [&](std::int64_t blocks) {
      ++probes;
      network_run_options probe = o;
      probe.budget_bytes = static_cast<std::size_t>(blocks) * block;
      try {
        const device_options dev = planning_device(probe, probe.budget_bytes);
        if (!o.tile) {
          return plan_fits_budget(make_planning_network(probe, o.zoo.batch), probe, policy, dev);
        }
        // --tile: cut for this budget, and finer where those do not fit.
        return plan_fits_budget_tiled(*untiled, probe, policy, dev, &*ladder, &probes);
      } catch (const budget_too_small&) {
        return false;  // --tile: a layer's least tile does not fit this budget
      }
    };
    // Doubling from one block to the first budget that runs, then bisection between it and
    // the last that did not: `good` runs, `bad` (0: no budget) does not.
    std::int64_t bad = 0, good = 0;
    try {
      for (std::int64_t v = 1;; v = std::min(2 * v, limit)) {
        if (fits(v)) {
          good = v;
          break;
        }
        bad = v;
        if (v == limit) break;
      }
      while (good != 0 && good - bad > 1) {
        const std::int64_t mid = bad + (good - bad) / 2;
        (fits(mid) ? good : bad) = mid;
      }
    } catch (const stopped_by_signal&) {
      throw search_stopped(out, policy);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    out << "  " << policy << ": ";
    if (good == 0) {
      out << "does not run within " << format_bytes(static_cast<std::size_t>(limit) * block);
    } else {
      const std::size_t bytes = static_cast<std::size_t>(good) * block;
      out << format_bytes(bytes) << " (" << bytes << " bytes"
          << (good == 1 ? ", one heap block" : "; " + format_bytes(block) + " less does not run")
          << ")";
    }
    // Flushed: a long search of a later policy must not hold back the answers found.
    out << "  (" << probes << " planner runs, " << std::fixed << std::setprecision(2) << seconds
        << " s)" << std::endl;
    out.unsetf(std::ios::fixed);
    any_fits = any_fits || good != 0;
  }
  return any_fits ? 0 : 1;
}

}  // namespace memweave
