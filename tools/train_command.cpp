// `memweave train`: trains a zoo network or an ONNX model (from its weights) under a budget
// with each policy asked for, on the host (or cuda) device, printing a progress line per
// iteration and a summary; optionally from a checkpoint (--init-from) and saving one
// (--save), with a learning-rate schedule; --export-onnx writes the trained weights back into
// a copy of the model. Everything the run will need (options, data, output paths) is checked
// before the first policy runs.
//
// Under an MPI launcher with several ranks (`mpirun -np N memweave train ...`) it trains
// data-parallel: --batch is the global batch, rank r takes positions [r*B/N, (r+1)*B/N) of
// each batch, --budget is each rank's; rank 0 prints and writes the reports. Any error on
// any rank stops every rank, each naming the rank that failed (communicator.hpp).
#include <algorithm>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <vector>

#include "commands.hpp"
#include "memweave/comm/communicator.hpp"
#include "memweave/core/config.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/log.hpp"
#include "memweave/core/units.hpp"
#include "network_run.hpp"
#include "rank_agreement.hpp"
#include "report_writers.hpp"
#include "training_options.hpp"

namespace memweave {
namespace {

int train(int argc, const char* const* argv, std::ostream& out, communicator& comm) {
  cli_args args(argc, argv, 2, {"tile", "split"});
  network_run_options o = read_network_run_options(args);
  o.tile = args.flag("tile");
  o.split = args.flag("split");
  MEMWEAVE_EXPECTS(!(o.split && o.tile), "--split and --tile are planned apart: give one of them");
  MEMWEAVE_EXPECTS(!o.split || comm.size() == 1,
                   "--split runs on one device: start one rank, or train without --split");
  read_init_from(args, o, true);
  read_training_options(args, o);
  const int iterations =
      static_cast<int>(args.get_int("iterations", 1, std::numeric_limits<int>::max()).value_or(10));
  // Checked now, not after the run: the iteration saved would be one no checkpoint records.
  MEMWEAVE_EXPECTS(o.save.empty() || o.first_iteration <= checkpoint_max_iteration - iterations,
                   "--iterations " + std::to_string(iterations) + " after iteration " +
                       std::to_string(o.first_iteration) + " of --init-from " + o.init_path +
                       " would end past iteration " + std::to_string(checkpoint_max_iteration) +
                       ", the last a checkpoint records, so --save " + o.save +
                       " could not be written: train fewer iterations");
  const std::string data = args.get_or("data", "synthetic");
  device_options dev = device_options::from_environment();
  if (auto kind = args.get("device")) {
    MEMWEAVE_EXPECTS(*kind == "auto" || *kind == "host" || *kind == "cuda",
                     knob_value("--device", *kind) +
                         " is not a device to train on: expected auto, host or cuda "
                         "(`memweave plan` runs on the null device)");
    dev.kind = *kind;
    check_device_option(dev, *kind);
  }
  MEMWEAVE_EXPECTS(dev.kind != "null",
                   "MEMWEAVE_DEVICE=null cannot train: use --device host|cuda|auto "
                   "(`memweave plan` runs on the null device)");
  o.export_onnx = args.get_path("export-onnx");
  const std::string& export_path = o.export_onnx;
  args.reject_unused();
  MEMWEAVE_EXPECTS(export_path.empty() || is_onnx_net(o.net),
                   knob_value("--export-onnx", export_path) +
                       " needs an ONNX model to write into: give --net PATH.onnx");
  warn_unused_variables(o);
  check_output_paths(o, data);
  // Before any collective: ranks given other options would not match them (or train apart).
  check_ranks_agree(comm, agreement_text(args.given()));
  warn_outputs_of_other_ranks(comm, args.given());

  // Data parallelism: this rank's share of the global batch (a model file's own batch, when
  // --batch does not set it, is read first).
  const std::int64_t ranks = comm.size(), rank = comm.rank();
  std::int64_t global = o.zoo.batch;
  const bool batch_given = global != 0;
  if (global == 0 && ranks > 1) global = make_run_network(o, false, nullptr).batch();
  // (0 is left only to one rank: the model file's batch, read with the model below.) Named as
  // given: a model's own batch is not --batch (it read "--batch 2" to a user who gave none).
  MEMWEAVE_EXPECTS(
      global == 0 || global >= ranks,
      (batch_given ? "--batch " + std::to_string(global)
                   : "the model's own batch of " + std::to_string(global) + " (no --batch given)") +
          " is smaller than the " + std::to_string(ranks) +
          " ranks: each rank needs at least one image of the "
          "global batch; " +
          (batch_given ? "raise --batch" : "give a larger --batch") + " or start fewer ranks");
  const std::int64_t first = rank * global / ranks;
  o.zoo.batch = (rank + 1) * global / ranks - first;
  o.executor.comm = &comm;
  o.executor.global_batch = global;
  o.executor.first_sample = first;
  o.executor.bucket_bytes = *option_bytes("MEMWEAVE_BUCKET_BYTES");

  std::optional<imported_model> onnx;
  const std::optional<network> made = make_run_network_or_unfit(o, true, &onnx, "train", out);
  if (!made) return 1;
  const network& net = *made;
  check_init_matches(o, net, false);
  if (global == 0) global = net.batch();  // one rank, the model file's batch
  bool exported = false;
  if (!export_path.empty() && rank == 0) {  // every rank holds the same weights
    o.on_trained = [&](const std::string& policy, const executor& ex) {
      if (exported) return;
      std::map<std::string, std::vector<float>> trained;
      for (const auto& b : onnx->bindings) trained[b.tensor] = ex.read(b.tensor);
      from_knob("--export-onnx", [&] { export_onnx_weights(*onnx, trained, export_path); });
      out << "wrote " << export_path << " (the weights trained by policy " << policy << ")\n";
      exported = true;
    };
  }
  // One data source for every policy (its batches depend only on the iteration), made
  // before any runs so that a bad --data fails first.
  const auto whole =
      make_data_source(data, net[net.data_layer()].output_shape, net.classes(), o.executor.seed);
  // A batch larger than the dataset would hold some of its images twice.
  MEMWEAVE_EXPECTS(whole->images() == 0 || global <= whole->images(),
                   "--batch " + std::to_string(global) + " is larger than the " +
                       std::to_string(whole->images()) + " images of --data " + data +
                       ": a batch would hold images twice; lower --batch or give more data");
  const auto source = make_batch_slice(*whole, global, first);
  run_report report;
  report.command = "train";
  report.network = o.net;
  report.batch = global;
  report.budget_bytes = o.budget_bytes;
  report.iterations = iterations;
  report.ranks = comm.size();
  report.tiling = o.tiling;
  std::ostream null_out(nullptr);
  std::ostream& shown = rank == 0 ? out : null_out;  // rank 0 speaks for all
  shown << "memweave train " << o.net << ": " << net.size() << " layers, " << net.parameter_count()
        << " parameters, batch " << global;
  if (ranks > 1) shown << " (" << ranks << " ranks, " << comm.name() << ")";
  shown << ", data " << data << (onnx && !o.init ? ", initial weights from the model" : "") << "\n"
        << describe_tiling(o);
  // Said where it changes results: one process's losses differ from these (session 47's
  // hostile run took the difference for a bug).
  if (ranks > 1 && std::any_of(net.layers().begin(), net.layers().end(),
                               [](const layer& l) { return l.type == layer_type::bn; })) {
    shown << "BN normalizes over each rank's own images (no SyncBatchNorm): the losses are not "
             "one process's\n";
  }
  // The importer folds a Gemm's alpha and beta into its weight and bias, and spreads a
  // one-value bias over the outputs: the forward is the model's, but the updates are SGD on
  // those products (alpha^2 times the step on B), not on B and C as ONNX/PyTorch would train
  // them (a hostile run's numpy reference drifted 20 % from it in 3 iterations). Said, not
  // refused: the trained model is a sound one, in another parametrization.
  if (onnx) {
    for (const onnx_weight_binding& b : onnx->bindings) {
      if (b.scale != 1.0f) {
        shown << "the Gemm writing '" << b.node << "': " << b.scale_attribute << " = " << b.scale
              << " is folded into '" << b.initializer << "': training updates the product "
              << b.tensor << " = " << b.scale_attribute << " x " << b.initializer
              << " (SGD on the product, not on " << b.initializer << "), and --export-onnx "
              << "writes it with " << b.scale_attribute << " = 1\n";
      }
      if (b.broadcast) {
        shown << "Gemm bias '" << b.initializer << "' is one value spread over the outputs: "
              << "training updates each output's own (" << b.tensor
              << "), and --export-onnx writes them all\n";
      }
    }
  }
  if (o.init) {
    shown << "from " << o.init_path << ": resuming at iteration " << o.first_iteration;
    // The base rate too, where the file gave it (its range is the solver's, from 0; --lr's
    // starts above 0): a checkpoint's rate of 0 trained nothing, and nothing said so.
    if (!o.lr_given) {
      shown << ", base learning rate " << o.executor.learning_rate << " (the checkpoint's; --lr "
            << "replaces it)";
      if (o.executor.learning_rate == 0.0f) {
        log(log_level::warn, "--init-from " + o.init_path +
                                 ": the checkpoint's base learning rate is 0, so training "
                                 "changes no weight; give --lr to train");
      }
    }
    // What the file decided of the rate, as it will be applied.
    if (o.schedule_from_checkpoint) {
      shown << ", learning-rate schedule " << o.schedule.describe()
            << " (of --lr-schedule and --warmup, what is not given is the checkpoint's)";
    }
    shown << "\n";
  }
  // A policy that does not fit is a result, reported in the summary; exit 1 is for when
  // none does.
  int rc = run_policies(net, o, dev, iterations, source.get(), report, shown, &shown);
  if (!export_path.empty() && rank == 0 && !exported) {
    // Not bad input: no policy fitted (exit 1, as a --save with nothing trained).
    shown << "--export-onnx " << export_path
          << ": not written, no policy trained every iteration (see the summary)\n";
    if (rc == 0) rc = 1;
  }
  comm.barrier();  // an error on rank 0 writing the reports reaches every rank
  return rc;
}

}  // namespace

int train_command(int argc, const char* const* argv, std::ostream& out) {
  if (!launched_with_several_ranks()) {
    const auto single = make_single_communicator();
    return train(argc, argv, out, *single);
  }
  const auto comm = make_mpi_communicator();
  try {
    return train(argc, argv, out, *comm);
  } catch (const std::exception& e) {
    // Exit codes as main's: 1 does not fit, 2 bad input, 3 a device failure or a bug. A rank
    // that failed because another did (its collective abandoned) takes that rank's code: the
    // job's is the first failure's, whichever rank aborts first.
    const int own = does_not_fit(e)                                    ? 1
                    : dynamic_cast<const device_error*>(&e) != nullptr ? 3
                    : dynamic_cast<const error*>(&e) != nullptr        ? 2
                                                                       : 3;
    const int peer = comm->peer_failure_code();
    const int code = peer != 0 ? peer : own;
    const std::string what = failure_text(e, comm.get());
    // One write, so that the launcher does not interleave it with other ranks' lines.
    std::cerr << ("memweave: error: rank " + std::to_string(comm->rank()) + " of " +
                  std::to_string(comm->size()) + ": " + what + "\n")
              << std::flush;
    comm->fail(e.what(), code);
    return code;
  }
}

}  // namespace memweave
