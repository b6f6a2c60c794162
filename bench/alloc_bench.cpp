// Which allocator should serve tensors? The cost of a malloc+free pair and the
// fragmentation of the device heap (best-fit, and the paper's first-fit) against jemalloc
// (mallocx/dallocx on an arena of its own) and glibc malloc, on
//  (a) tensor-like size mixes, log-uniform in 1 KiB .. 512 MiB, with stack-like (LIFO,
//      as forward/backward) and random lifetimes, at 100, 1k and 10k live allocations;
//  (b) a replayed synthetic training trace (memweave/alloc/trace.hpp).
// The heap runs over an address-only test device (no GPU; the heap never touches what it
// hands out). jemalloc is loaded with dlopen(RTLD_LOCAL) so that this process keeps glibc
// malloc; jemalloc and glibc get real, untouched, lazily committed virtual memory.
//
// Counters: pair (CPU seconds per malloc + free pair, shown as e.g. 46ns), frag (the heap's 1 -
// largest free run / free bytes, at the end of the run or at the trace's peak), overhead (1 - live
// requested bytes / footprint: for the heap, the highest end offset in use; for jemalloc, the
// arena's active pages; for glibc, mallinfo2's arena + mmapped bytes).
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <malloc.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "alloc/test_device.hpp"
#include "memweave/alloc/device_heap.hpp"
#include "memweave/alloc/trace.hpp"
#include "memweave/core/log.hpp"

namespace {

using namespace memweave;

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;
constexpr std::size_t batch = 64;  // pairs per benchmark iteration (workloads a)

// ---------------------------------------------------------------- jemalloc, dlopen'ed

#ifndef MEMWEAVE_JEMALLOC_SONAME
#define MEMWEAVE_JEMALLOC_SONAME "libjemalloc.so.2"
#endif

// Flags from jemalloc.h (not included: its malloc/free declarations are not wanted here).
constexpr int mallocx_arena(unsigned a) {
  return static_cast<int>((a + 1) << 20);
}
constexpr int mallocx_tcache_none = (-1 + 2) << 8;

struct jemalloc_api {
  void* (*mallocx)(std::size_t, int) = nullptr;
  void (*dallocx)(void*, int) = nullptr;
  int (*mallctl)(const char*, void*, std::size_t*, void*, std::size_t) = nullptr;
  unsigned arena = 0;
  std::string error;

  static jemalloc_api& get() {
    static jemalloc_api api = load();
    return api;
  }

  // Active bytes of our arena (pages in active extents).
  std::size_t active_bytes() const {
    std::uint64_t epoch = 1;
    std::size_t sz = sizeof(epoch);
    mallctl("epoch", &epoch, &sz, &epoch, sz);
    std::size_t pactive = 0;
    sz = sizeof(pactive);
    const std::string name = "stats.arenas." + std::to_string(arena) + ".pactive";
    if (mallctl(name.c_str(), &pactive, &sz, nullptr, 0) != 0) return 0;
    return pactive * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  }

 private:
  static jemalloc_api load() {
    jemalloc_api api;
    void* lib = ::dlopen(MEMWEAVE_JEMALLOC_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      api.error = std::string("dlopen ") + MEMWEAVE_JEMALLOC_SONAME + ": " + ::dlerror();
      return api;
    }
    api.mallocx = reinterpret_cast<void* (*)(std::size_t, int)>(::dlsym(lib, "mallocx"));
    api.dallocx = reinterpret_cast<void (*)(void*, int)>(::dlsym(lib, "dallocx"));
    api.mallctl = reinterpret_cast<int (*)(const char*, void*, std::size_t*, void*, std::size_t)>(
        ::dlsym(lib, "mallctl"));
    if (!api.mallocx || !api.dallocx || !api.mallctl) {
      api.error = "libjemalloc lacks mallocx/dallocx/mallctl";
      api.mallocx = nullptr;
      return api;
    }
    std::size_t sz = sizeof(api.arena);
    if (api.mallctl("arenas.create", &api.arena, &sz, nullptr, 0) != 0) {
      api.error = "mallctl arenas.create failed";
      api.mallocx = nullptr;
    }
    return api;
  }
};

// ---------------------------------------------------------------- allocators under test

enum class which { best, first, jemalloc, glibc };

// One allocator, set up for one benchmark run.
class allocator_under_test {
 public:
  allocator_under_test(which w, std::size_t heap_pool) : which_(w) {
    if (w == which::best || w == which::first) {
      dev_ =
          std::make_unique<test::test_device>(heap_pool, test::test_device::backing::address_only);
      heap_options o;
      o.pool_bytes = heap_pool;
      o.fit = w == which::best ? fit_policy::best : fit_policy::first;
      heap_ = std::make_unique<device_heap>(*dev_, o);
    } else if (w == which::jemalloc) {
      je_ = &jemalloc_api::get();
      flags_ = mallocx_arena(je_->arena) | mallocx_tcache_none;
    }
  }

