// The tensor cache's behaviour one operation at a time: LRU order, locks, the eviction
// callback's answers, out-of-memory reports, release/forget/insert, statistics and misuse.
#include "memweave/cache/tensor_cache.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "cache/tensor_cache_harness.hpp"
#include "memweave/core/error.hpp"

namespace memweave {
namespace {

using test::cache_harness;
using test::kib;
using keys = std::vector<tensor_key>;

// Fills a heap of `n` blocks with tensors 0..n-1 of one block each, allocated in order.
void fill(tensor_cache& cache, tensor_key n) {
  for (tensor_key k = 0; k < n; ++k) ASSERT_NE(cache.allocate(k, kib), nullptr);
}

TEST(tensor_cache, allocate_places_tensors_at_lru_front) {
  cache_harness h(8 * kib);
  fill(h.cache, 3);
  EXPECT_EQ(h.cache.lru_order(), (keys{2, 1, 0}));
  EXPECT_EQ(h.cache.resident_count(), 3u);
  EXPECT_EQ(h.cache.bytes_resident(), 3 * kib);
  EXPECT_TRUE(h.cache.resident(1));
  EXPECT_FALSE(h.cache.locked(1));
  EXPECT_NE(h.cache.ptr(1), nullptr);
  EXPECT_EQ(h.cache.ptr(7), nullptr);
  EXPECT_EQ(h.cache.ptr(tensor_cache::max_keys + 5), nullptr);
  h.cache.check_invariants();
}

TEST(tensor_cache, check_hit_moves_tensor_to_front_and_miss_changes_nothing) {
  cache_harness h(8 * kib);
  fill(h.cache, 3);
  EXPECT_TRUE(h.cache.check(0));
  EXPECT_EQ(h.cache.lru_order(), (keys{0, 2, 1}));
  EXPECT_TRUE(h.cache.check(0));  // already at the front
  EXPECT_EQ(h.cache.lru_order(), (keys{0, 2, 1}));
  EXPECT_FALSE(h.cache.check(5));
  EXPECT_FALSE(h.cache.check(100000));  // beyond any slot
  EXPECT_EQ(h.cache.lru_order(), (keys{0, 2, 1}));
  h.cache.check_invariants();
}

TEST(tensor_cache, evicts_least_recently_used_first) {
  cache_harness h(8 * kib);
  fill(h.cache, 8);
  EXPECT_TRUE(h.evicted_keys().empty());
  void* p = h.cache.allocate(8, kib);
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(h.evicted_keys(), (keys{0}));
  EXPECT_FALSE(h.cache.resident(0));
  EXPECT_EQ(h.cache.ptr(8), p);
  h.cache.allocate(9, kib);
  EXPECT_EQ(h.evicted_keys(), (keys{0, 1}));
  EXPECT_EQ(h.cache.lru_order(), (keys{9, 8, 7, 6, 5, 4, 3, 2}));
  h.cache.check_invariants();
}

TEST(tensor_cache, eviction_callback_receives_key_pointer_and_bytes) {
  cache_harness h(4 * kib);
  void* p0 = h.cache.allocate(0, 2 * kib - 100);
  h.cache.allocate(1, 2 * kib);
  tensor_key seen_key = 99;
  void* seen_ptr = nullptr;
  std::size_t seen_bytes = 0;
  h.decide = [&](tensor_key k, void* p, std::size_t b) {
    seen_key = k;
    seen_ptr = p;
    seen_bytes = b;
    return true;
  };
  h.cache.allocate(2, kib);
  EXPECT_EQ(seen_key, 0u);
  EXPECT_EQ(seen_ptr, p0);
  EXPECT_EQ(seen_bytes, 2 * kib - 100);
}

TEST(tensor_cache, check_moves_to_front_so_next_eviction_takes_another) {
  cache_harness h(8 * kib);
  fill(h.cache, 8);
  EXPECT_TRUE(h.cache.check(0));
  h.cache.allocate(8, kib);
  EXPECT_EQ(h.evicted_keys(), (keys{1}));
  EXPECT_TRUE(h.cache.resident(0));
}

TEST(tensor_cache, locked_tensor_is_never_evicted_even_at_lru_tail) {
  cache_harness h(8 * kib);
  fill(h.cache, 8);
  h.cache.lock(0);
  EXPECT_TRUE(h.cache.locked(0));
  EXPECT_EQ(h.cache.lru_order(), (keys{7, 6, 5, 4, 3, 2, 1}));
  for (tensor_key k = 8; k < 15; ++k) h.cache.allocate(k, kib);  // evicts 1..7
  EXPECT_EQ(h.evicted_keys(), (keys{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_TRUE(h.cache.resident(0));
  EXPECT_TRUE(h.cache.check(0));  // a hit on a locked tensor does not put it in the list
  EXPECT_EQ(h.cache.lru_order(), (keys{14, 13, 12, 11, 10, 9, 8}));
  h.cache.check_invariants();
}

TEST(tensor_cache, unlock_returns_tensor_to_lru_front_after_its_last_lock) {
  cache_harness h(8 * kib);
  fill(h.cache, 4);
  h.cache.lock(0);
  h.cache.lock(0);
  h.cache.unlock(0);
  EXPECT_TRUE(h.cache.locked(0));
  EXPECT_EQ(h.cache.lru_order(), (keys{3, 2, 1}));
  h.cache.unlock(0);
  EXPECT_FALSE(h.cache.locked(0));
  EXPECT_EQ(h.cache.lru_order(), (keys{0, 3, 2, 1}));
  h.cache.check_invariants();
}

TEST(tensor_cache, callback_refusal_skips_to_next_towards_front) {
  cache_harness h(8 * kib);
  fill(h.cache, 8);
  h.decide = [](tensor_key k, void*, std::size_t) { return k != 0 && k != 1; };
  h.cache.allocate(8, kib);
  EXPECT_EQ(h.refused_keys(), (keys{0, 1}));
  EXPECT_EQ(h.evicted_keys(), (keys{2}));
  // The refused tensors keep their places at the LRU end.
  EXPECT_EQ(h.cache.lru_order(), (keys{8, 7, 6, 5, 4, 3, 1, 0}));
  // A later allocation asks again, from the end.
  h.decide = {};
  h.cache.allocate(9, kib);
  EXPECT_EQ(h.evicted_keys(), (keys{2, 0}));
  h.cache.check_invariants();
}

TEST(tensor_cache, evicts_until_the_allocation_fits_not_until_enough_bytes_are_freed) {
  // Tensors 0..7 in address order; LRU end 0, 2, 4, 6: freeing those leaves 4 KiB free in
  // four separate 1 KiB runs, so a 2 KiB tensor fits only once 1 goes too (0-1-2 merge).
  cache_harness h(8 * kib);
  fill(h.cache, 8);
  for (tensor_key k : {1, 3, 5, 7}) h.cache.check(k);
  h.cache.allocate(8, 2 * kib);
  EXPECT_EQ(h.evicted_keys(), (keys{0, 2, 4, 6, 1}));
  EXPECT_EQ(h.cache.bytes_resident(), 5 * kib);
  h.cache.check_invariants();
}

TEST(tensor_cache, evicts_several_small_tensors_for_a_large_one) {
  cache_harness h(8 * kib);
  fill(h.cache, 8);
  h.cache.allocate(8, 3 * kib);
  EXPECT_EQ(h.evicted_keys(), (keys{0, 1, 2}));
  EXPECT_EQ(h.heap.stats().bytes_in_use, 8 * kib);
}

TEST(tensor_cache, all_locked_throws_out_of_memory_listing_locked_tensors) {
  cache_harness h(4 * kib, /*with_names=*/true);
  h.cache.allocate(0, kib);
  h.cache.allocate(1, 2 * kib);
  h.cache.allocate(2, kib);
  for (tensor_key k : {0, 1, 2}) h.cache.lock(k);
  h.cache.lock(1);
  try {
    h.cache.allocate(3, kib);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.requested(), kib);
    EXPECT_EQ(e.free_bytes(), 0u);
    EXPECT_EQ(e.largest_free_run(), 0u);
    EXPECT_NE(m.find("t3 (tensor 3)"), std::string::npos) << m;
    EXPECT_NE(m.find("3 locked tensors hold 4.00 KiB"), std::string::npos) << m;
    EXPECT_NE(m.find("t0 (tensor 0) 1.00 KiB"), std::string::npos) << m;
    EXPECT_NE(m.find("t1 (tensor 1) 2.00 KiB (2 locks)"), std::string::npos) << m;
    EXPECT_NE(m.find("t2 (tensor 2) 1.00 KiB"), std::string::npos) << m;
    EXPECT_NE(m.find("device heap: cannot allocate"), std::string::npos) << m;
  }
  EXPECT_TRUE(h.evicted_keys().empty());
  EXPECT_TRUE(h.refused_keys().empty());
  EXPECT_EQ(h.cache.stats().failed_allocations, 1u);
  EXPECT_EQ(h.cache.stats().allocations, 3u);
  EXPECT_EQ(h.cache.resident_count(), 3u);
  EXPECT_FALSE(h.cache.resident(3));
  h.cache.check_invariants();
  // Unlocking makes room again.
  h.cache.unlock(2);
  EXPECT_NE(h.cache.allocate(3, kib), nullptr);
  EXPECT_EQ(h.evicted_keys(), (keys{2}));
}

TEST(tensor_cache, every_tensor_refused_throws_out_of_memory_naming_the_refusals) {
  cache_harness h(4 * kib);
  fill(h.cache, 4);
  h.cache.lock(3);
  h.decide = [](tensor_key, void*, std::size_t) { return false; };
  try {
    h.cache.allocate(4, kib);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("1 locked tensor holds 1.00 KiB: tensor 3 1.00 KiB"), std::string::npos) << m;
    EXPECT_NE(m.find("3 unlocked tensors of 3.00 KiB refused by the eviction callback"),
              std::string::npos)
        << m;
  }
  EXPECT_EQ(h.refused_keys(), (keys{0, 1, 2}));  // each asked once, from the LRU end
  EXPECT_EQ(h.cache.resident_count(), 4u);
  EXPECT_EQ(h.cache.lru_order(), (keys{2, 1, 0}));
  h.cache.check_invariants();
}

TEST(tensor_cache, hopeless_allocation_evicts_nothing) {
  // 3 KiB locked of a 4 KiB heap: evicting the one unlocked tensor cannot make 2 KiB.
  cache_harness h(4 * kib);
  fill(h.cache, 4);
  for (tensor_key k : {0, 1, 2}) h.cache.lock(k);
  EXPECT_THROW(h.cache.allocate(4, 2 * kib), out_of_memory);
  EXPECT_THROW(h.cache.allocate(5, 64 * kib), out_of_memory);  // larger than the heap
  EXPECT_TRUE(h.evicted_keys().empty());
  EXPECT_TRUE(h.refused_keys().empty());
  EXPECT_TRUE(h.cache.resident(3));
  EXPECT_EQ(h.cache.stats().failed_allocations, 2u);
}

TEST(tensor_cache, no_eviction_callback_means_out_of_memory_without_eviction) {
  test::test_device dev(64 * kib);
  device_heap heap(dev, test::small_heap(2 * kib));
  tensor_cache cache(heap, {});
  cache.allocate(0, kib);
  cache.allocate(1, kib);
  try {
    cache.allocate(2, kib);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("no eviction callback"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache.resident_count(), 2u);
}

TEST(tensor_cache, release_frees_memory_and_forgets_the_tensor) {
  cache_harness h(8 * kib);
  h.cache.allocate(0, 3 * kib - 1);
  h.cache.allocate(1, kib);
  EXPECT_EQ(h.heap.stats().bytes_in_use, 4 * kib);
  h.cache.release(0);
  EXPECT_FALSE(h.cache.resident(0));
  EXPECT_FALSE(h.cache.check(0));
  EXPECT_EQ(h.heap.stats().bytes_in_use, kib);
  EXPECT_EQ(h.heap.stats().live_allocations, 1u);
  EXPECT_EQ(h.cache.bytes_resident(), kib);
  EXPECT_EQ(h.cache.resident_count(), 1u);
  EXPECT_EQ(h.cache.lru_order(), (keys{1}));
  EXPECT_THROW(h.cache.release(0), std::logic_error);  // twice
  EXPECT_THROW(h.cache.release(7), std::logic_error);  // never there
  // The key can come back.
  h.cache.allocate(0, kib);
  EXPECT_EQ(h.cache.lru_order(), (keys{0, 1}));
  EXPECT_TRUE(h.evicted_keys().empty());
  h.cache.check_invariants();
}

TEST(tensor_cache, release_of_locked_tensor_is_rejected) {
  cache_harness h(8 * kib);
  h.cache.allocate(0, kib);
  h.cache.lock(0);
  EXPECT_THROW(h.cache.release(0), std::logic_error);
  EXPECT_THROW(h.cache.forget(0), std::logic_error);
  EXPECT_TRUE(h.cache.resident(0));
  h.cache.unlock(0);
  h.cache.release(0);
  EXPECT_EQ(h.heap.stats().bytes_in_use, 0u);
}

TEST(tensor_cache, forget_hands_memory_to_caller_without_freeing) {
  cache_harness h(8 * kib);
  void* p = h.cache.allocate(0, 2 * kib);
  h.cache.allocate(1, kib);
  EXPECT_EQ(h.cache.forget(0), p);
  EXPECT_FALSE(h.cache.resident(0));
  EXPECT_EQ(h.cache.bytes_resident(), kib);
  EXPECT_EQ(h.heap.stats().bytes_in_use, 3 * kib);  // still allocated: the caller owns it
  EXPECT_EQ(h.heap.allocation_size(p), 2 * kib);
  EXPECT_THROW(h.cache.forget(0), std::logic_error);
  EXPECT_THROW(h.cache.release(0), std::logic_error);
  EXPECT_EQ(h.heap.deallocate(p), status::success);
  EXPECT_EQ(h.heap.stats().bytes_in_use, kib);
  h.cache.check_invariants();
}

TEST(tensor_cache, insert_registers_caller_memory_as_resident_unlocked_at_front) {
  cache_harness h(4 * kib);
  h.cache.allocate(0, kib);
  void* p = h.heap.allocate(2 * kib);
  ASSERT_NE(p, nullptr);
  h.cache.insert(5, p, 2 * kib - 10);
  EXPECT_TRUE(h.cache.resident(5));
  EXPECT_FALSE(h.cache.locked(5));
  EXPECT_EQ(h.cache.ptr(5), p);
  EXPECT_EQ(h.cache.lru_order(), (keys{5, 0}));
  EXPECT_EQ(h.cache.bytes_resident(), 3 * kib - 10);
  // Inserted memory is evictable and freed by the cache.
  h.cache.allocate(1, kib);
  h.cache.allocate(2, 2 * kib);  // evicts 0, then 5
  EXPECT_EQ(h.evicted_keys(), (keys{0, 5}));
  EXPECT_EQ(h.heap.stats().bytes_in_use, 3 * kib);
  EXPECT_EQ(h.cache.stats().allocations, 3u);  // insert is not an allocation
  h.cache.check_invariants();
}

TEST(tensor_cache, insert_rejects_resident_keys_and_memory_not_from_the_heap) {
  cache_harness h(4 * kib);
  h.cache.allocate(0, kib);
  void* q = h.heap.allocate(kib);
  EXPECT_THROW(h.cache.insert(0, q, kib), std::logic_error);  // resident
  int host_object = 0;
  EXPECT_THROW(h.cache.insert(1, &host_object, 4), std::logic_error);                 // foreign
  EXPECT_THROW(h.cache.insert(1, static_cast<char*>(q) + 256, 4), std::logic_error);  // interior
  EXPECT_THROW(h.cache.insert(1, q, 2 * kib), std::logic_error);  // larger than allocation
  EXPECT_THROW(h.cache.insert(1, nullptr, kib), std::logic_error);
  EXPECT_THROW(h.cache.insert(1, q, 0), std::logic_error);
  EXPECT_FALSE(h.cache.resident(1));
  h.cache.insert(1, q, kib);
  h.cache.check_invariants();
  // Memory another key holds (inserted or allocated): two keys on one allocation were freed
  // twice, and the heap then handed a resident tensor's memory to a third.
  try {
    h.cache.insert(2, q, kib);
    ADD_FAILURE() << "one allocation became two tensors";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("was given memory that tensor 1 holds already"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(h.cache.insert(2, h.cache.ptr(0), kib), std::logic_error);
  EXPECT_FALSE(h.cache.resident(2));
  h.cache.release(1);  // its memory is free: another key may hold it now
  void* r = h.heap.allocate(kib);
  h.cache.insert(2, r, kib);
  h.cache.check_invariants();
}

TEST(tensor_cache, invalid_use_throws_logic_error_naming_the_tensor) {
  cache_harness h(4 * kib, /*with_names=*/true);
  try {
    h.cache.lock(3);
    FAIL() << "expected logic_error";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor_cache::lock: t3 (tensor 3) is not resident"),
              std::string::npos)
        << e.what();
  }
  h.cache.allocate(0, kib);
  EXPECT_THROW(h.cache.unlock(0), std::logic_error);         // below zero
  EXPECT_THROW(h.cache.unlock(1), std::logic_error);         // not resident
  EXPECT_THROW(h.cache.allocate(0, kib), std::logic_error);  // resident already
  EXPECT_THROW(h.cache.allocate(1, 0), std::logic_error);
  EXPECT_THROW(h.cache.allocate(tensor_cache::max_keys, kib), std::logic_error);
  EXPECT_THROW(h.cache.release(tensor_cache::max_keys + 1), std::logic_error);
  h.cache.lock(0);
  h.cache.unlock(0);
  EXPECT_THROW(h.cache.unlock(0), std::logic_error);
  EXPECT_EQ(h.cache.resident_count(), 1u);
  h.cache.check_invariants();
}

TEST(tensor_cache, stats_count_exactly) {
  cache_harness h(4 * kib);
  fill(h.cache, 4);                // 4 allocations
  EXPECT_TRUE(h.cache.check(3));   // hit
  EXPECT_TRUE(h.cache.check(0));   // hit: LRU order 0 3 2 1
  EXPECT_FALSE(h.cache.check(9));  // miss
  h.decide = [](tensor_key k, void*, std::size_t) { return k != 1; };
  h.cache.allocate(4, 2 * kib);  // refuses 1, evicts 2 and 3 (adjacent blocks)
  h.cache.lock(4);
  h.cache.lock(0);
  EXPECT_THROW(h.cache.allocate(5, kib), out_of_memory);  // 1 refused again: failed
  const tensor_cache_stats s = h.cache.stats();
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.allocations, 5u);
  EXPECT_EQ(s.failed_allocations, 1u);
  EXPECT_EQ(h.evicted_keys(), (keys{2, 3}));
  EXPECT_EQ(h.refused_keys(), (keys{1, 1}));
  EXPECT_EQ(s.evictions, 2u);
  EXPECT_EQ(s.bytes_evicted, 2 * kib);
  h.cache.reset_stats();
  const tensor_cache_stats z = h.cache.stats();
  EXPECT_EQ(
      z.hits + z.misses + z.evictions + z.bytes_evicted + z.allocations + z.failed_allocations, 0u);
}

TEST(tensor_cache, heap_accounting_is_exact_and_destructor_frees_everything) {
  test::test_device dev(64 * kib);
  device_heap heap(dev, test::small_heap(16 * kib));
  {
    tensor_cache cache(heap, [](tensor_key, void*, std::size_t) { return true; });
    cache.allocate(0, 1);              // 1 block
    cache.allocate(1, kib + 1);        // 2 blocks
    void* p = heap.allocate(3 * kib);  // 3 blocks, then inserted
    cache.insert(2, p, 2 * kib + 5);
    cache.allocate(3, 4 * kib);  // 4 blocks: 10 of 16 in use
    cache.lock(0);
    EXPECT_EQ(heap.stats().bytes_in_use, 10 * kib);
    EXPECT_EQ(cache.bytes_resident(), 1 + kib + 1 + 2 * kib + 5 + 4 * kib);
    cache.allocate(4, 9 * kib);  // evicts 1, 2 and 3: blocks 1..15 free
    EXPECT_FALSE(cache.resident(3));
    EXPECT_EQ(cache.stats().evictions, 3u);
    EXPECT_EQ(cache.stats().bytes_evicted, kib + 1 + 2 * kib + 5 + 4 * kib);
    EXPECT_EQ(heap.stats().bytes_in_use, 10 * kib);
    EXPECT_EQ(cache.bytes_resident(), 1 + 9 * kib);
    cache.check_invariants();
    heap.check_invariants();
  }  // destroyed with 0 locked and 4 unlocked
  EXPECT_EQ(heap.stats().bytes_in_use, 0u);
  EXPECT_EQ(heap.stats().invalid_frees, 0u);
}

TEST(tensor_cache, victim_released_during_its_callback_is_freed_whatever_it_answers) {
  for (bool answer : {false, true}) {
    cache_harness h(2 * kib);
    fill(h.cache, 2);
    h.decide = [&](tensor_key k, void* p, std::size_t) {
      h.cache.release(k);  // the tensor died meanwhile: forgotten now...
      EXPECT_FALSE(h.cache.resident(k));
      EXPECT_THROW(h.cache.release(k), std::logic_error);
      EXPECT_EQ(h.heap.allocation_size(p), kib);  // ...but not freed under the callback
      return answer;
    };
    h.cache.allocate(2, kib);
    EXPECT_FALSE(h.cache.resident(0)) << answer;
    EXPECT_TRUE(h.cache.resident(1)) << answer;  // one eviction was enough either way
    EXPECT_EQ(h.cache.stats().evictions, answer ? 1u : 0u);
    EXPECT_EQ(h.heap.stats().bytes_in_use, 2 * kib);
    h.cache.check_invariants();
  }
}

TEST(tensor_cache, victim_released_during_its_callback_may_come_back_at_once) {
  cache_harness h(3 * kib);
  fill(h.cache, 3);
  void* old0 = h.cache.ptr(0);
  void* new0 = nullptr;
  h.decide = [&](tensor_key k, void*, std::size_t) {
    EXPECT_EQ(k, 0u);
    h.cache.release(0);
    h.cache.release(1);
    new0 = h.heap.try_allocate(kib);  // tensor 1's block
    EXPECT_NE(new0, nullptr);
    h.cache.insert(0, new0, kib);  // the key is free although its old memory is not yet
    return true;
  };
  h.cache.allocate(3, kib);  // takes the victim's old block
  EXPECT_EQ(h.cache.ptr(0), new0);
  EXPECT_EQ(h.cache.ptr(3), old0);
  EXPECT_EQ(h.cache.lru_order(), (keys{3, 0, 2}));
  EXPECT_EQ(h.cache.stats().evictions, 1u);
  EXPECT_EQ(h.heap.stats().bytes_in_use, 3 * kib);
  h.cache.check_invariants();
}

TEST(tensor_cache, victim_cannot_be_touched_while_its_callback_runs) {
  cache_harness h(2 * kib);
  fill(h.cache, 2);
  int checked = 0;
  h.decide = [&](tensor_key k, void*, std::size_t) {
    EXPECT_THROW(h.cache.lock(k), std::logic_error);
    EXPECT_THROW(h.cache.check(k), std::logic_error);
    EXPECT_THROW(h.cache.forget(k), std::logic_error);
    EXPECT_THROW(h.cache.insert(k, h.cache.ptr(1), kib), std::logic_error);
    EXPECT_THROW(h.cache.allocate(k, kib), std::logic_error);
    // Other tensors are usable: the callback runs with the cache unlocked.
    EXPECT_TRUE(h.cache.check(1));
    ++checked;
    return true;
  };
  h.cache.allocate(2, kib);
  EXPECT_EQ(checked, 1);
  EXPECT_EQ(h.evicted_keys(), (keys{0}));
  h.cache.check_invariants();
}

TEST(tensor_cache, callback_exception_leaves_victim_resident_and_propagates) {
  cache_harness h(2 * kib);
  fill(h.cache, 2);
  h.decide = [](tensor_key, void*, std::size_t) -> bool {
    throw std::runtime_error("copy failed");
  };
  EXPECT_THROW(h.cache.allocate(2, kib), std::runtime_error);
  EXPECT_TRUE(h.cache.resident(0));
  EXPECT_FALSE(h.cache.resident(2));
  EXPECT_EQ(h.cache.lru_order(), (keys{1, 0}));
  EXPECT_EQ(h.cache.stats().evictions, 0u);
  h.cache.check_invariants();
  h.decide = {};
  h.cache.allocate(2, kib);
  EXPECT_EQ(h.evicted_keys(), (keys{0}));
}

TEST(tensor_cache, key_inserted_during_eviction_is_reported) {
  cache_harness h(3 * kib);
  fill(h.cache, 3);
  void* spare = nullptr;
  h.decide = [&](tensor_key, void*, std::size_t) {
    // Another party brings tensor 9 back while tensor 9's own allocation evicts.
    spare = h.heap.try_allocate(kib);  // nullptr: the heap is full
    EXPECT_EQ(spare, nullptr);
    h.cache.release(2);
    spare = h.heap.try_allocate(kib);
    h.cache.insert(9, spare, kib);
    return true;
  };
  EXPECT_THROW(h.cache.allocate(9, kib), std::logic_error);
  EXPECT_TRUE(h.cache.resident(9));
  EXPECT_EQ(h.cache.ptr(9), spare);
  h.cache.check_invariants();
  EXPECT_EQ(h.heap.stats().bytes_in_use, 2 * kib);  // 1 and 9; nothing leaked
}

TEST(tensor_cache, evict_moves_one_unlocked_tensor_out_through_the_callback) {
  cache_harness h(8 * kib);
  fill(h.cache, 3);
  h.cache.lock(2);
  EXPECT_TRUE(h.cache.evict(1));
  EXPECT_EQ(h.evicted_keys(), (keys{1}));
  EXPECT_FALSE(h.cache.resident(1));
  EXPECT_EQ(h.cache.stats().evictions, 1u);
  EXPECT_EQ(h.heap.stats().bytes_in_use, 2 * kib);
  EXPECT_THROW(h.cache.evict(2), std::logic_error);  // locked
  EXPECT_THROW(h.cache.evict(1), std::logic_error);  // gone already
  h.decide = [](tensor_key, void*, std::size_t) { return false; };
  EXPECT_FALSE(h.cache.evict(0));  // refused: stays resident
  EXPECT_TRUE(h.cache.resident(0));
  h.cache.unlock(2);
  h.cache.check_invariants();
}

TEST(tensor_cache, evict_needs_an_eviction_callback) {
  test::test_device dev(8 * kib);
  device_heap heap(dev, test::small_heap(4 * kib));
  tensor_cache cache(heap, {});
  cache.allocate(0, kib);
  EXPECT_THROW(cache.evict(0), std::logic_error);
  EXPECT_TRUE(cache.resident(0));
}

}  // namespace
}  // namespace memweave
