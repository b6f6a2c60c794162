// The tensor cache driven by an executor-like thread while a background transfer thread
// inserts, releases and forgets its own tensors; and an eviction callback that blocks while
// another thread uses the cache. Run under ThreadSanitizer (label concurrent).
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <map>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cache/tensor_cache_harness.hpp"
#include "memweave/cache/tensor_cache.hpp"
#include "memweave/core/error.hpp"

namespace memweave {
namespace {

using test::cache_harness;
using test::kib;

constexpr tensor_key background_base = 1000;  // keys of the background thread's tensors

TEST(tensor_cache_concurrency, background_inserts_and_releases_while_main_thread_evicts) {
  cache_harness h(48 * kib);
  // Main-thread tensors divisible by 13 are refused (kept); background ones always go.
  h.decide = [](tensor_key k, void*, std::size_t) {
    if (k % 16 == 3) std::this_thread::yield();  // widen the unlocked window
    return k >= background_base || k % 13 != 0;
  };

  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> gone_before_release{0};  // background tensors found evicted
  std::atomic<std::uint64_t> inserted{0};
  std::thread background([&] {
    std::mt19937 rng(7);
    std::map<tensor_key, bool> mine;  // key -> believed resident
    while (!stop.load(std::memory_order_relaxed)) {
      const tensor_key k = background_base + rng() % 64;
      bool& have = mine[k];
      if (!have) {
        void* p = h.heap.try_allocate((1 + rng() % 2) * kib);
        if (p == nullptr) {
          std::this_thread::yield();
          continue;
        }
        h.cache.insert(k, p, kib);
        have = true;
        inserted.fetch_add(1, std::memory_order_relaxed);
      } else if (rng() % 2 == 0) {
        try {
          h.cache.release(k);  // deferred if its eviction is running
        } catch (const std::logic_error&) {
          gone_before_release.fetch_add(1, std::memory_order_relaxed);  // evicted already
        }
        have = false;
      } else {
        try {
          void* p = h.cache.forget(k);
          EXPECT_EQ(h.heap.deallocate(p), status::success);
        } catch (const std::logic_error&) {
          // Evicted, or being evicted: then release() forgets it at once.
          try {
            h.cache.release(k);
          } catch (const std::logic_error&) {
            gone_before_release.fetch_add(1, std::memory_order_relaxed);
          }
        }
        have = false;
      }
    }
    for (const auto& [k, have] : mine) {
      if (!have) continue;
      try {
        h.cache.release(k);
      } catch (const std::logic_error&) {
        gone_before_release.fetch_add(1, std::memory_order_relaxed);
      }
    }
  });

  std::mt19937 rng(3);
  std::uint64_t allocated = 0, out_of_memory_count = 0;
  // At least 20000 operations, and on until the background thread has done its share too (on
  // a loaded machine it may barely run at first): the overlap, not the timing, is the point.
  for (int i = 0; i < 20000 || inserted.load() <= 100; ++i) {
    const tensor_key k = rng() % 96;
    if (!h.cache.check(k)) {
      try {
        h.cache.allocate(k, (1 + rng() % 3) * kib);
        ++allocated;
      } catch (const out_of_memory&) {
        ++out_of_memory_count;
        continue;
      }
    }
    h.cache.lock(k);
    EXPECT_NE(h.cache.ptr(k), nullptr);
    EXPECT_TRUE(h.cache.locked(k));
    h.cache.unlock(k);
    if (rng() % 8 == 0) h.cache.release(k);
  }
  stop.store(true);
  background.join();

  h.cache.check_invariants();
  h.heap.check_invariants();
  const tensor_cache_stats s = h.cache.stats();
  std::uint64_t background_evictions = 0;
  for (tensor_key k : h.evicted_keys()) background_evictions += k >= background_base;
  EXPECT_EQ(s.evictions, h.evicted_keys().size());
  EXPECT_EQ(s.allocations, allocated);
  EXPECT_EQ(s.failed_allocations, out_of_memory_count);
  EXPECT_GT(s.evictions, 1000u);
  EXPECT_GT(inserted.load(), 100u);
  // A background tensor can only have vanished under its owner through an eviction.
  EXPECT_LE(gone_before_release.load(), background_evictions);
  // Only main-thread tensors remain; the heap holds exactly their blocks.
  std::size_t held = 0;
  for (tensor_key k = 0; k < 96; ++k) {
    if (h.cache.resident(k)) held += h.heap.allocation_size(h.cache.ptr(k));
  }
  for (tensor_key k = background_base; k < background_base + 64; ++k) {
    EXPECT_FALSE(h.cache.resident(k)) << k;
  }
  EXPECT_EQ(h.heap.stats().bytes_in_use, held);
}

TEST(tensor_cache_concurrency, callback_may_block_while_another_thread_uses_the_cache) {
  cache_harness h(4 * kib);
  for (tensor_key k = 0; k < 4; ++k) h.cache.allocate(k, kib);
  std::promise<void> other_done;
  std::future<void> other_done_f = other_done.get_future();
  std::thread other;
  h.decide = [&](tensor_key victim, void*, std::size_t) {
    EXPECT_EQ(victim, 0u);
    // Another thread works on the cache while this callback "waits for its copy".
    other = std::thread([&] {
      EXPECT_TRUE(h.cache.check(1));
      h.cache.release(2);
      void* p = h.heap.try_allocate(kib);
      EXPECT_NE(p, nullptr);
      h.cache.insert(10, p, kib);
      h.cache.release(0);  // the victim died: freed when this callback returns
      EXPECT_THROW(h.cache.lock(0), std::logic_error);
      other_done.set_value();
    });
    other_done_f.wait();
    return false;  // refused, but released meanwhile: freed anyway
  };
  void* p = h.cache.allocate(4, kib);
  other.join();
  EXPECT_NE(p, nullptr);
  EXPECT_FALSE(h.cache.resident(0));
  EXPECT_FALSE(h.cache.resident(2));
  EXPECT_EQ(h.cache.lru_order(), (std::vector<tensor_key>{4, 10, 1, 3}));
  EXPECT_EQ(h.cache.stats().evictions, 0u);
  EXPECT_EQ(h.refused_keys(), (std::vector<tensor_key>{0}));
  h.cache.check_invariants();
}

}  // namespace
}  // namespace memweave
