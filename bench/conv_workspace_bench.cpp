// Question: what does dynamic convolution-workspace selection buy under a memory budget?
// One training iteration of a small ResNet-50 (full topology, CIFAR-sized images) on the
// host backend, liveness policy, under the same budget, with MEMWEAVE_CONV_WS = none,
// dynamic and max. Variants run side by side in one process, so compare their ratio.
// Counters: images per second, and the workspace bytes the iteration took in total.
#include <benchmark/benchmark.h>

#include <memory>

#include "memweave/device/device.hpp"
#include "memweave/engine/executor.hpp"
#include "memweave/engine/zoo.hpp"

namespace memweave {
namespace {

void BM_train_iteration_conv_ws(benchmark::State& state, const char* mode) {
  zoo_options z;
  z.batch = state.range(0);
  z.image_side = 32;
  z.width_scale = 0.25;
  z.classes = 10;
  const network net = make_network("resnet50", z);
  device_options d;
  d.kind = "host";
  d.capacity_bytes = std::size_t{4} << 30;
  auto dev = make_device(d);
  executor_options o;
  o.policy = executor_policy::parse("liveness");
  o.budget_bytes = static_cast<std::size_t>(state.range(1)) << 20;
  o.conv_ws = conv_ws_options::parse(mode, "bench");
  executor ex(net, *dev, o);
  auto data = make_synthetic_source(net[0].output_shape, net.classes(), 1);
  std::int64_t it = 0;
  ex.run_iteration(data.get(), it++);  // measures the candidates (dynamic/max) once
  std::size_t workspace = 0;
  for (auto _ : state) {
    ex.run_iteration(data.get(), it++);
    workspace = 0;
    for (const auto& s : ex.steps()) workspace += s.workspace_bytes;
  }
  state.counters["img_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * z.batch), benchmark::Counter::kIsRate);
  state.counters["workspace_MiB_per_iter"] = static_cast<double>(workspace) / (1 << 20);
  state.counters["peak_MiB"] = static_cast<double>(ex.report().peak_bytes) / (1 << 20);
}

// Args: batch, budget in MiB (1.25x the liveness peak (25.6 MiB) without workspace at batch 32).
BENCHMARK_CAPTURE(BM_train_iteration_conv_ws, none, "none")
    ->Args({32, 32})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_train_iteration_conv_ws, dynamic, "dynamic")
    ->Args({32, 32})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_train_iteration_conv_ws, max, "max")
    ->Args({32, 1024})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace memweave

BENCHMARK_MAIN();
