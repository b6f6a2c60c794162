// `memweave plan`: the same runtime as train on the null device (addresses, no memory, no
// kernels): per-step memory, peak, max(l_i), and whether each policy fits the budget.
#include "budget_search.hpp"
#include "commands.hpp"
#include "image_side_search.hpp"
#include "largest_fit.hpp"
#include "memweave/comm/communicator.hpp"
#include "memweave/core/config.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"
#include "memweave/engine/data_parallel_model.hpp"
#include "memweave/engine/route.hpp"
#include "memweave/engine/tensor_table.hpp"
#include "network_run.hpp"
#include "policy_tiling.hpp"
#include "report_writers.hpp"
#include "split_report.hpp"
#include "stop_signal.hpp"

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <optional>
#include <sstream>

namespace memweave {

namespace {

// Without a budget the planning device is large enough for every policy to fit, so that
// its real peak is measured: 1 TiB of address space while the baseline (every tensor at
// once) takes at most half of it, else 32 TiB, a quarter of x86-64's 128 TiB of user
// address space (VGG16's baseline at 32768x32768 takes 6.7 TiB), leaving room for the host
// pool and the rest of the process. (The smaller reservation where it suffices keeps plans
// runnable where address space is short: under TSan, or a ulimit -v.)
std::size_t unbudgeted_plan_bytes(const network& net) {
  const route r(net);
  const tensor_table table(net, r);
  const std::size_t small = std::size_t{1} << 40;
  return table.persistent_bytes() + table.transient_bytes() <= small / 2 ? small
                                                                         : std::size_t{32} << 40;
}

// --ranks N: data parallelism on N devices (--batch the global batch, --budget each
// device's), the network between them at --net-gbps.
struct cluster {
  int ranks = 1;
  double net_gbps = 100;  // Gb/s
  std::size_t bucket_bytes = 0;
};

// The modelled communication of `net` (a device's share) added to `p`, the policy's planned
// iteration; returns the iteration time with the exposed part of the allreduce.
double add_communication(const network& net, const network_run_options& o, const cluster& c,
                         policy_report& p) {
  const data_parallel_estimate e =
      estimate_data_parallel(net, o.executor.model, c.ranks, c.net_gbps * 1e9 / 8, c.bucket_bytes);
  p.allreduce_bytes = e.gradient_bytes;
  p.allreduce_seconds = e.allreduce_s;
  p.allreduce_wait_seconds = e.exposed_s;
  return p.seconds_per_iteration + e.exposed_s;
}

std::string describe_communication(const policy_report& p, const cluster& c, double iteration_s) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << "iteration " << 1e3 * iteration_s << " ms ("
    << 1e3 * p.seconds_per_iteration << " ms planned on one device + "
    << 1e3 * p.allreduce_wait_seconds << " ms of the ring allreduce of "
    << format_bytes(p.allreduce_bytes) << " not hidden behind backward; the allreduce takes "
    << 1e3 * p.allreduce_seconds << " ms at " << format_number(c.net_gbps) << " Gb/s over "
    << c.ranks << " devices)";
  return s.str();
}

// --max-batch / --max-depth: the largest batch (or ResNet n3) that fits, per policy.
int plan_largest(network_run_options o, bool depth, const cluster& c, std::ostream& out) {
  MEMWEAVE_EXPECTS(o.budget_bytes != 0, std::string(depth ? "--max-depth" : "--max-batch") +
                                            " needs --budget (the memory to fit in)");
  const device_options dev = planning_device(o, o.budget_bytes);
  const auto blocks = depth ? resnet_blocks(o.net) : std::array<std::int64_t, 4>{};
  load_onnx_net(o);  // read once, imported at each probe's batch
  if (!o.executor.heap.trace_path.empty()) {
    // Hundreds of probes would each replace the file: a search writes no trace.
    out << "MEMWEAVE_TRACE is not written by a search (--max-batch/--max-depth); plan one "
           "batch or depth to trace it\n";
    o.executor.heap.trace_path.clear();
  }
  out << "memweave plan " << o.net << ": the "
      << (depth ? "deepest ResNet (n3 growing, batch " + std::to_string(o.zoo.batch) + ")"
                : std::string("largest batch"))
      << " within " << format_bytes(o.budget_bytes);
  if (c.ranks > 1) out << " per device, on " << c.ranks << " devices";
  out << "\n";
  bool any_fits = false;
  // Ctrl-C or SIGTERM ends the search at its running probe: the answers found stay printed,
  // and the stop is said (it ended the process with nothing said; session 47's hostile run).
  const stop_signal_scope stop_scope;
  for (const std::string& policy : o.policies) {
    // The limits: 2^20 images; n3 = 10000 (a ResNet of 30,000 layers, built in a second and
    // a quarter of a GiB: at 100000 a probe took 7.6 s and 2.5 GB, and a large budget made
    // the search run for minutes and hold gigabytes).
    // On N devices the global batch stays within --batch's range (it was reported past it:
    // 18224 per device on 2^20 devices, a global batch of 19109249024).
    const std::int64_t batch_limit = std::min(std::int64_t{1} << 20, k_max_batch / c.ranks);
    const std::int64_t limit = depth ? 10000 : batch_limit;
    std::string smallest_refused;  // why the smallest value does not fit, where a layer says
    largest_fit r;
    try {
      r = search_largest(1, limit, [&](std::int64_t v) {
        network_run_options probe = o;
        std::int64_t batch = o.zoo.batch;
        if (depth) {
          probe.net = "resnet:" + std::to_string(blocks[0]) + "," + std::to_string(blocks[1]) +
                      "," + std::to_string(v) + "," + std::to_string(blocks[3]);
        } else {
          batch = v;
        }
        try {
          // --tile: cut for the budget below (plan_fits_budget_tiled), not here.
          network_run_options whole = probe;
          whole.tile = false;
          std::optional<network> net;
          try {
            net.emplace(make_planning_network(whole, batch));
          } catch (const invalid_argument&) {
            // The smallest value builds the user's own network: its errors are theirs. A larger
            // one that does not build has a tensor beyond any address space: it does not fit.
            if (v == 1) throw;
            return false;
          }
          return plan_fits_budget_tiled(*net, o, policy, dev);
        } catch (const budget_too_small& e) {
          // A step the budget cannot hold (under --tile, a layer that cannot run tile by tile):
          // this value does not fit, as a plan that runs out of budget does not.
          if (v == 1) smallest_refused = e.what();
          return false;
        }
      });
    } catch (const stopped_by_signal&) {
      throw search_stopped(out, policy);
    }
    out << "  " << policy << ": ";
    if (r.value == 0) {
      out << "nothing fits";
      if (!smallest_refused.empty()) out << " (" << smallest_refused << ")";
    } else if (depth) {
      out << "n3 = " << r.value << ", depth "
          << 3 * (blocks[0] + blocks[1] + r.value + blocks[3]) + 2;
    } else if (c.ranks > 1) {
      out << "batch " << r.value << " per device, global batch " << r.value * c.ranks;
    } else {
      out << "batch " << r.value;
    }
    if (r.value == limit && !depth && limit < (std::int64_t{1} << 20)) {
      out << " (the search's limit: a global batch above " << k_max_batch
          << ", --batch's largest, was not tried)";
    } else if (r.value == limit) {
      out << " (the search's limit: larger ones were not tried)";
    }
    // Flushed: a long search of a later policy (all at a large depth) must not hold back
    // the answers found.
    out << "  (" << r.probes << " planner runs, " << std::fixed << std::setprecision(2) << r.seconds
        << " s)" << std::endl;
    out.unsetf(std::ios::fixed);
    if (c.ranks > 1 && !depth && r.value > 0) {
      zoo_options z = o.zoo;
      z.batch = r.value;
      const network net = make_network(o.net, z);
      policy_report p = run_policy(net, o, policy, dev, 1, nullptr, nullptr, nullptr);
      const double iteration = add_communication(net, o, c, p);
      out << "    " << describe_communication(p, c, iteration) << "\n";
    }
    any_fits = any_fits || r.value > 0;
  }
  return any_fits ? 0 : 1;
}

}  // namespace

