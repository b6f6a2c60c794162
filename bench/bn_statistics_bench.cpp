// Question: what does BN's forward cost on the host, whose statistics are exact sums (the
// same bits whole, in micro-batches or tile by tile)? bn_forward_training on ResNet-50 stage
// shapes at batch 8, one kernel thread and every core: the statistics (the sums of x and x^2
// in one pass, the variance exact from them) and the normalisation. Run beside an older
// build to compare statistics algorithms (docs/PERFORMANCE.md).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "engine/kernels/host/bn.hpp"
#include "engine/kernels/host/kernel_context.hpp"

namespace memweave::kernels::host {
namespace {

void BM_bn_forward_training(benchmark::State& state, shape4 in, int threads) {
  const kernel_context ctx(threads);
  std::mt19937 gen(5);
  std::normal_distribution<float> value(0.5f, 2.0f);
  std::vector<float> x(static_cast<std::size_t>(in.count())), y(x.size());
  for (float& v : x) v = value(gen);
  const auto C = static_cast<std::size_t>(in.c);
  const std::vector<float> gamma(C, 1.0f), beta(C, 0.0f);
  std::vector<float> mean(C), invstd(C);
  const bn_params p;
  for (auto _ : state) {
    bn_forward_training(ctx, in, p, x.data(), gamma.data(), beta.data(), y.data(), mean.data(),
                        invstd.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(x.size() * sizeof(float)));
}

BENCHMARK_CAPTURE(BM_bn_forward_training, stage1_64x56x56_1thread, shape4{8, 64, 56, 56}, 1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_bn_forward_training, stage1_64x56x56_all, shape4{8, 64, 56, 56}, 0)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_bn_forward_training, stage3_1024x14x14_1thread, shape4{8, 1024, 14, 14}, 1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_bn_forward_training, stage3_1024x14x14_all, shape4{8, 1024, 14, 14}, 0)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace memweave::kernels::host

BENCHMARK_MAIN();
