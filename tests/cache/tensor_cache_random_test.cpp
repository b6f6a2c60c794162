// The tensor cache against a reference model (a std::list in LRU order and a lock count per
// tensor) over thousands of random operations: after every operation the cache's LRU order,
// its locked tensors, the sequence of eviction callbacks (victim and answer) and the heap's
// bytes in use must be what the model predicts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <list>
#include <map>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cache/tensor_cache_harness.hpp"
#include "memweave/cache/tensor_cache.hpp"
#include "memweave/core/error.hpp"

namespace memweave {
namespace {

using test::cache_harness;
using test::kib;
using call = std::pair<tensor_key, bool>;  // an eviction callback: victim, answer

// What the cache should be: the unlocked resident keys front (most recent) to back, and
// each resident key's size in blocks and lock count.
struct model {
  std::list<tensor_key> lru;
  std::map<tensor_key, std::size_t> blocks;  // resident keys
  std::map<tensor_key, std::uint32_t> locks;
  std::set<tensor_key> refuse;  // keys the callback refuses

  bool resident(tensor_key k) const { return blocks.count(k) != 0; }
  bool is_locked(tensor_key k) const { return locks.count(k) != 0 && locks.at(k) != 0; }
  std::size_t blocks_in_use() const {
    std::size_t n = 0;
    for (const auto& [k, b] : blocks) n += b;
    return n;
  }
  std::size_t unlocked_blocks() const {
    std::size_t n = 0;
    for (tensor_key k : lru) n += blocks.at(k);
    return n;
  }
  // The callbacks an eviction walk makes, from the back, skipping nothing but refusals.
  std::vector<call> walk() const {
    std::vector<call> calls;
    for (auto it = lru.rbegin(); it != lru.rend(); ++it) {
      calls.push_back({*it, refuse.count(*it) == 0});
    }
    return calls;
  }
  void admit(tensor_key k, std::size_t b) {
    lru.push_front(k);
    blocks[k] = b;
    locks[k] = 0;
  }
  void drop(tensor_key k) {
    lru.remove(k);
    blocks.erase(k);
    locks.erase(k);
  }
  void touch(tensor_key k) {
    if (is_locked(k)) return;
    lru.remove(k);
    lru.push_front(k);
  }
};

struct random_run {
  random_run(std::uint32_t seed, std::size_t capacity_blocks, std::size_t max_blocks)
      : rng(seed), capacity(capacity_blocks), max_blocks(max_blocks), h(capacity_blocks * kib) {
    h.decide = [this](tensor_key k, void*, std::size_t) {
      const bool yes = m.refuse.count(k) == 0;
      calls.push_back({k, yes});
      return yes;
    };
  }

  std::uint32_t pick(std::uint32_t n) {
    return std::uniform_int_distribution<std::uint32_t>(0, n - 1)(rng);
  }

  // A resident key, unlocked or locked as asked, or max_keys when there is none.
  tensor_key pick_resident(bool want_locked) {
    std::vector<tensor_key> ks;
    for (const auto& [k, b] : m.blocks) {
      if (m.is_locked(k) == want_locked) ks.push_back(k);
    }
    return ks.empty() ? tensor_cache::max_keys : ks[pick(static_cast<std::uint32_t>(ks.size()))];
  }

  // allocate() of a key not resident; checks the callbacks against the model's walk.
  void allocate(tensor_key k) {
    const std::size_t b = 1 + pick(static_cast<std::uint32_t>(max_blocks));
    const std::vector<call> expect_walk = m.walk();
    const std::size_t free_blocks = capacity - m.blocks_in_use();
    const bool hopeless = b > capacity || free_blocks + m.unlocked_blocks() < b;
    calls.clear();
    bool ok = true;
    try {
      h.cache.allocate(k, b * kib - pick(100));
    } catch (const out_of_memory&) {
      ok = false;
    }
    // The callbacks made are the model's walk, in order, cut where the allocation fit.
    ASSERT_LE(calls.size(), expect_walk.size());
    ASSERT_TRUE(std::equal(calls.begin(), calls.end(), expect_walk.begin()));
    if (max_blocks == 1) {
      // Uniform sizes: no fragmentation, so the walk stops at the first accepted victim.
      const auto first_yes = std::find_if(expect_walk.begin(), expect_walk.end(),
                                          [](const call& c) { return c.second; });
      if (free_blocks >= 1) {
        EXPECT_TRUE(ok);
      } else if (first_yes == expect_walk.end()) {
        EXPECT_FALSE(ok);
        EXPECT_EQ(calls.size(), expect_walk.size());
      } else {
        EXPECT_TRUE(ok);
        EXPECT_EQ(calls.size(), static_cast<std::size_t>(first_yes - expect_walk.begin()) + 1);
      }
    }
    if (ok) {
      EXPECT_FALSE(hopeless);
      if (!calls.empty()) {
        EXPECT_TRUE(calls.back().second);  // ended by an eviction
      }
    } else if (hopeless) {
      EXPECT_TRUE(calls.empty());  // nothing moved out for nothing
    } else {
      EXPECT_EQ(calls.size(), expect_walk.size());  // asked every unlocked tensor
    }
    for (const call& c : calls) {
      if (c.second) {
        m.drop(c.first);
        ++evictions;
      } else {
        ++refusals;
      }
    }
    failures += !ok;
    if (ok) m.admit(k, b);
  }