  // Why this allocator cannot run, or empty.
  std::string unavailable() const {
    if (which_ == which::jemalloc && je_->mallocx == nullptr) return je_->error;
    return {};
  }

  void* allocate(std::size_t n) {
    switch (which_) {
      case which::best:
      case which::first:
        return heap_->try_allocate(n);
      case which::jemalloc:
        return je_->mallocx(n, flags_);
      case which::glibc:
        return std::malloc(n);
    }
    return nullptr;
  }

  void free(void* p) {
    switch (which_) {
      case which::best:
      case which::first:
        heap_->deallocate(p);
        return;
      case which::jemalloc:
        if (p != nullptr) je_->dallocx(p, flags_);  // dallocx(nullptr) is undefined
        return;
      case which::glibc:
        std::free(p);
        return;
    }
  }

  // Footprint of what is live now (see the counters above); `live` are the live pointers.
  std::size_t footprint(const std::vector<void*>& live) const {
    switch (which_) {
      case which::best:
      case which::first: {
        std::size_t top = 0;
        for (void* p : live) {
          if (p != nullptr) top = std::max(top, heap_->offset_of(p) + heap_->allocation_size(p));
        }
        return top;
      }
      case which::jemalloc:
        return je_->active_bytes();
      case which::glibc: {
        const struct mallinfo2 mi = ::mallinfo2();
        return mi.arena + mi.hblkhd;
      }
    }
    return 0;
  }

  // The heap's fragmentation, or -1 for the others.
  double heap_fragmentation() const { return heap_ ? heap_->stats().fragmentation : -1.0; }

