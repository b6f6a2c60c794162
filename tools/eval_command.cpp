// `memweave eval`: the evaluation pass (executor::evaluate: forward only, BN on running
// statistics, dropout off) of a network, from a checkpoint (--init-from) or its initial
// weights (an ONNX model's, for --net PATH.onnx), over --batches batches, with each policy asked
// for; prints the loss, the accuracy and what memory did (forward-only liveness). On the null
// device only memory.
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>

#include "commands.hpp"
#include "memweave/comm/communicator.hpp"
#include "memweave/core/checked.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"
#include "network_run.hpp"
#include "report_writers.hpp"
#include "stop_signal.hpp"
#include "training_options.hpp"

namespace memweave {

namespace {

// One policy's evaluation on a fresh device, printed; its row (fits false where it does not
// fit the budget).
policy_report evaluate_policy(const network& net, const network_run_options& o,
                              const std::string& policy, const device_options& dev_opts,
                              data_source* data, std::int64_t first, std::int64_t batches,
                              std::ostream& out, std::string& device_name) {
  auto dev = make_device(dev_opts);
  device_name = dev->name();
  executor_options eo = o.executor;
  if (o.model_from_device) eo.model = cost_model::for_device(*dev);
  // Each policy's heap to its own trace file, as train's (the last policy's overwrote them).
  eo.heap.trace_path = trace_path_of(o, policy);
  eo.policy = executor_policy::parse(policy);
  eo.budget_bytes = o.budget_bytes;
  eo.evaluation_only = true;  // the budget need not hold a backward pass
  char line[320];
  try {
    split_parts_if_asked(net, o, eo, dev->kind() != device_kind::cuda);
    executor ex(net, *dev, eo);
    const bool computes = dev->touches_memory();
    // The null device holds no values: the weights do not change what memory does. The
    // model's weights, then a checkpoint's (--init-from wins).
    if (computes) {
      for (const auto& [name, values] : o.initial_weights) ex.write(name, values);
    }
    if (o.init && computes) {
      (void)from_knob("--init-from", [&] { return load_checkpoint(ex, *o.init, o.init_path); });
    }
    // Ctrl-C or SIGTERM ends the running policy after its batch: its row says how many ran
    // (it finished all of them first, and the policy after it had no row; session 43).
    const evaluation_result r = ex.evaluate(computes ? data : nullptr, first, batches,
                                            [] { return stop_requested() != 0; });
    policy_report rep = ex.report();
    rep.iterations_run = static_cast<int>(r.batches);
    if (r.batches < batches) rep.stopped_by = signal_name(stop_requested());
    rep.eval_loss = r.loss;
    rep.losses = {r.loss};
    rep.accuracy = r.accuracy;
    rep.correct = r.correct;
    rep.images = computes ? r.images : 0;  // the null device evaluates nothing
    if (computes && !std::isfinite(r.loss)) {
      // Not a result: weights whose outputs overflow (finite, but as large as 3e38).
      rep.fits = false;
      rep.failed = true;
      rep.failure = "policy " + policy + ": the evaluation's loss is " + std::to_string(r.loss) +
                    ": the weights (" + weights_text(o) +
                    ") give outputs that are not finite; check their values";
    }
    if (computes) {
      std::snprintf(line, sizeof line, "%-9s loss %9.5f  accuracy %6.2f%% (%lld/%lld)",
                    policy.c_str(), r.loss, 100.0 * r.accuracy, static_cast<long long>(r.correct),
                    static_cast<long long>(r.images));
    } else {
      std::snprintf(line, sizeof line, "%-9s (null device: memory only)", policy.c_str());
    }
    out << line;
    if (!rep.stopped_by.empty()) {
      out << "  stopped by " << rep.stopped_by << " after " << r.batches << " of " << batches
          << " batches";
    }
    out << "\n";
    std::snprintf(line, sizeof line,
                  "          memory per batch: peak %s at step %d; parameters and state %s "
                  "(on the device or, under utp and all, partly in host memory), "
                  "%llu tensors allocated, %llu evicted, %s offloaded\n",
                  format_bytes(rep.peak_bytes).c_str(), rep.peak_step,
                  format_bytes(rep.persistent_bytes).c_str(),
                  static_cast<unsigned long long>(rep.tensors_allocated),
                  static_cast<unsigned long long>(rep.evictions),
                  format_bytes(rep.bytes_offloaded).c_str());
    out << line;
    if (rep.staged_steps != 0) {
      // The groups too, as train says them: a CONV in groups under im2col rounds differently.
      out << "          TSPLIT: " << rep.staged_steps << " steps ran in micro-batches"
          << (rep.channel_group_steps != 0
                  ? " (" + std::to_string(rep.channel_group_steps) + " in output-channel groups)"
                  : std::string())
          << " with their micro-tensors in host memory, " << format_bytes(rep.bytes_staged)
          << " over the link per batch";
      if (rep.bytes_staged_fp16 != 0) {
        out << " (" << format_bytes(rep.bytes_staged_fp16)
            << " of it as FP16: lossy, MEMWEAVE_SPLIT_COMPRESS)";
      }
      out << "\n";
    }
    return rep;
  } catch (const error& e) {
    if (!does_not_fit(e)) throw;
    out << policy << ": does not fit: " << e.what() << "\n";
    policy_report failed;
    failed.policy = policy;
    failed.fits = false;
    failed.failure = e.what();
    return failed;
  }
}

}  // namespace

int eval_command(int argc, const char* const* argv, std::ostream& out) {
  // Under mpirun every rank evaluated the whole run and wrote the same outputs (session 42's
  // mpirun run).
  MEMWEAVE_EXPECTS(!launched_with_several_ranks(),
                   "memweave eval was started by an MPI launcher with several ranks: only "
                   "train runs data-parallel; evaluate in one process");
  cli_args args(argc, argv, 2, {"split", "tile"});
  network_run_options o = read_network_run_options(args);
  read_init_from(args, o, false);
  const std::int64_t batches =
      args.get_int("batches", 1, std::numeric_limits<std::int32_t>::max()).value_or(10);
  const std::int64_t first =
      args.get_int("first-batch", 0, std::numeric_limits<std::int64_t>::max() / 2).value_or(0);
  const std::string data = args.get_or("data", "synthetic");
  device_options dev = device_options::from_environment();
  if (auto kind = args.get("device")) {
    MEMWEAVE_EXPECTS(*kind == "auto" || *kind == "host" || *kind == "cuda" || *kind == "null",
                     knob_value("--device", *kind) +
                         " is not a device: expected auto, host, "
                         "cuda or null (memory only)");
    dev.kind = *kind;
    check_device_option(dev, *kind);
  }
  if (dev.kind == "null") dev.host_link_gbps = null_link_gbps(o);
  o.split = args.flag("split");
  // Tiled segments run in train and plan only (an evaluation has no backward to tile for);
  // read as the flag it is in train, so that it is refused by name, not taken for an option
  // missing its value.
  MEMWEAVE_EXPECTS(!args.flag("tile"),
                   "--tile: eval runs no tiled segments (train and plan do); evaluate under "
                   "--split (TSPLIT's micro-batches) to stay below the largest layer");
  warn_unused_variables(o);
  args.reject_unused();
  MEMWEAVE_EXPECTS(!o.lr_given,
                   "--lr: eval trains nothing (its weights are --init-from's, the "
                   "model's or the seed's); leave it out");
  // Its report is the text it prints and --json: silently accepting these would leave no
  // file behind.
  for (const auto& [knob, path] :
       {std::pair{"--csv", &o.csv}, {"--svg", &o.svg}, {"--trace-timeline", &o.timeline}}) {
    MEMWEAVE_EXPECTS(path->empty(), std::string(knob) + " " + *path +
                                        ": eval writes no --csv, --svg or --trace-timeline "
                                        "(only its text and --json); leave it out, or "
                                        "`memweave train`/`plan` to get one");
  }
  check_output_paths(o, data);
  MEMWEAVE_EXPECTS(!o.split || o.budget_bytes != 0,
                   "--split runs the forward steps over the budget in micro-batches: give "
                   "--budget");
  const network net = make_run_network(o, true);
  check_init_matches(o, net, true);
  const auto source =
      make_data_source(data, net[net.data_layer()].output_shape, net.classes(), o.executor.seed);
  // Batches past a dataset's end would wrap around and count its images again.
  if (const std::int64_t n = source->images(); n > 0) {
    const auto batches_end = checked_add(first, batches);
    const auto end = batches_end ? checked_mul(*batches_end, net.batch()) : std::nullopt;
    MEMWEAVE_EXPECTS(end && *end <= n,
                     "--first-batch " + std::to_string(first) + " --batches " +
                         std::to_string(batches) + " at batch " + std::to_string(net.batch()) +
                         " go past the " + std::to_string(n) + " images of --data " + data +
                         ": batches past its end would wrap around and count images again; "
                         "evaluate fewer batches");
  }
  // Ctrl-C or SIGTERM: the policies evaluated are printed and written, the rest not begun
  // (stop_signal.hpp; the running one stops after its batch, its row saying how many ran).
  // Caught from before the header, so that a signal after it is never the default's death.
  const stop_signal_scope stop_scope;
  const std::string weights = weights_text(o);
  out << "memweave eval " << o.net << ": " << net.size() << " layers, batch " << net.batch()
      << ", batches " << first << ".." << first + batches - 1 << " of " << data << ", weights "
      << weights << "\n"
      << "memory: forward-only liveness under every policy (each tensor freed after its last "
         "forward reader)"
      << std::endl;  // flushed: a script waits for it before it signals (stop_scope, below)
  run_report report;
  report.command = "eval";
  report.network = o.net;
  report.batch = net.batch();
  report.budget_bytes = o.budget_bytes;
  report.iterations = static_cast<int>(batches);
  report.first_batch = first;
  bool any = false;
  for (const std::string& policy : o.policies) {
    if (stop_requested() != 0) break;
    report.policies.push_back(
        evaluate_policy(net, o, policy, dev, source.get(), first, batches, out, report.device));
    any = any || report.policies.back().fits;
  }
  if (!o.json.empty()) {
    from_knob("--json", [&] { write_file(o.json, report, write_json); });
    out << "wrote " << o.json << "\n";
  }
  if (const int signal = stop_requested(); signal != 0) throw stopped_by_signal(signal);
  for (const policy_report& p : report.policies) {
    if (p.failed) throw invalid_argument(p.failure);
  }
  return any ? 0 : 1;
}

}  // namespace memweave
