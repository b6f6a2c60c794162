// `memweave replay`: drives a device heap with an allocation trace (MEMWEAVE_TRACE's
// format) and prints what the heap did; --synthetic writes a training-like trace first.
#include <iomanip>

#include "cli_args.hpp"
#include "commands.hpp"
#include "memweave/alloc/device_heap.hpp"
#include "memweave/alloc/trace.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"

namespace memweave {

int replay_command(int argc, const char* const* argv, std::ostream& out) {
  cli_args args(argc, argv, 2, {});
  std::string path = args.get_or("trace", "");
  const auto synthetic_layers = args.get_int("synthetic-layers");
  const auto batch = args.get_int("batch");
  const auto pool = args.get_bytes("pool");
  const std::string fit = args.get_or("fit", "best,first");
  args.reject_unused();
  MEMWEAVE_EXPECTS(!path.empty() || synthetic_layers,
                   "give --trace PATH (a MEMWEAVE_TRACE file) or --synthetic-layers N "
                   "(with --trace PATH to keep it)");
  if (synthetic_layers) {
    synthetic_trace_options so;
    so.layers = static_cast<std::size_t>(*synthetic_layers);
    so.batch = static_cast<std::size_t>(batch.value_or(32));
    if (path.empty()) path = "memweave-synthetic.trace";
    write_synthetic_trace(path, so);
    out << "wrote a synthetic trace of " << so.layers << " layers, batch " << so.batch << " to "
        << path << "\n";
  }
  const auto events = read_trace(path);
  device_options dopt;
  dopt.kind = "null";  // replay needs addresses, not memory
  dopt.capacity_bytes = std::size_t{1} << 40;
  out << "replaying " << events.size() << " events from " << path << "\n";
  out << std::left << std::setw(7) << "fit" << std::right << std::setw(12) << "ns/op"
      << std::setw(14) << "peak in use" << std::setw(14) << "footprint" << std::setw(10)
      << "frag@peak" << std::setw(10) << "failures"
      << "\n";
  for (const std::string& f : split_list(fit)) {
    MEMWEAVE_EXPECTS(f == "best" || f == "first", "--fit '" + f + "': expected best or first");
    auto dev = make_device(dopt);
    heap_options h;
    h.pool_bytes = pool.value_or(std::size_t{256} << 30);
    h.fit = f == "best" ? fit_policy::best : fit_policy::first;
    device_heap heap(*dev, h);
    const replay_result r = replay_events(events, heap);
    out << std::left << std::setw(7) << f << std::right << std::setw(12) << std::fixed
        << std::setprecision(1) << r.ns_per_op << std::setw(14) << format_bytes(r.peak_bytes_in_use)
        << std::setw(14) << format_bytes(r.footprint_at_peak) << std::setw(9)
        << std::setprecision(2) << 100.0 * r.fragmentation_at_peak << "%" << std::setw(10)
        << r.failures << "\n";
    out.unsetf(std::ios::fixed);
  }
  return 0;
}

}  // namespace memweave