 private:
  which which_;
  std::unique_ptr<test::test_device> dev_;
  std::unique_ptr<device_heap> heap_;
  jemalloc_api* je_ = nullptr;
  int flags_ = 0;
};

void set_memory_counters(benchmark::State& state, const allocator_under_test& a,
                         const std::vector<void*>& live, std::size_t live_requested) {
  const std::size_t fp = a.footprint(live);
  state.counters["overhead"] =
      fp == 0 ? 0.0 : 1.0 - static_cast<double>(live_requested) / static_cast<double>(fp);
  const double frag = a.heap_fragmentation();
  if (frag >= 0.0) state.counters["frag"] = frag;
}

// ---------------------------------------------------------------- (a) size mixes

enum class lifetime { stack, random };

// Sizes log-uniform in [1 KiB, 512 MiB]; deterministic.
const std::vector<std::size_t>& tensor_sizes() {
  static const std::vector<std::size_t> sizes = [] {
    std::mt19937_64 rng(2024);
    std::uniform_real_distribution<double> u(std::log(1.0 * KiB), std::log(512.0 * MiB));
    std::vector<std::size_t> v(1 << 16);
    for (auto& s : v) s = static_cast<std::size_t>(std::exp(u(rng)));
    return v;
  }();
  return sizes;
}

// Expected size of the mix, (b - a) / ln(b / a): about 39 MiB.
double mean_tensor_bytes() {
  return (512.0 * MiB - 1.0 * KiB) / std::log(512.0 * MiB / KiB);
}

void BM_alloc_size_mix(benchmark::State& state, which w, lifetime life) {
  const auto live_target = static_cast<std::size_t>(state.range(0));
  // Room for the live set at its expected size with a wide margin for fragmentation.
  const auto pool = static_cast<std::size_t>(3.0 * mean_tensor_bytes() * live_target) + 4 * GiB;
  allocator_under_test a(w, pool);
  if (auto why = a.unavailable(); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  const auto& sizes = tensor_sizes();
  const std::size_t mask = sizes.size() - 1;
  std::vector<std::uint32_t> victims(1 << 16);
  std::mt19937_64 rng(99);
  for (auto& v : victims) v = static_cast<std::uint32_t>(rng() % live_target);

  std::vector<void*> live(live_target);
  std::vector<std::size_t> live_bytes(live_target);
  std::size_t live_requested = 0, next = 0, failures = 0;
  for (std::size_t i = 0; i < live_target; ++i) {
    live_bytes[i] = sizes[next++ & mask];
    live[i] = a.allocate(live_bytes[i]);
    live_requested += live_bytes[i];
  }
  std::size_t pairs = 0, v = 0;
  const std::size_t depth = std::min<std::size_t>(batch, live_target);
  for (auto _ : state) {
    if (life == lifetime::random) {
      for (std::size_t k = 0; k < batch; ++k) {
        const std::size_t i = victims[v++ & mask];
        a.free(live[i]);
        live_requested -= live_bytes[i];
        live_bytes[i] = sizes[next++ & mask];
        live[i] = a.allocate(live_bytes[i]);
        live_requested += live_bytes[i];
        failures += live[i] == nullptr;
      }
      pairs += batch;
    } else {
      // LIFO: free the newest `depth` (as a backward pass does), then allocate as many
      // (the next forward pass), with fresh sizes.
      for (std::size_t k = live_target; k-- > live_target - depth;) {
        a.free(live[k]);
        live_requested -= live_bytes[k];
      }
      for (std::size_t k = live_target - depth; k < live_target; ++k) {
        live_bytes[k] = sizes[next++ & mask];
        live[k] = a.allocate(live_bytes[k]);
        live_requested += live_bytes[k];
        failures += live[k] == nullptr;
      }
      pairs += depth;
    }
  }
  // Seconds (CPU) per pair: shown as e.g. "46.3ns".
  state.counters["pair"] = benchmark::Counter(
      static_cast<double>(pairs), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["failures"] = static_cast<double>(failures);
  set_memory_counters(state, a, live, live_requested);
  for (void* p : live) {
    if (p != nullptr) a.free(p);
  }
}

#define MW_SIZE_MIX(name, w, life) \
  BENCHMARK_CAPTURE(BM_alloc_size_mix, name, w, life)->Arg(100)->Arg(1000)->Arg(10000)

MW_SIZE_MIX(best_fit_stack, which::best, lifetime::stack);
MW_SIZE_MIX(first_fit_stack, which::first, lifetime::stack);
MW_SIZE_MIX(jemalloc_stack, which::jemalloc, lifetime::stack);
MW_SIZE_MIX(glibc_stack, which::glibc, lifetime::stack);
MW_SIZE_MIX(best_fit_random, which::best, lifetime::random);
MW_SIZE_MIX(first_fit_random, which::first, lifetime::random);
MW_SIZE_MIX(jemalloc_random, which::jemalloc, lifetime::random);
MW_SIZE_MIX(glibc_random, which::glibc, lifetime::random);

// ---------------------------------------------------------------- (b) replayed trace

// A synthetic training trace compiled to slots: op i allocates or frees slot[i].
struct compiled_trace {
  std::vector<std::uint8_t> is_alloc;
  std::vector<std::uint32_t> slot;
  std::vector<std::size_t> bytes;
  std::size_t slots = 0;
  std::size_t peak_at = 0;  // op at which live requested bytes first peak
  std::size_t peak_requested = 0;
  std::size_t peak_live = 0;  // live allocations at the peak
  std::size_t pairs = 0;
};

const compiled_trace& training_trace(std::size_t layers) {
  static std::map<std::size_t, compiled_trace> cache;
  auto it = cache.find(layers);
  if (it != cache.end()) return it->second;
  synthetic_trace_options o;
  o.layers = layers;
  o.iterations = 3;
  o.batch = 32;
  const auto events = synthetic_trace(o);
  compiled_trace t;
  std::unordered_map<std::uint64_t, std::uint32_t> live;
  std::size_t requested = 0;
  for (const auto& e : events) {
    if (e.op == trace_op::alloc) {
      const auto s = static_cast<std::uint32_t>(t.slots++);
      live[e.offset] = s;
      t.is_alloc.push_back(1);
      t.slot.push_back(s);
      t.bytes.push_back(e.bytes);
      requested += e.bytes;
      if (requested > t.peak_requested) {
        t.peak_requested = requested;
        t.peak_at = t.slot.size() - 1;
        t.peak_live = live.size();
      }
    } else {
      const auto s = live.at(e.offset);
      live.erase(e.offset);
      t.is_alloc.push_back(0);
      t.slot.push_back(s);
      t.bytes.push_back(e.bytes);
      requested -= e.bytes;
      ++t.pairs;
    }
  }
  return cache.emplace(layers, std::move(t)).first->second;
}

void BM_alloc_trace_replay(benchmark::State& state, which w) {
  const compiled_trace& t = training_trace(static_cast<std::size_t>(state.range(0)));
  allocator_under_test a(w, 2 * t.peak_requested + 1 * GiB);
  if (auto why = a.unavailable(); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  std::vector<void*> ptr(t.slots, nullptr);
  std::size_t failures = 0, replays = 0;
  bool measured = false;
  for (auto _ : state) {
    for (std::size_t i = 0; i < t.slot.size(); ++i) {
      const std::uint32_t s = t.slot[i];
      if (t.is_alloc[i]) {
        ptr[s] = a.allocate(t.bytes[i]);
        failures += ptr[s] == nullptr;
        if (i == t.peak_at && !measured) {  // once: the footprint at the trace's peak
          measured = true;
          state.PauseTiming();
          set_memory_counters(state, a, ptr, t.peak_requested);
          state.ResumeTiming();
        }
      } else if (ptr[s] != nullptr) {
        a.free(ptr[s]);
        ptr[s] = nullptr;
      }
    }
    ++replays;
  }
  state.counters["pair"] =
      benchmark::Counter(static_cast<double>(replays * t.pairs),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["failures"] = static_cast<double>(failures);
  state.counters["peak_live"] = static_cast<double>(t.peak_live);
}

#define MW_TRACE(name, w)                           \
  BENCHMARK_CAPTURE(BM_alloc_trace_replay, name, w) \
      ->Arg(250)                                    \
      ->Arg(4000)                                   \
      ->Unit(benchmark::kMicrosecond)

MW_TRACE(best_fit, which::best);
MW_TRACE(first_fit, which::first);
MW_TRACE(jemalloc, which::jemalloc);
MW_TRACE(glibc, which::glibc);

}  // namespace

// jemalloc's thread-locals use the initial-exec TLS model, which dlopen can only place in
// glibc's small static TLS surplus ("cannot allocate memory in static TLS block"). The
// surplus is sized at process start from GLIBC_TUNABLES, so set it and start again.
static void ensure_static_tls_for_jemalloc(char** argv) {
  constexpr const char* tunable = "glibc.rtld.optional_static_tls=16384";
  const char* current = std::getenv("GLIBC_TUNABLES");
  if (current != nullptr && std::strstr(current, "optional_static_tls") != nullptr) return;
  std::string value = current != nullptr && *current != '\0' ? std::string(current) + ":" + tunable
                                                             : std::string(tunable);
  ::setenv("GLIBC_TUNABLES", value.c_str(), 1);
  ::execv("/proc/self/exe", argv);
  // If exec fails, go on: the jemalloc cases report the dlopen error.
}

int main(int argc, char** argv) {
  ensure_static_tls_for_jemalloc(argv);
  memweave::set_log_level(memweave::log_level::error);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
