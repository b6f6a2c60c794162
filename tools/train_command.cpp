// `memweave train`: trains a zoo network or an ONNX model (from its weights) under a budget
// with each policy asked for, on the host (or cuda) device, printing a progress line per
// iteration and a summary; optionally from a checkpoint (--init-from) and saving one
// (--save), with a learning-rate schedule; --export-onnx writes the trained weights back into
// a copy of the model. Everything the run will need (options, data, output paths) is checked
// before the first policy runs.
#include <limits>
#include <map>
#include <optional>
#include <vector>

#include "commands.hpp"
#include "memweave/core/config.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"
#include "network_run.hpp"
#include "report_writers.hpp"
#include "training_options.hpp"

namespace memweave {

int train_command(int argc, const char* const* argv, std::ostream& out) {
  cli_args args(argc, argv, 2, {});
  network_run_options o = read_network_run_options(args);
  read_init_from(args, o, true);
  read_training_options(args, o);
  const int iterations =
      static_cast<int>(args.get_int("iterations", 1, std::numeric_limits<int>::max()).value_or(10));
  const std::string data = args.get_or("data", "synthetic");
  device_options dev = device_options::from_environment();
  if (auto kind = args.get("device")) {
    MEMWEAVE_EXPECTS(*kind == "auto" || *kind == "host" || *kind == "cuda",
                     knob_value("--device", *kind) +
                         " is not a device to train on: expected auto, host or cuda "
                         "(`memweave plan` runs on the null device)");
    dev.kind = *kind;
  }
  MEMWEAVE_EXPECTS(dev.kind != "null",
                   "MEMWEAVE_DEVICE=null cannot train: use --device host|cuda|auto "
                   "(`memweave plan` runs on the null device)");
  o.export_onnx = args.get_or("export-onnx", "");
  const std::string& export_path = o.export_onnx;
  args.reject_unused();
  MEMWEAVE_EXPECTS(export_path.empty() || is_onnx_net(o.net),
                   knob_value("--export-onnx", export_path) +
                       " needs an ONNX model to write into: give --net PATH.onnx");
  check_output_paths(o);

  std::optional<imported_model> onnx;
  const network net = make_run_network(o, true, &onnx);
  bool exported = false;
  if (!export_path.empty()) {
    o.on_trained = [&](const std::string& policy, const executor& ex) {
      if (exported) return;
      std::map<std::string, std::vector<float>> trained;
      for (const auto& b : onnx->bindings) trained[b.tensor] = ex.read(b.tensor);
      export_onnx_weights(*onnx, trained, export_path);
      out << "wrote " << export_path << " (the weights trained by policy " << policy << ")\n";
      exported = true;
    };
  }
  // One data source for every policy (its batches depend only on the iteration), made
  // before any runs so that a bad --data fails first.
  const auto source =
      make_data_source(data, net[net.data_layer()].output_shape, net.classes(), o.executor.seed);
  run_report report;
  report.command = "train";
  report.network = o.net;
  report.batch = net.batch();
  report.budget_bytes = o.budget_bytes;
  report.iterations = iterations;
  out << "memweave train " << o.net << ": " << net.size() << " layers, " << net.parameter_count()
      << " parameters, batch " << net.batch() << ", data " << data
      << (onnx && !o.init ? ", initial weights from the model" : "") << "\n";
  if (o.init) {
    out << "from " << o.init_path << ": resuming at iteration " << o.first_iteration << "\n";
  }
  // A policy that does not fit is a result, reported in the summary; exit 1 is for when
  // none does.
  const int code = run_policies(net, o, dev, iterations, source.get(), report, out, &out);
  MEMWEAVE_EXPECTS(export_path.empty() || exported,
                   "--export-onnx " + export_path +
                       ": not written, no policy trained every iteration (see the summary)");
  return code;
}

}  // namespace memweave
