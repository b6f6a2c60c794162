// Question: what does running layer steps in micro-batches (TSPLIT) cost on the host? One
// training iteration of a small ResNet-50 (batch 32, 64-pixel images, width 0.25) with the
// split plan's parts at half of max(l_i) against the same iteration unsplit, two ways:
// under liveness with no budget (the kernels' efficiency lost to smaller GEMMs and the second
// BN pass: whole tensors stay resident, no micro-tensor moves), and staged under utp within
// that budget (only the running micro-batch's slices on the device: the copies to and from
// host staging memory added, run in the step's own work), against utp with no budget
// (unsplit_dynamic: the same dynamic workspace selection).
#include <benchmark/benchmark.h>

#include <algorithm>

#include "memweave/alloc/static_tls.hpp"
#include "memweave/device/device.hpp"
#include "memweave/engine/data_source.hpp"
#include "memweave/engine/executor.hpp"
#include "memweave/engine/layer_memory.hpp"
#include "memweave/engine/route.hpp"
#include "memweave/engine/split_plan.hpp"
#include "memweave/engine/zoo.hpp"

namespace memweave {
namespace {

network small_resnet() {
  zoo_options z;
  z.batch = 32;
  z.image_side = 64;
  z.width_scale = 0.25;
  z.classes = 10;
  return make_network("resnet50", z);
}

void BM_split_iteration(benchmark::State& state, double budget_fraction, bool staged) {
  const network net = small_resnet();
  executor_options o;
  o.policy = executor_policy::parse(staged ? "utp" : "liveness");
  // Staged, the workspace of a fixed algorithm need not fit beside the micro-step: dynamic
  // selection (the fastest whose workspace fits what is free, direct when none does), as in
  // unsplit_dynamic.
  o.conv_ws = conv_ws_options::parse(staged ? "dynamic" : "fixed:im2col_image", "bench");
  if (budget_fraction > 0) {
    const route r(net);
    const tensor_table table(net, r);
    const layer_memory memory(table);
    // Along the batch only: what the executor runs.
    const split_plan whole =
        plan_splits(net, table, memory, cost_model{}, std::size_t{1} << 40, 1024, "bench", false);
    const auto budget = std::max(
        static_cast<std::size_t>(budget_fraction * static_cast<double>(whole.max_layer_bytes)),
        whole.floor_bytes);
    const split_plan plan =
        plan_splits(net, table, memory, cost_model{}, budget, 1024, "bench", false);
    o.split_parts = plan.parts(table.step_count());
    if (staged) o.budget_bytes = budget;
    state.counters["budget_KiB"] = static_cast<double>(budget) / 1024;
    state.counters["split_steps"] = static_cast<double>(plan.split_count());
    state.counters["model_kernels_x"] = plan.split_seconds() / plan.whole_seconds();
    state.counters["model_with_link_x"] =
        (plan.split_seconds() + plan.link_seconds()) / plan.whole_seconds();
  }
  device_options d;
  d.kind = "host";
  d.capacity_bytes = std::size_t{4} << 30;
  auto dev = make_device(d);
  auto data = make_synthetic_source(net[net.data_layer()].output_shape, net.classes(), 7);
  executor ex(net, *dev, o);
  ex.run_iteration(data.get(), 0);  // warm: conv buffers, first touches
  std::int64_t it = 1;
  for (auto _ : state) ex.run_iteration(data.get(), it++);
  if (staged) {
    state.counters["staged_MiB"] = static_cast<double>(ex.report().bytes_staged) / (1 << 20);
    state.counters["handed_MiB"] = static_cast<double>(ex.report().bytes_handed) / (1 << 20);
  }
  state.counters["img_per_s"] =
      benchmark::Counter(static_cast<double>(32 * state.iterations()), benchmark::Counter::kIsRate);
}

BENCHMARK_CAPTURE(BM_split_iteration, unsplit, 0.0, false)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_split_iteration, half_max_layer, 0.5, false)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_split_iteration, floor, 0.0001, false)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_split_iteration, unsplit_dynamic, 0.0, true)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_split_iteration, staged_half_max_layer, 0.5, true)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_split_iteration, staged_floor, 0.0001, true)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace memweave

int main(int argc, char** argv) {
  memweave::reexec_with_static_tls(argv);  // the pinned host pool's jemalloc
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