  void step() {
    const tensor_key k = pick(keys);
    // Weights keep the cache near full so that most allocations evict.
    const std::uint32_t r100 = pick(100);
    const int op = r100 < 25   ? 0
                   : r100 < 60 ? 2
                   : r100 < 68 ? 4
                   : r100 < 76 ? 5
                   : r100 < 82 ? 6
                   : r100 < 86 ? 7
                   : r100 < 94 ? 8
                               : 9;
    switch (op) {
      case 0: {  // check
        const bool hit = h.cache.check(k);
        EXPECT_EQ(hit, m.resident(k));
        if (hit) {
          m.touch(k);
          ++hits;
        } else {
          ++misses;
        }
        break;
      }
      case 2:  // allocate (with evictions)
        if (!m.resident(k)) allocate(k);
        break;
      case 4: {  // lock
        const tensor_key r = pick(3) == 0 ? pick_resident(true) : pick_resident(false);
        if (r == tensor_cache::max_keys) break;
        h.cache.lock(r);
        if (m.locks[r]++ == 0) m.lru.remove(r);
        break;
      }
      case 5: {  // unlock
        const tensor_key r = pick_resident(true);
        if (r == tensor_cache::max_keys) break;
        h.cache.unlock(r);
        if (--m.locks[r] == 0) m.lru.push_front(r);
        break;
      }
      case 6: {  // release
        const tensor_key r = pick_resident(false);
        if (r == tensor_cache::max_keys) break;
        h.cache.release(r);
        m.drop(r);
        break;
      }
      case 7: {  // forget, then free as the new owner
        const tensor_key r = pick_resident(false);
        if (r == tensor_cache::max_keys) break;
        void* p = h.cache.forget(r);
        EXPECT_EQ(h.heap.deallocate(p), status::success);
        m.drop(r);
        break;
      }
      case 8: {  // insert memory taken from the heap directly (a prefetch target)
        if (m.resident(k)) break;
        const std::size_t b = 1 + pick(static_cast<std::uint32_t>(max_blocks));
        void* p = h.heap.try_allocate(b * kib);
        if (p == nullptr) break;
        h.cache.insert(k, p, b * kib);
        m.admit(k, b);
        break;
      }
      case 9:  // the owner changes its mind about a tensor
        if (!m.refuse.erase(k)) m.refuse.insert(k);
        break;
    }
  }

  void compare() {
    ASSERT_EQ(h.cache.lru_order(), std::vector<tensor_key>(m.lru.begin(), m.lru.end()));
    ASSERT_EQ(h.cache.resident_count(), m.blocks.size());
    ASSERT_EQ(h.heap.stats().bytes_in_use, m.blocks_in_use() * kib);
    for (tensor_key k = 0; k < keys; ++k) {
      ASSERT_EQ(h.cache.resident(k), m.resident(k)) << k;
      ASSERT_EQ(h.cache.locked(k), m.is_locked(k)) << k;
    }
  }

  void run(int steps) {
    for (int i = 0; i < steps; ++i) {
      step();
      ASSERT_NO_FATAL_FAILURE(compare()) << "after step " << i;
      if (::testing::Test::HasFailure()) return;
      if (i % 97 == 0) h.cache.check_invariants();
    }
    h.cache.check_invariants();
    h.heap.check_invariants();
    const tensor_cache_stats s = h.cache.stats();
    EXPECT_EQ(s.hits, hits);
    EXPECT_EQ(s.misses, misses);
    EXPECT_EQ(s.evictions, evictions);
    EXPECT_GT(evictions, 200u) << "the run should exercise eviction";
    EXPECT_GT(refusals, 20u) << "the run should exercise refusals";
    EXPECT_GT(failures, 5u) << "the run should exercise out-of-memory";
  }

  static constexpr tensor_key keys = 48;
  std::mt19937 rng;
  const std::size_t capacity;
  const std::size_t max_blocks;
  cache_harness h;
  model m;
  std::vector<call> calls;
  std::uint64_t hits = 0, misses = 0, evictions = 0, refusals = 0, failures = 0;
};

// seed, heap capacity in blocks, largest tensor in blocks (1: no fragmentation, so the
// model also predicts where each eviction walk stops).
struct run_params {
  std::uint32_t seed;
  std::size_t capacity_blocks;
  std::size_t max_blocks;
};

void PrintTo(const run_params& p, std::ostream* os) {
  *os << "seed " << p.seed << ", " << p.capacity_blocks << " blocks, tensors of 1.." << p.max_blocks
      << " blocks";
}

std::string param_name(const ::testing::TestParamInfo<run_params>& info) {
  return "seed" + std::to_string(info.param.seed) + "_capacity" +
         std::to_string(info.param.capacity_blocks) + "_max" +
         std::to_string(info.param.max_blocks);
}

class tensor_cache_random : public ::testing::TestWithParam<run_params> {};

TEST_P(tensor_cache_random, eviction_walks_match_reference_lru) {
  const run_params p = GetParam();
  random_run r(p.seed, p.capacity_blocks, p.max_blocks);
  r.run(4000);
}

INSTANTIATE_TEST_SUITE_P(uniform_sizes, tensor_cache_random,
                         ::testing::Values(run_params{1, 20, 1}, run_params{2, 20, 1},
                                           run_params{3, 12, 1}),
                         param_name);
INSTANTIATE_TEST_SUITE_P(mixed_sizes, tensor_cache_random,
                         ::testing::Values(run_params{11, 40, 5}, run_params{12, 40, 5},
                                           run_params{13, 24, 3}),
                         param_name);

}  // namespace
}  // namespace memweave