int plan_command(int argc, const char* const* argv, std::ostream& out) {
  // Under mpirun every rank planned the whole run and wrote the same outputs (session 42's
  // mpirun run): data parallelism is planned in one process.
  MEMWEAVE_EXPECTS(!launched_with_several_ranks(),
                   "memweave plan was started by an MPI launcher with several ranks: only "
                   "train runs data-parallel; plan it in one process with --ranks N");
  cli_args args(argc, argv, 2,
                {"max-batch", "max-depth", "max-image-side", "min-budget", "split", "tile"});
  network_run_options o = read_network_run_options(args);
  // The planner's host memory is address space (committed only where jemalloc writes its
  // metadata), so model a large machine unless told otherwise.
  if (o.executor.host_pool_bytes == 0 && !option_raw("MEMWEAVE_HOST_POOL_BYTES")) {
    o.executor.host_pool_bytes = std::size_t{256} << 30;
    o.executor.host_pool_knob = "plan's 256 GiB without --host-pool";
  }
  // The null device is the model: a link set for it is the one the schedule plans with (it
  // charged copies at MEMWEAVE_HOST_LINK_GBPS and planned them at the preset's 16 GB/s, and
  // the report named both).
  if (const double link = *option_double("MEMWEAVE_HOST_LINK_GBPS"); link > 0) {
    o.executor.model.link_bytes_per_s = link * 1e9;
    o.model_from_device = false;  // the null device has no figures of its own to give
  }
  const bool max_batch = args.flag("max-batch"), max_depth = args.flag("max-depth");
  cluster c;
  c.ranks = static_cast<int>(args.get_int("ranks", 1, 1 << 20).value_or(1));
  const auto gbps = args.get_double("net-gbps", 1e-3, 1e6);
  c.net_gbps = gbps ? *gbps : *option_double("MEMWEAVE_NET_GBPS");
  c.bucket_bytes = *option_bytes("MEMWEAVE_BUCKET_BYTES");
  o.executor.ranks = c.ranks;
  o.executor.bucket_bytes = c.bucket_bytes;
  const bool split = args.flag("split");
  o.tile = args.flag("tile");
  const bool max_side = args.flag("max-image-side");
  const bool min_budget = args.flag("min-budget");
  args.reject_unused();
  // Accepted and ignored, they would read as if the plan depended on them.
  MEMWEAVE_EXPECTS(!o.lr_given && !o.seed_given,
                   std::string(o.lr_given ? "--lr" : "--seed") +
                       ": plan computes no values (the null device touches no memory), so "
                       "its plan does not depend on it; leave it out");
  // Before the other searches' own checks: a user who gave two searches is told that first.
  MEMWEAVE_EXPECTS(!min_budget || (!max_side && !max_batch && !max_depth && c.ranks == 1),
                   "--min-budget searches the budget of one device's plan at --batch: give it "
                   "without --max-image-side, --max-batch, --max-depth or --ranks");
  if (max_batch && args.given().count("batch") != 0) {
    throw invalid_argument("--max-batch searches the batch: give it without --batch (" +
                           knob_value("--batch", args.given().at("batch")) + ")");
  }
  MEMWEAVE_EXPECTS(!(split && o.tile), "--split and --tile are planned apart: give one of them");
  if (min_budget) {  // budget_search.hpp
    if (args.given().count("budget") != 0) {
      throw invalid_argument("--min-budget searches the budget: give it without --budget (" +
                             knob_value("--budget", args.given().at("budget")) + ")");
    }
    MEMWEAVE_EXPECTS(!gbps,
                     "--net-gbps is the network between the devices of --ranks, which "
                     "--min-budget does not plan: leave it out");
    MEMWEAVE_EXPECTS(o.json.empty() && o.csv.empty() && o.svg.empty() && o.timeline.empty(),
                     "--min-budget prints its answer and writes no --json, --csv, --svg or "
                     "--trace-timeline; plan the budget it finds to get those");
    o.split = split;
    return plan_min_budget(o, out);
  }
  if (max_side) {  // image_side_search.hpp
    MEMWEAVE_EXPECTS(!split && !max_batch && !max_depth && c.ranks == 1,
                     "--max-image-side searches the side of one device's plan at --batch: give "
                     "it without --split, --max-batch, --max-depth or --ranks");
    return plan_max_image_side(o, out);
  }
  MEMWEAVE_EXPECTS(!gbps || c.ranks > 1,
                   "--net-gbps is the network between the devices of --ranks: give --ranks N "
                   "(more than 1) with it");
  MEMWEAVE_EXPECTS(!(o.tile && c.ranks > 1), "--tile plans one device: give it without --ranks");
  if (split) {  // TSPLIT (split_report.hpp); without --max-batch, the plan then the runs
    MEMWEAVE_EXPECTS(!max_depth, "--split searches --max-batch, not --max-depth");
    MEMWEAVE_EXPECTS(c.ranks == 1, "--split plans one device: give it without --ranks");
    if (max_batch) {
      // One answer, for `all` (it alone stages split steps and weighs split plans).
      MEMWEAVE_EXPECTS(o.json.empty() && o.csv.empty() && o.svg.empty() && o.timeline.empty(),
                       "--split --max-batch prints its answer and writes no --json, --csv, --svg "
                       "or --trace-timeline; plan the batch it finds (--split --batch N) to get "
                       "those");
      // A list given (--policy, or MEMWEAVE_POLICY set) that is not `all` is refused.
      const bool given = args.given().count("policy") != 0;
      MEMWEAVE_EXPECTS(o.policies == std::vector<std::string>{"all"} ||
                           (!given && !option_raw("MEMWEAVE_POLICY")),
                       "--split --max-batch searches the largest batch `all` trains: give "
                       "--policy all or leave it out (" +
                           (given ? knob_value("--policy", args.given().at("policy"))
                                  : knob_value("MEMWEAVE_POLICY", *option_raw("MEMWEAVE_POLICY"))) +
                           ")");
      MEMWEAVE_EXPECTS(!is_onnx_net(o.net),
                       "--split --max-batch searches the zoo's networks; a "
                       "model file (--net " +
                           o.net + ") is searched without --split");
      return plan_split_largest(o, out);
    }
    o.split = true;
  }
  MEMWEAVE_EXPECTS(!(max_batch && max_depth), "give --max-batch or --max-depth, not both");
  if (max_batch || max_depth) {
    MEMWEAVE_EXPECTS(o.json.empty() && o.csv.empty() && o.svg.empty() && o.timeline.empty(),
                     std::string(max_batch ? "--max-batch" : "--max-depth") +
                         " prints its answer and writes no --json, --csv, --svg or "
                         "--trace-timeline; plan the "
                         "batch or depth it finds to get those");
    return plan_largest(o, max_depth, c, out);
  }
  // --batch is the global batch: a device plans the largest share (the tightest rank).
  // A model file's own batch, when --batch does not set it, is read first (one device: with
  // the model below).
  std::int64_t global = o.zoo.batch;
  const bool models_batch = global == 0;
  if (global == 0 && c.ranks > 1) global = make_run_network(o, false).batch();
  MEMWEAVE_EXPECTS(global == 0 || global >= c.ranks,
                   (models_batch ? "the model's batch " + std::to_string(global) + " (--net " +
                                       o.net + "; no --batch given)"
                                 : "--batch " + std::to_string(global)) +
                       " is smaller than --ranks " + std::to_string(c.ranks) +
                       ": each device needs at least one image");
  o.zoo.batch = (global + c.ranks - 1) / c.ranks;

  warn_unused_variables(o);
  check_output_paths(o);
  const auto t0 = std::chrono::steady_clock::now();
  const std::optional<network> made = make_run_network_or_unfit(o, false, nullptr, "plan", out);
  if (!made) return 1;
  const network& net = *made;
  // Below the split floor the runs still go on, each a "does not fit" row, so that the
  // report and its files are written as without --split.
  const bool split_fits = !o.split || plan_split(net, o, out) == 0;
  if (global == 0) global = net.batch();  // one device, the model file's batch
  const device_options dev =
      planning_device(o, o.budget_bytes ? o.budget_bytes : unbudgeted_plan_bytes(net));
  run_report report;
  report.command = "plan";
  report.network = o.net;
  report.batch = global;
  report.budget_bytes = o.budget_bytes;
  report.iterations = 1;
  report.ranks = c.ranks;
  report.tiling = o.tiling;
  std::ostringstream runs;  // printed after the header, which needs the planning time
  std::exception_ptr error;
  int code = 1;
  try {
    if (c.ranks > 1) {
      // Each row gets the communication before the summary is written.
      o.amend = [&](policy_report& p) {
        if (!p.fits) return;
        const double iteration = add_communication(net, o, c, p);
        runs << "  " << p.policy << ": " << c.ranks << " devices, ";
        if (global % c.ranks == 0) {
          runs << o.zoo.batch << " images each: ";
        } else {  // the global batch split as evenly as it goes; the plan is the largest share
          runs << global << " images, " << global / c.ranks << " or " << o.zoo.batch
               << " a device (planned: " << o.zoo.batch << "): ";
        }
        runs << describe_communication(p, c, iteration) << "\n";
        p.seconds_per_iteration = iteration;
      };
    }
    code = run_policies(net, o, dev, 1, nullptr, report, runs, nullptr);
  } catch (...) {
    error = std::current_exception();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out << "memweave plan " << o.net << ": " << net.size() << " layers, " << net.parameter_count()
      << " parameters, batch " << net.batch() << " (planned in " << std::fixed
      << std::setprecision(3) << seconds << " s)\n";
  out.unsetf(std::ios::fixed);
  out << describe_tiling(o) << runs.str();
  if (error) std::rethrow_exception(error);
  return split_fits ? code : 1;  // 1: no policy fits the budget
}

}  // namespace memweave
