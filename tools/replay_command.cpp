// `memweave replay`: drives a device heap with an allocation trace (MEMWEAVE_TRACE's
// format) and prints what the heap did; --synthetic-layers writes a training-like trace
// first (never over an existing file).
#include <unistd.h>

#include <filesystem>
#include <iomanip>
#include <set>
#include <sstream>

#include "cli_args.hpp"
#include "commands.hpp"
#include "memweave/alloc/device_heap.hpp"
#include "memweave/alloc/trace.hpp"
#include "memweave/core/checked.hpp"
#include "memweave/core/config.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/log.hpp"
#include "memweave/core/units.hpp"

namespace memweave {

namespace {

constexpr std::int64_t k_max_synthetic_layers = 100000;
constexpr std::int64_t k_max_synthetic_batch = 4096;

// The heap's pool: --pool, or 256 GiB.
std::size_t pool_bytes_of(const std::optional<std::size_t>& pool) {
  return pool.value_or(std::size_t{256} << 30);
}

// The heap's variables a replay does not read (the trace's header sets its block size, --pool
// and --fit the rest), and MEMWEAVE_TRACE (a replay records none): said, as train says what
// --budget overrides, rather than ignored.
void warn_unused_heap_variables() {
  for (const char* v : {"MEMWEAVE_BLOCK_BYTES", "MEMWEAVE_POOL_BYTES", "MEMWEAVE_POOL_FRACTION",
                        "MEMWEAVE_POOL_GROW", "MEMWEAVE_FIT", "MEMWEAVE_TRACE"}) {
    const auto raw = option_raw(v);
    if (raw && !raw->empty()) {
      log(log_level::warn, std::string(v) + "=" + *raw +
                               " is not used by replay: the trace's header sets the block "
                               "size, --pool the arena and --fit the fits, and a replay "
                               "records no trace");
    }
  }
}

}  // namespace

int replay_command(int argc, const char* const* argv, std::ostream& out) {
  cli_args args(argc, argv, 2, {});
  std::string path = args.get_path("trace");
  const auto synthetic_layers = args.get_int("synthetic-layers", 1, k_max_synthetic_layers);
  const auto batch = args.get_int("batch", 1, k_max_synthetic_batch);
  // Up to the replay device's capacity (dopt below): a larger arena cannot be had.
  const auto pool = args.get_bytes("pool", 1 << 20, std::size_t{1} << 40);
  const std::string fit = args.get_or("fit", "best,first");
  args.reject_unused();
  warn_unused_heap_variables();
  MEMWEAVE_EXPECTS(!path.empty() || synthetic_layers,
                   "give --trace PATH (a MEMWEAVE_TRACE file) or --synthetic-layers N "
                   "(with --trace PATH to keep it)");
  MEMWEAVE_EXPECTS(!batch || synthetic_layers,
                   "--batch sizes a synthetic trace: give it with --synthetic-layers, or "
                   "leave it out when replaying --trace");
  const std::vector<std::string> fits = split_list(fit, "--fit");
  MEMWEAVE_EXPECTS(!fits.empty(), "--fit is empty: give best, first or best,first");
  std::set<std::string> seen;
  for (const std::string& f : fits) {
    MEMWEAVE_EXPECTS(f == "best" || f == "first", "--fit '" + f + "': expected best or first");
    MEMWEAVE_EXPECTS(seen.insert(f).second, "--fit lists '" + f + "' twice; give it once");
  }
  // Without --trace the synthetic trace is a temporary file, removed after the replay: it was
  // ./memweave-synthetic.trace, left behind, and the next run refused to overwrite it
  // (session 43's hostile run).
  struct removed_at_exit {
    std::string path;
    ~removed_at_exit() {
      std::error_code ec;
      if (!path.empty()) std::filesystem::remove(path, ec);
    }
  } temporary;
  if (synthetic_layers) {
    synthetic_trace_options so;
    so.layers = static_cast<std::size_t>(*synthetic_layers);
    so.batch = static_cast<std::size_t>(batch.value_or(32));
    const bool kept = !path.empty();
    if (!kept) {
      std::error_code tmp_ec;
      const std::filesystem::path dir = std::filesystem::temp_directory_path(tmp_ec);
      path = ((tmp_ec ? std::filesystem::path(".") : dir) /
              ("memweave-synthetic-" + std::to_string(::getpid()) + ".trace"))
                 .string();
      temporary.path = path;
    }
    std::error_code ec;
    MEMWEAVE_EXPECTS(!std::filesystem::exists(path, ec),
                     "--synthetic-layers would overwrite '" + path +
                         "', which exists; remove it, or give another --trace PATH (to replay "
                         "it, leave out --synthetic-layers)");
    write_synthetic_trace(path, so);
    out << "wrote a synthetic trace of " << so.layers << " layers, batch " << so.batch << " to "
        << (kept ? path : "a temporary file (--trace PATH keeps it)") << "\n";
  }
  // The heap replays in the blocks the trace was recorded with (its header's), as the run
  // that wrote it placed them.
  std::size_t block_bytes = 1024;
  const auto events = read_trace(path, &block_bytes);
  device_options dopt;
  dopt.kind = "null";  // replay needs addresses, not memory
  dopt.capacity_bytes = std::size_t{1} << 40;
  // The table is printed once every fit replayed: a trace the replay refuses (a double free
  // its parser cannot see) leaves no half table before the error.
  std::ostringstream table;
  table << "replaying " << events.size() << " events from " << path << "\n";
  table << std::left << std::setw(7) << "fit" << std::right << std::setw(12) << "ns/op"
        << std::setw(14) << "peak in use" << std::setw(14) << "footprint" << std::setw(10)
        << "frag@peak" << std::setw(10) << "failures"
        << "\n";
  replay_result last;
  bool any_served = false;      // some fit served every allocation
  std::ostringstream failures;  // per fit that failed, its first failure
  for (const std::string& f : fits) {
    auto dev = make_device(dopt);
    heap_options h;
    h.pool_bytes = pool_bytes_of(pool);
    h.pool_knob = "--pool";
    h.block_bytes = block_bytes;
    h.fit = f == "best" ? fit_policy::best : fit_policy::first;
    device_heap heap(*dev, h);
    try {
      last = replay_events(events, heap);
    } catch (const invalid_argument& e) {
      throw invalid_argument("trace '" + path + "': " + e.what());  // name the file
    }
    // Where allocations failed, the heap at the trace's peak is not the trace's: the
    // footprint and fragmentation there describe nothing (the footprint read below the peak).
    const bool served = last.failures == 0;
    std::ostringstream frag;
    frag << std::fixed << std::setprecision(2) << 100.0 * last.fragmentation_at_peak << "%";
    table << std::left << std::setw(7) << f << std::right << std::setw(12) << std::fixed
          << std::setprecision(1) << last.ns_per_op << std::setw(14)
          << format_bytes(last.peak_bytes_in_use) << std::setw(14)
          << (served ? format_bytes(last.footprint_at_peak) : "-") << std::setw(10)
          << (served ? frag.str() : "-") << std::setw(10) << last.failures << "\n";
    if (!served) {
      failures << f << ": the first allocation not served is line " << last.first_failure_line
               << ", " << last.first_failure_bytes << " bytes ("
               << format_bytes(last.first_failure_bytes) << "), with "
               << format_bytes(last.first_failure_free_bytes) << " free and the largest free run "
               << format_bytes(last.first_failure_largest_free_run) << "\n";
    }
    any_served = any_served || last.failures == 0;
  }
  out << table.str() << failures.str();
  // What the trace itself holds that a replay cannot reproduce, the same for every fit.
  if (last.unmatched_frees_in_trace > 0) {
    out << "note: " << last.unmatched_frees_in_trace
        << " free(s) of offsets the trace never allocated were skipped (first at line "
        << last.first_unmatched_free_line << "): the trace started after they were allocated\n";
  }
  if (last.left_live > 0) {
    out << "note: " << last.left_live
        << " allocation(s) were never freed in the trace (an interrupted run?); the replay "
           "freed them at the end\n";
  }
  if (!any_served) {
    out << "no fit served every allocation of the trace in " << format_bytes(pool_bytes_of(pool))
        << " (--pool): the trace does not fit\n";
  }
  return any_served ? 0 : 1;  // as plan: 1 when it does not fit
}

}  // namespace memweave
