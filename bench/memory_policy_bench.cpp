// Question: what do the memory techniques cost in time? One training iteration of a small
// ResNet-50 (full topology, CIFAR-sized images) on the host backend with host<->device copies
// throttled to 2 GB/s, under policies and budgets run side by side in one process (compare
// ratios). Budgets: "ample" = none; "tight" = the smallest the planner finds for that policy
// (+2%): then utp moves tensors, and all also drops and rebuilds them; "half" = half of
// liveness's peak (the figure: all against liveness with no budget, vs_liveness; the
// alternated benchmarks run the two in turn in one process, which is the figure to quote).
// Counters: images/s, bytes moved per iteration, recomputations, seconds the step loop
// waited on transfers, and the share of transfer time hidden under compute:
//   hidden = 1 - (t_policy - t_liveness_ample) / (bytes moved / link bandwidth).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "memweave/alloc/static_tls.hpp"
#include "memweave/core/error.hpp"
#include "memweave/device/device.hpp"
#include "memweave/engine/data_source.hpp"
#include "memweave/engine/executor.hpp"
#include "memweave/engine/zoo.hpp"

namespace memweave {
namespace {

constexpr double k_link_gbps = 2.0;

network small_resnet(std::int64_t batch = 16) {
  zoo_options z;
  z.batch = batch;
  // The larger case: 64-pixel images, so that activations rather than parameters fill the
  // memory (half of liveness's peak at batch 16 and 32 pixels is less than the parameters
  // and momenta).
  z.image_side = batch == 16 ? 32 : 64;
  z.width_scale = 0.25;
  z.classes = 10;
  return make_network("resnet50", z);
}

executor_options options(const std::string& policy, std::size_t budget) {
  executor_options o;
  o.policy = executor_policy::parse(policy);
  o.budget_bytes = budget;
  o.conv_ws = conv_ws_options::parse("fixed:im2col_image", "bench");
  o.host_pool_bytes = std::size_t{1} << 30;
  o.link_gbps = k_link_gbps;  // what the memory schedule (all) plans for
  return o;
}

// The smallest budget (to 64 KiB) the planner runs `policy` in.
std::size_t smallest_budget(const network& net, const std::string& policy) {
  auto fits = [&](std::size_t b) -> std::optional<std::size_t> {
    try {
      device_options d;
      d.kind = "null";
      d.capacity_bytes = std::size_t{1} << 40;
      auto dev = make_device(d);
      executor ex(net, *dev, options(policy, b));
      ex.run_iteration(nullptr, 0);
      return ex.report().peak_bytes;
    } catch (const error&) {
      return std::nullopt;
    }
  };
  std::size_t lo = 0, hi = 2 * *fits(0);
  while (hi - lo > (64 << 10)) {
    const std::size_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? hi : lo) = mid;
  }
  return hi + hi / 50;
}

std::map<std::int64_t, double> g_liveness_seconds;  // per batch: the reference, measured first

// Half of liveness's peak (as the planner finds it).
std::size_t half_of_liveness(const network& net) {
  device_options d;
  d.kind = "null";
  d.capacity_bytes = std::size_t{1} << 40;
  auto dev = make_device(d);
  executor ex(net, *dev, options("liveness", 0));
  ex.run_iteration(nullptr, 0);
  return ex.report().peak_bytes / 2;
}

// The simulated device the iterations run on: 2 GiB, its link throttled to k_link_gbps.
std::unique_ptr<device> host_device() {
  device_options d;
  d.kind = "host";
  d.capacity_bytes = std::size_t{2} << 30;
  d.host_link_gbps = k_link_gbps;
  return make_device(d);
}

enum class budget_kind { ample, half, tight };

void BM_train_iteration_policy(benchmark::State& state, const char* policy, budget_kind kind,
                               std::int64_t batch = 16, bool replan = true) {
  const network net = small_resnet(batch);
  const bool tight = kind == budget_kind::tight;
  const std::size_t budget = tight                       ? smallest_budget(net, policy)
                             : kind == budget_kind::half ? half_of_liveness(net)
                                                         : 0;
  auto dev = host_device();
  executor_options o = options(policy, budget);
  // all: the warm-up iteration's measured times re-plan the schedule (Capuchin), or not.
  o.replan_from_measured = replan;
  executor ex(net, *dev, o);
  auto data = make_synthetic_source(net[0].output_shape, net.classes(), 1);
  std::int64_t it = 0;
  // Warm-up: measures convolutions, faults pages in; all with a re-planned schedule also runs
  // its trial (iterations 2-5), so that what is timed is the schedule it keeps.
  const int warm_up = std::string(policy) == "all" && replan ? 5 : 1;
  while (it < warm_up) ex.run_iteration(data.get(), it++);
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    ex.run_iteration(data.get(), it++);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double per_iteration = seconds / static_cast<double>(state.iterations());
  if (std::string(policy) == "liveness" && kind == budget_kind::ample) {
    g_liveness_seconds[batch] = per_iteration;
  }
  const double liveness_s = g_liveness_seconds[batch];
  if (liveness_s > 0) state.counters["vs_liveness"] = liveness_s / per_iteration;
  const policy_report r = ex.report();
  const double moved = static_cast<double>(r.bytes_offloaded + r.bytes_prefetched);
  state.counters["img_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * net.batch()), benchmark::Counter::kIsRate);
  state.counters["budget_MiB"] = static_cast<double>(budget) / (1 << 20);
  state.counters["moved_MiB"] = moved / (1 << 20);
  state.counters["recomputations"] = static_cast<double>(r.recomputations);
  state.counters["wait_ms"] = 1e3 * r.transfer_wait_s;
  if (r.replan.replanned) state.counters["replan_gaps_changed"] = r.replan.gaps_changed;
  if (moved > 0 && liveness_s > 0) {
    const double transfer_s = moved / (k_link_gbps * 1e9);
    state.counters["hidden"] = 1.0 - (per_iteration - liveness_s) / transfer_s;
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The host figure side by side: liveness with no budget and `all` at half of its
// peak (batch 32, 64-pixel images), one iteration of each in turn, so that load which drifts
// over the run (the stream workers share the machine's cores) falls on both alike; each warmed
// up first (all re-plans from its first iteration's measured times and keeps the faster of the
// two schedules, or not). vs_liveness: the ratio of the medians of their iteration times.
void BM_all_half_alternated_with_liveness(benchmark::State& state, bool replan) {
  const network net = small_resnet(32);
  auto liveness_dev = host_device(), all_dev = host_device();
  executor_options all_options = options("all", half_of_liveness(net));
  all_options.replan_from_measured = replan;
  executor liveness(net, *liveness_dev, options("liveness", 0));
  executor all(net, *all_dev, all_options);
  auto liveness_data = make_synthetic_source(net[0].output_shape, net.classes(), 1);
  auto all_data = make_synthetic_source(net[0].output_shape, net.classes(), 1);
  auto timed = [](executor& ex, data_source& data, std::int64_t it) {
    const auto t0 = std::chrono::steady_clock::now();
    ex.run_iteration(&data, it);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // Warm-up: the first iteration re-plans, and the next four try the new schedule and the
  // model's in turn before the faster is kept (executor_options::replan_from_measured).
  std::int64_t it = 0;
  for (; it < 5; ++it) timed(liveness, *liveness_data, it), timed(all, *all_data, it);
  std::vector<double> liveness_s, all_s;
  for (auto _ : state) {
    liveness_s.push_back(timed(liveness, *liveness_data, it));
    all_s.push_back(timed(all, *all_data, it));
    ++it;
  }
  const policy_report r = all.report();
  state.counters["liveness_ms"] = 1e3 * median(liveness_s);
  state.counters["all_ms"] = 1e3 * median(all_s);
  state.counters["vs_liveness"] = median(liveness_s) / median(all_s);
  state.counters["moved_MiB"] =
      static_cast<double>(r.bytes_offloaded + r.bytes_prefetched) / (1 << 20);
  state.counters["recomputations"] = static_cast<double>(r.recomputations);
  if (r.replan.model_iteration_seconds > 0) {  // the trial ran: which schedule it kept
    state.counters["replan_kept"] = r.replan.replanned ? 1 : 0;
  }
}

BENCHMARK_CAPTURE(BM_all_half_alternated_with_liveness, replanned, true)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(9);
BENCHMARK_CAPTURE(BM_all_half_alternated_with_liveness, model_times, false)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(9);

BENCHMARK_CAPTURE(BM_train_iteration_policy, liveness_ample, "liveness", budget_kind::ample)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_train_iteration_policy, utp_ample, "utp", budget_kind::ample)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_train_iteration_policy, all_ample, "all", budget_kind::ample)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// Half of liveness's peak at batch 16 is less than the parameters and momenta: batch 32 on
// 64-pixel images, where activations fill the memory, is the case.
BENCHMARK_CAPTURE(BM_train_iteration_policy, liveness_ample_b32x64, "liveness", budget_kind::ample,
                  32)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_train_iteration_policy, utp_half_b32x64, "utp", budget_kind::half, 32)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_train_iteration_policy, all_half_b32x64, "all", budget_kind::half, 32)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// The same schedule as planned on the model's times, not re-planned from measured ones.
BENCHMARK_CAPTURE(BM_train_iteration_policy, all_half_b32x64_model_times, "all", budget_kind::half,
                  32, false)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_train_iteration_policy, utp_tight, "utp", budget_kind::tight)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_train_iteration_policy, offload_tight, "offload", budget_kind::tight)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_train_iteration_policy, recompute_tight, "recompute", budget_kind::tight)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_train_iteration_policy, all_tight, "all", budget_kind::tight)
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
