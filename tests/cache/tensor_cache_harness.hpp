// A tensor cache over a small device heap (1 KiB blocks on the alloc tests' device double)
// with a recording eviction callback whose answer each test can script.
#pragma once

#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "alloc/test_device.hpp"
#include "memweave/alloc/device_heap.hpp"
#include "memweave/cache/tensor_cache.hpp"

namespace memweave::test {

inline constexpr std::size_t kib = 1024;

inline heap_options small_heap(std::size_t pool_bytes) {
  heap_options o;
  o.pool_bytes = pool_bytes;
  o.block_bytes = kib;
  o.fit = fit_policy::best;
  o.grow_bytes = 0;
  return o;
}

struct cache_harness {
  /// What the callback answers for a victim; default: always true.
  using decide_fn = std::function<bool(tensor_key key, void* ptr, std::size_t bytes)>;

  explicit cache_harness(std::size_t pool_bytes, bool with_names = false)
      : dev(pool_bytes + 64 * kib),
        heap(dev, small_heap(pool_bytes)),
        cache(
            heap,
            [this](tensor_key key, void* ptr, std::size_t bytes) {
              const bool yes = decide ? decide(key, ptr, bytes) : true;
              std::lock_guard lk(mu);
              (yes ? evicted : refused).push_back(key);
              return yes;
            },
            with_names ? tensor_cache::name_callback([](tensor_key k) {
              // Built in two parts: GCC 12 warns (wrongly) on "t" + std::string&&.
              std::string name = "t";
              return name += std::to_string(k);
            })
                       : tensor_cache::name_callback()) {}

  std::vector<tensor_key> evicted_keys() {
    std::lock_guard lk(mu);
    return evicted;
  }
  std::vector<tensor_key> refused_keys() {
    std::lock_guard lk(mu);
    return refused;
  }
  void clear_records() {
    std::lock_guard lk(mu);
    evicted.clear();
    refused.clear();
  }

  test_device dev;
  device_heap heap;
  decide_fn decide;  // set before the cache is used from several threads
  std::mutex mu;     // guards evicted, refused
  std::vector<tensor_key> evicted;
  std::vector<tensor_key> refused;
  tensor_cache cache;  // last: destroyed first, while the heap still lives
};

}  // namespace memweave::test
