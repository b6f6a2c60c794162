// Question: how fast does training run under memory pressure? For each network of the
// issue's table (full size), the null device's model (12 TFLOP/s, 500 GB/s device memory,
// 16 GB/s host link) plans one iteration with liveness and no budget, then each policy at a
// fraction of liveness's peak. Side by side in one run.
// Counters: speed = liveness's unlimited iteration time / the policy's (1 = no slowdown; 0
// when it does not fit), fits, GB moved (one direction), extra forwards, the schedule's own
// prediction of speed (all), and safety-net evictions.
#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "memweave/alloc/static_tls.hpp"
#include "memweave/core/error.hpp"
#include "memweave/device/device.hpp"
#include "memweave/engine/executor.hpp"
#include "memweave/engine/zoo.hpp"

namespace memweave {
namespace {

struct planned {
  bool fits = false;
  double seconds = 0;
  std::size_t peak = 0;
  policy_report report;
};

planned plan_once(const network& net, const std::string& policy, std::size_t budget) {
  device_options d;
  d.kind = "null";
  d.capacity_bytes = std::size_t{1} << 40;
  auto dev = make_device(d);
  executor_options o;
  o.policy = executor_policy::parse(policy);
  o.budget_bytes = budget;
  o.host_pool_bytes = std::size_t{256} << 30;
  o.schedule = schedule_options::from_environment();  // MEMWEAVE_SCHEDULE* apply
  planned r;
  try {
    executor ex(net, *dev, o);
    ex.run_iteration(nullptr, 0);
    r.report = ex.report();
    r.fits = true;
    r.seconds = r.report.seconds_per_iteration;
    r.peak = r.report.peak_bytes;
  } catch (const error&) {
  }
  return r;
}

const network& zoo_net(const std::string& name, std::int64_t batch) {
  static std::map<std::pair<std::string, std::int64_t>, std::unique_ptr<network>> nets;
  auto& n = nets[{name, batch}];
  if (!n) {
    zoo_options z;
    z.batch = batch;
    n = std::make_unique<network>(make_network(name, z));
  }
  return *n;
}

// liveness with no budget: (seconds, peak), once per network.
const planned& unlimited(const std::string& name, std::int64_t batch) {
  static std::map<std::pair<std::string, std::int64_t>, planned> cache;
  auto it = cache.find({name, batch});
  if (it == cache.end()) {
    it = cache.emplace(std::make_pair(name, batch), plan_once(zoo_net(name, batch), "liveness", 0))
             .first;
  }
  return it->second;
}

void BM_pressure(benchmark::State& state, const std::string& name, std::int64_t batch,
                 const std::string& policy, double fraction) {
  const planned& base = unlimited(name, batch);
  const std::size_t budget = static_cast<std::size_t>(fraction * static_cast<double>(base.peak));
  planned r;
  for (auto _ : state) r = plan_once(zoo_net(name, batch), policy, budget);
  state.counters["speed"] = r.fits ? base.seconds / r.seconds : 0.0;
  state.counters["fits"] = r.fits ? 1 : 0;
  state.counters["GB_moved"] = static_cast<double>(r.report.bytes_offloaded) / 1e9;
  state.counters["extra_fwd"] = static_cast<double>(r.report.recomputations);
  state.counters["evictions"] = static_cast<double>(r.report.evictions);
  if (r.report.predicted_seconds > 0) {
    state.counters["predicted"] = base.seconds / r.report.predicted_seconds;
  }
  // The best any exact schedule could do here, in the same ratio (an upper bound on speed).
  if (r.report.bound_seconds > 0) state.counters["bound"] = base.seconds / r.report.bound_seconds;
}

void register_all() {
  const std::tuple<const char*, std::int64_t> nets[] = {
      {"resnet50", 64}, {"inception_v4", 32}, {"densenet121", 32}, {"vgg16", 64}};
  const double fractions[] = {1.1, 0.9, 0.75, 0.5, 0.33};
  for (const auto& [name, batch] : nets) {
    for (double f : fractions) {
      for (const char* policy : {"recompute", "utp", "all"}) {
        const std::string label = std::string(name) + "/b" + std::to_string(batch) + "/" + policy +
                                  "/" + std::to_string(f).substr(0, 4);
        benchmark::RegisterBenchmark(label.c_str(), BM_pressure, std::string(name), batch,
                                     std::string(policy), f)
            ->Iterations(1)
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
}

}  // namespace
}  // namespace memweave

int main(int argc, char** argv) {
  memweave::reexec_with_static_tls(argv);  // the pinned host pool's jemalloc
  benchmark::Initialize(&argc, argv);
  memweave::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
