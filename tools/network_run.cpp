// Shared by train and plan. Single-threaded.
#include "network_run.hpp"

#include <chrono>
#include <cstdio>
#include <iomanip>

#include "memweave/core/config.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"
#include "report_writers.hpp"

namespace memweave {

network_run_options read_network_run_options(cli_args& args) {
  network_run_options o;
  auto net = args.get("net");
  MEMWEAVE_EXPECTS(net.has_value(),
                   "--net is required: one of alexnet, vgg16, resnet50, "
                   "resnet101, resnet152, resnet:<n1>,<n2>,<n3>,<n4>, "
                   "inception_v4, densenet121");
  o.net = *net;
  o.zoo.batch = args.get_int("batch").value_or(32);
  o.zoo.image_side = args.get_int("image-side").value_or(0);
  o.zoo.classes = args.get_int("classes").value_or(1000);
  if (auto w = args.get("width")) o.zoo.width_scale = parse_double(*w, "--width");
  MEMWEAVE_EXPECTS(o.zoo.width_scale > 0, "--width must be positive");
  o.policies = split_list(args.get_or("policy", option_string("MEMWEAVE_POLICY")));
  MEMWEAVE_EXPECTS(!o.policies.empty(),
                   "--policy is empty: give a policy or a comma-separated list");
  for (const auto& p : o.policies) (void)executor_policy::parse(p);
  o.budget_bytes = args.get_bytes("budget").value_or(0);
  if (args.get("budget")) MEMWEAVE_EXPECTS(o.budget_bytes > 0, "--budget must be positive");
  o.executor.heap = heap_options::from_environment();
  if (auto fit = args.get("fit")) {
    MEMWEAVE_EXPECTS(*fit == "best" || *fit == "first",
                     "--fit '" + *fit + "': expected best or first");
    o.executor.heap.fit = *fit == "best" ? fit_policy::best : fit_policy::first;
  }
  o.executor.conv_ws = conv_ws_options::from_environment();
  if (auto ws = args.get("conv-ws")) {
    const conv_ws_options mode = conv_ws_options::parse(*ws, "--conv-ws");
    o.executor.conv_ws.mode = mode.mode;
    o.executor.conv_ws.fixed_algorithm = mode.fixed_algorithm;
  }
  o.executor.recompute_strategy = args.get_or("recompute", option_string("MEMWEAVE_RECOMPUTE"));
  (void)parse_recompute_strategy(o.executor.recompute_strategy);
  o.executor.seed = static_cast<std::uint64_t>(args.get_int("seed", 0).value_or(1));
  if (auto lr = args.get("lr"))
    o.executor.learning_rate = static_cast<float>(parse_double(*lr, "--lr"));
  o.executor.threads = static_cast<int>(args.get_int("threads", 0).value_or(0));
  o.executor.host_pool_bytes = args.get_bytes("host-pool").value_or(0);
  o.executor.prefetch_distance = static_cast<int>(
      args.get_int("prefetch-distance")
          .value_or(static_cast<long long>(*option_double("MEMWEAVE_PREFETCH_DISTANCE"))));
  o.json = args.get_or("json", "");
  o.csv = args.get_or("csv", "");
  o.svg = args.get_or("svg", "");
  return o;
}

policy_report run_policy(const network& net, const network_run_options& o,
                         const std::string& policy, const device_options& device_opts,
                         int iterations, const std::string& data_spec, std::ostream* progress,
                         std::string* device_name) {
  auto dev = make_device(device_opts);
  if (device_name) *device_name = dev->name();
  executor_options eo = o.executor;
  eo.policy = executor_policy::parse(policy);
  eo.budget_bytes = o.budget_bytes;
  std::unique_ptr<data_source> data;
  if (dev->touches_memory()) {
    const shape4 img = net[net.data_layer()].output_shape;
    data = make_data_source(data_spec, img, net.classes(), eo.seed);
  }
  policy_report report;
  std::unique_ptr<executor> ex;
  try {
    ex = std::make_unique<executor>(net, *dev, eo);
  } catch (const out_of_memory& e) {  // not even the parameters fit
    report.policy = policy;
    report.fits = false;
    report.failure = e.what();
    return report;
  }
  double measured_s = 0;
  int measured = 0;
  std::vector<double> losses;
  try {
    for (int it = 0; it < iterations; ++it) {
      const auto t0 = std::chrono::steady_clock::now();
      const double loss = ex->run_iteration(data.get(), it);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      losses.push_back(loss);
      if (it > 0 || iterations == 1) measured_s += s, ++measured;  // the first warms up
      if (progress) {
        const heap_stats st = ex->heap().stats();
        char line[256];
        std::snprintf(line, sizeof line,
                      "%-9s iter %4d/%d  loss %9.5f  %8.1f img/s  in use %11s  peak %11s\n",
                      policy.c_str(), it + 1, iterations, loss,
                      static_cast<double>(net.batch()) / s, format_bytes(st.bytes_in_use).c_str(),
                      format_bytes(st.peak_bytes_in_use).c_str());
        *progress << line << std::flush;
      }
    }
  } catch (const out_of_memory& e) {
    // The steps that ran stay in the report: where memory was when it ran out.
    report = ex->report();
    report.fits = false;
    report.failure = e.what();
    return report;
  }
  report = ex->report();
  report.losses = std::move(losses);
  if (dev->touches_memory() && measured > 0) {
    report.seconds_per_iteration = measured_s / measured;
    report.images_per_s = static_cast<double>(net.batch()) / report.seconds_per_iteration;
  }
  return report;
}

void write_outputs(const network_run_options& o, const run_report& report, std::ostream& out) {
  if (!o.json.empty()) write_file(o.json, report, write_json), out << "wrote " << o.json << "\n";
  if (!o.csv.empty()) write_file(o.csv, report, write_csv), out << "wrote " << o.csv << "\n";
  if (!o.svg.empty()) write_file(o.svg, report, write_svg), out << "wrote " << o.svg << "\n";
}

}  // namespace memweave
