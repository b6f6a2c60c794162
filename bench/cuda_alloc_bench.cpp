// On a real GPU: what does one allocation and its free cost through memweave's C API (the
// drop-in replacement for cudaMalloc), against cudaMalloc+cudaFree and against the CUDA
// runtime's own stream-ordered pool (cudaMallocAsync+cudaFreeAsync on a pool that keeps its
// memory)? memweaveMallocAsync+memweaveFreeAsync are set against the latter on one stream.
// DESIGN.md holds memweave to >= 100x faster than cudaMalloc+cudaFree.
//
// Each benchmark times malloc+free pairs in wall time (the calls are synchronous on the host
// for cudaMalloc/cudaFree; the stream-ordered ones are not, so the loop synchronizes the
// stream once per batch of pairs, inside the timing). Scenarios:
//  (a) one size at a time, allocated and freed at once (the best case of every allocator);
//  (b) a tensor-like mix, log-uniform in 1 KiB .. 64 MiB, 256 live allocations, each pair
//      frees a random live one and allocates a new one (the heap has to search and coalesce).
// Without a usable device each benchmark skips with the runtime's reason.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "memweave/memweave.h"

namespace {

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;

// The reason no device can be used, or "" when one can.
std::string device_problem() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return std::string("no CUDA device: ") + cudaGetErrorString(e);
  if (count == 0) return "no CUDA device: cudaGetDeviceCount found none";
  return "";
}

// memweave's process-wide pool, sized once for every benchmark of this program.
bool memweave_ready(benchmark::State& state) {
  if (memweaveIsInitialized()) return true;
  const memweave_status s = memweaveInit(nullptr);  // the pool sized by MEMWEAVE_* variables
  if (s != MEMWEAVE_SUCCESS) {
    state.SkipWithError((std::string("memweaveInit: ") + memweaveGetLastErrorMessage()).c_str());
    return false;
  }
  return true;
}

enum class allocator { memweave, memweave_async, cuda_malloc, cuda_malloc_async };

struct pair_ops {
  allocator kind;
  cudaStream_t stream = nullptr;

  bool allocate(void** p, std::size_t bytes) const {
    switch (kind) {
      case allocator::memweave:
        return memweaveMalloc(p, bytes) == MEMWEAVE_SUCCESS;
      case allocator::memweave_async:
        return memweaveMallocAsync(p, bytes, stream) == MEMWEAVE_SUCCESS;
      case allocator::cuda_malloc:
        return cudaMalloc(p, bytes) == cudaSuccess;
      case allocator::cuda_malloc_async:
        return cudaMallocAsync(p, bytes, stream) == cudaSuccess;
    }
    return false;
  }
  void release(void* p) const {
    switch (kind) {
      case allocator::memweave:
        memweaveFree(p);
        break;
      case allocator::memweave_async:
        memweaveFreeAsync(p, stream);
        break;
      case allocator::cuda_malloc:
        cudaFree(p);
        break;
      case allocator::cuda_malloc_async:
        cudaFreeAsync(p, stream);
        break;
    }
  }
};

// Sets up the allocator; false (the state skipped) when it cannot run here.
bool prepare(benchmark::State& state, allocator kind, pair_ops& ops, cudaStream_t& stream) {
  if (const std::string why = device_problem(); !why.empty()) {
    state.SkipWithError(why.c_str());
    return false;
  }
  ops.kind = kind;
  if ((kind == allocator::memweave || kind == allocator::memweave_async) && !memweave_ready(state))
    return false;
  if (kind == allocator::memweave_async || kind == allocator::cuda_malloc_async) {
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
      state.SkipWithError("cudaStreamCreateWithFlags failed");
      return false;
    }
    ops.stream = stream;
  }
  if (kind == allocator::cuda_malloc_async) {
    // The default pool gives its memory back at each synchronization unless told to keep
    // it: keep everything, as a training framework's pool does.
    cudaMemPool_t pool = nullptr;
    cudaDeviceGetDefaultMemPool(&pool, 0);
    std::uint64_t keep = UINT64_MAX;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  }
  return true;
}

void finish(allocator kind, cudaStream_t stream) {
  if (stream != nullptr) {
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
  }
}

void BM_pair_one_size(benchmark::State& state, allocator kind) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  pair_ops ops{};
  cudaStream_t stream = nullptr;
  if (!prepare(state, kind, ops, stream)) return;
  constexpr int batch = 64;
  for (auto _ : state) {
    for (int i = 0; i < batch; ++i) {
      void* p = nullptr;
      if (!ops.allocate(&p, bytes)) {
        state.SkipWithError("allocation failed");
        break;
      }
      ops.release(p);
    }
    if (stream != nullptr) cudaStreamSynchronize(stream);
  }
  state.SetItemsProcessed(state.iterations() * batch);
  finish(kind, stream);
}

void BM_pair_tensor_mix(benchmark::State& state, allocator kind) {
  pair_ops ops{};
  cudaStream_t stream = nullptr;
  if (!prepare(state, kind, ops, stream)) return;
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> log_size(std::log(double(KiB)), std::log(64.0 * MiB));
  const auto next_size = [&] { return static_cast<std::size_t>(std::exp(log_size(rng))); };
  constexpr std::size_t live_count = 256;
  std::vector<void*> live(live_count, nullptr);
  for (auto& p : live)
    if (!ops.allocate(&p, next_size())) {
      state.SkipWithError("allocation failed while filling the live set");
      return;
    }
  std::uniform_int_distribution<std::size_t> pick(0, live_count - 1);
  constexpr int batch = 64;
  for (auto _ : state) {
    for (int i = 0; i < batch; ++i) {
      void*& slot = live[pick(rng)];
      ops.release(slot);
      if (!ops.allocate(&slot, next_size())) {
        state.SkipWithError("allocation failed");
        break;
      }
    }
    if (stream != nullptr) cudaStreamSynchronize(stream);
  }
  state.SetItemsProcessed(state.iterations() * batch);
  for (void* p : live)
    if (p != nullptr) ops.release(p);
  finish(kind, stream);
}

}  // namespace

BENCHMARK_CAPTURE(BM_pair_one_size, memweave, allocator::memweave)
    ->Arg(4 * KiB)
    ->Arg(1 * MiB)
    ->Arg(64 * MiB)
    ->Arg(512 * MiB)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_pair_one_size, memweave_async, allocator::memweave_async)
    ->Arg(4 * KiB)
    ->Arg(1 * MiB)
    ->Arg(64 * MiB)
    ->Arg(512 * MiB)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_pair_one_size, cuda_malloc, allocator::cuda_malloc)
    ->Arg(4 * KiB)
    ->Arg(1 * MiB)
    ->Arg(64 * MiB)
    ->Arg(512 * MiB)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_pair_one_size, cuda_malloc_async, allocator::cuda_malloc_async)
    ->Arg(4 * KiB)
    ->Arg(1 * MiB)
    ->Arg(64 * MiB)
    ->Arg(512 * MiB)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_pair_tensor_mix, memweave, allocator::memweave)->UseRealTime();
BENCHMARK_CAPTURE(BM_pair_tensor_mix, memweave_async, allocator::memweave_async)->UseRealTime();
BENCHMARK_CAPTURE(BM_pair_tensor_mix, cuda_malloc, allocator::cuda_malloc)->UseRealTime();
BENCHMARK_CAPTURE(BM_pair_tensor_mix, cuda_malloc_async, allocator::cuda_malloc_async)
    ->UseRealTime();

BENCHMARK_MAIN();
