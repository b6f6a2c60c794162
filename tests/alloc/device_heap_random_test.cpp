// Long random sequences of allocations, frees and rejected frees, under both fit policies,
// against a reference model, checked after EVERY step: no overlap, inside the arenas,
// block alignment, full coalescing (no two adjacent free runs), the placement the policy
// promises (best: the smallest free run that fits; first: the lowest-address one), and
// exact statistics. device_heap::check_invariants() checks the heap's own indexes too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "alloc/test_device.hpp"
#include "memweave/alloc/device_heap.hpp"
#include "memweave/core/log.hpp"

namespace memweave {
namespace {

using test::test_device;

struct scenario {
  std::string name;
  fit_policy fit;
  std::size_t block;
  std::size_t pool;
  std::size_t grow;          // 0 = no growth
  std::size_t device_bytes;  // capacity: bounds growth
  test_device::backing backing;
  std::size_t max_request;  // requests are log-uniform in [1, max_request]
  int steps;
};

std::ostream& operator<<(std::ostream& os, const scenario& s) {
  return os << s.name;
}

struct live_alloc {
  void* p;
  std::size_t requested;
  std::size_t rounded;
};

class device_heap_random_test : public ::testing::TestWithParam<scenario> {};

TEST_P(device_heap_random_test, every_step_keeps_placement_coalescing_and_statistics_exact) {
  const scenario sc = GetParam();
  set_log_level(log_level::error);  // rejected frees are expected here
  test_device dev(sc.device_bytes, sc.backing);
  heap_options o;
  o.pool_bytes = sc.pool;
  o.block_bytes = sc.block;
  o.fit = sc.fit;
  o.grow_bytes = sc.grow;
  device_heap h(dev, o);
  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const double log_max = std::log(static_cast<double>(sc.max_request));

  std::map<std::size_t, live_alloc> model;  // offset -> allocation
  std::vector<void*> freed;                 // recently freed pointers, for double frees
  std::uint64_t allocations = 0, frees = 0, failures = 0, invalid = 0;
  std::size_t in_use = 0, peak = 0;

  auto check_everything = [&](int step) {
    SCOPED_TRACE("step " + std::to_string(step));
    h.check_invariants();
    const heap_stats s = h.stats();
    const auto runs = h.runs();
    // Runs tile the address space; allocated runs are exactly the model's.
    std::size_t at = 0, free_total = 0, largest = 0, free_runs = 0, arena_end = 0;
    std::size_t current_arena = SIZE_MAX;
    bool prev_free = false;
    auto m = model.begin();
    for (const heap_run& r : runs) {
      ASSERT_EQ(r.offset, at);
      ASSERT_EQ(r.offset % sc.block, 0u);
      ASSERT_EQ(r.bytes % sc.block, 0u);
      ASSERT_GT(r.bytes, 0u);
      if (r.arena != current_arena) {
        current_arena = r.arena;
        prev_free = false;  // runs of different arenas never merge
      }
      if (r.free) {
        ASSERT_FALSE(prev_free) << "two adjacent free runs at offset " << r.offset;
        free_total += r.bytes;
        largest = std::max(largest, r.bytes);
        ++free_runs;
      } else {
        ASSERT_NE(m, model.end()) << "heap has an allocation the model does not";
        ASSERT_EQ(m->first, r.offset);
        ASSERT_EQ(m->second.rounded, r.bytes);
        ASSERT_EQ(m->second.requested, r.requested);
        ++m;
      }
      prev_free = r.free;
      at += r.bytes;
      arena_end = at;
    }
    ASSERT_EQ(m, model.end()) << "model has an allocation the heap does not";
    ASSERT_EQ(arena_end, s.bytes_reserved);
    // No overlap and inside the address space, from the model's side.
    std::size_t end = 0;
    for (const auto& [off, a] : model) {
      ASSERT_GE(off, end);
      end = off + a.rounded;
      ASSERT_LE(end, s.bytes_reserved);
      ASSERT_TRUE(h.owns(a.p));
      ASSERT_EQ(h.offset_of(a.p), off);
      ASSERT_EQ(h.allocation_size(a.p), a.rounded);
    }
    // Statistics exact.
    ASSERT_EQ(s.bytes_in_use, in_use);
    ASSERT_EQ(s.peak_bytes_in_use, peak);
    ASSERT_EQ(s.free_bytes, free_total);
    ASSERT_EQ(s.free_bytes + s.bytes_in_use, s.bytes_reserved);
    ASSERT_EQ(s.largest_free_run, largest);
    ASSERT_EQ(s.free_runs, free_runs);
    ASSERT_EQ(s.live_allocations, model.size());
    ASSERT_EQ(s.allocations, allocations);
    ASSERT_EQ(s.frees, frees);
    ASSERT_EQ(s.failures, failures);
    ASSERT_EQ(s.invalid_frees, invalid);
    const double frag = free_total == 0 ? 0.0 : 1.0 - double(largest) / double(free_total);
    ASSERT_DOUBLE_EQ(s.fragmentation, frag);
  };

  double alloc_bias = 0.6;
  for (int step = 0; step < sc.steps; ++step) {
    if (step % 500 == 0) alloc_bias = 0.35 + 0.4 * unit(rng);  // phases of growth and shrink
    const double dice = unit(rng);
    if (dice < 0.03 && !model.empty()) {
      // A rejected free: interior, double or foreign.
      auto it = std::next(model.begin(), static_cast<long>(rng() % model.size()));
      void* bad = nullptr;
      const int kind = static_cast<int>(rng() % 3);
      if (kind == 0 && it->second.rounded > 1) {
        bad = static_cast<char*>(it->second.p) + 1 + rng() % (it->second.rounded - 1);
      } else if (kind == 1 && !freed.empty()) {
        bad = freed[rng() % freed.size()];
        if (h.allocation_size(bad) != 0) bad = nullptr;  // reused since: not a double free
      } else {
        bad = &alloc_bias;
      }
      if (bad == nullptr) continue;
      ASSERT_EQ(h.deallocate(bad), status::invalid_device_pointer);
      ++invalid;
    } else if (dice < 0.03 + alloc_bias || model.empty()) {
      const auto bytes = static_cast<std::size_t>(std::exp(unit(rng) * log_max));
      const std::size_t rounded = (bytes + sc.block - 1) / sc.block * sc.block;
      // What the policy promises, from the runs before the call.
      const auto before = h.runs();
      const std::size_t arenas_before = h.stats().arenas;
      const std::size_t reserved_before = h.stats().bytes_reserved;
      std::size_t best_len = SIZE_MAX, first_off = SIZE_MAX;
      for (const heap_run& r : before) {
        if (!r.free || r.bytes < rounded) continue;
        best_len = std::min(best_len, r.bytes);
        first_off = std::min(first_off, r.offset);
      }
      void* p = h.try_allocate(bytes);
      if (p == nullptr) {
        ASSERT_EQ(best_len, SIZE_MAX)
            << "failed with a free run of " << best_len << " for " << rounded;
        ASSERT_EQ(h.stats().arenas, arenas_before);
        ++failures;
      } else {
        const std::size_t off = h.offset_of(p);
        ASSERT_EQ(off % sc.block, 0u);
        ASSERT_EQ(h.allocation_size(p), rounded);
        if (best_len == SIZE_MAX) {
          // Nothing fitted: only growth can have served it, from a new arena's start.
          ASSERT_NE(sc.grow, 0u);
          ASSERT_EQ(h.stats().arenas, arenas_before + 1);
          ASSERT_EQ(off, reserved_before);
        } else {
          ASSERT_EQ(h.stats().arenas, arenas_before);
          // The run it came from starts at `off`.
          auto r = std::find_if(before.begin(), before.end(),
                                [&](const heap_run& x) { return x.offset == off; });
          ASSERT_NE(r, before.end());
          ASSERT_TRUE(r->free);
          if (sc.fit == fit_policy::best) {
            ASSERT_EQ(r->bytes, best_len) << "not the smallest run that fits";
          } else {
            ASSERT_EQ(off, first_off) << "not the lowest-address run that fits";
          }
        }
        model[off] = {p, bytes, rounded};
        ++allocations;
        in_use += rounded;
        peak = std::max(peak, in_use);
      }
    } else {
      auto it = std::next(model.begin(), static_cast<long>(rng() % model.size()));
      ASSERT_EQ(h.deallocate(it->second.p), status::success);
      in_use -= it->second.rounded;
      freed.push_back(it->second.p);
      if (freed.size() > 64) freed.erase(freed.begin());
      model.erase(it);
      ++frees;
    }
    if (step % 997 == 0) {  // now and then, a peak reset
      h.reset_peak();
      peak = in_use;
    }
    check_everything(step);
    if (::testing::Test::HasFatalFailure()) return;
  }
  // Free everything: one free run per arena remains.
  for (const auto& [off, a] : model) ASSERT_EQ(h.deallocate(a.p), status::success);
  frees += model.size();
  in_use = 0;
  model.clear();
  check_everything(sc.steps);
  EXPECT_EQ(h.runs().size(), h.stats().arenas);
}

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;

INSTANTIATE_TEST_SUITE_P(policies, device_heap_random_test,
                         ::testing::Values(
                             // Small arenas: exact bins only, frequent failures.
                             scenario{"best_small", fit_policy::best, 1024, 4 * MiB, 0, 64 * MiB,
                                      test_device::backing::host, 256 * KiB, 4000},
                             scenario{"first_small", fit_policy::first, 1024, 4 * MiB, 0, 64 * MiB,
                                      test_device::backing::host, 256 * KiB, 4000},
                             // A 1 GiB arena of 256-byte blocks: runs of >= 2^18 blocks (64 MiB)
                             // take the long-run index.
                             scenario{"best_large_runs", fit_policy::best, 256, 1 * GiB, 0, 2 * GiB,
                                      test_device::backing::address_only, 200 * MiB, 2000},
                             scenario{"first_large_runs", fit_policy::first, 256, 1 * GiB, 0,
                                      2 * GiB, test_device::backing::address_only, 200 * MiB, 2000},
                             // Growth, until the device refuses.
                             scenario{"best_growth", fit_policy::best, 512, 1 * MiB, 256 * KiB,
                                      6 * MiB, test_device::backing::host, 300 * KiB, 3000},
                             scenario{"first_growth", fit_policy::first, 512, 1 * MiB, 256 * KiB,
                                      6 * MiB, test_device::backing::host, 300 * KiB, 3000}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace memweave
