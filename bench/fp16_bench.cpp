// Question: what do the fp32 <-> fp16 conversions of compressed swaps and fp16 micro-tensors
// (MEMWEAVE_SCHEDULE_COMPRESS, MEMWEAVE_SPLIT_COMPRESS) cost on the host, next to a plain
// copy of the same values? The host backend converts with the CPU, on the cores its kernels
// use; a GPU converts in device kernels. 16 Mi normally distributed values (a few in fp16's
// subnormal range, none out of range), one thread.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "memweave/swap/fp16.hpp"

namespace memweave {
namespace {

constexpr std::size_t k_values = std::size_t{1} << 24;

std::vector<float> values() {
  std::mt19937 gen(3);
  std::normal_distribution<float> value(0.0f, 1.0f);
  std::vector<float> x(k_values);
  for (float& v : x) v = value(gen);
  return x;
}

// fp16_encode: the rounding and the largest relative error of the round trip.
void BM_fp16_encode(benchmark::State& state) {
  const std::vector<float> x = values();
  std::vector<std::uint16_t> h(x.size());
  for (auto _ : state) {
    benchmark::DoNotOptimize(fp16_encode(h.data(), x.data(), x.size()));
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(x.size()));
}

void BM_fp16_decode(benchmark::State& state) {
  const std::vector<float> x = values();
  std::vector<std::uint16_t> h(x.size());
  (void)fp16_encode(h.data(), x.data(), x.size());
  std::vector<float> y(x.size());
  for (auto _ : state) {
    fp16_decode(y.data(), h.data(), h.size());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(x.size()));
}

// The fp32 copy the conversions stand in for.
void BM_fp32_copy(benchmark::State& state) {
  const std::vector<float> x = values();
  std::vector<float> y(x.size());
  for (auto _ : state) {
    std::memcpy(y.data(), x.data(), x.size() * sizeof(float));
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(x.size()));
}

BENCHMARK(BM_fp16_encode)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_fp16_decode)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_fp32_copy)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace memweave

BENCHMARK_MAIN();
