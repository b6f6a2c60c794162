// The tensor cache (SuperNeurons §3.3.2, Algorithm 2): the device-resident tensors in LRU
// order, each with a lock count. A layer step locks the tensors it reads and writes for the
// duration of its kernel; a locked tensor is never evicted. When the device heap cannot
// serve an allocation, unlocked tensors are evicted from the LRU end, one at a time,
// through the owner's eviction callback (offload to host, or drop a recomputable tensor),
// until the heap can serve it.
//
// The cache knows a tensor only as a key (a small dense integer: a tensor id), a byte size
// and a lock count. It owns the device memory of every resident tensor: allocate() takes
// it from the heap, insert() hands memory the caller took from the same heap to the cache,
// release() and a successful eviction free it, forget() hands it back to the caller, and
// the destructor frees whatever is still resident.
//
// Thread safety: every member may be called from any thread (the executor drives the cache;
// a background transfer thread may insert, release and forget). One mutex guards the
// cache's state; the eviction and name callbacks are called with it released, so an
// eviction callback may block (waiting for a copy) and may call the cache (for other keys,
// or release() of its own victim). While its callback runs a victim is "being evicted":
// it stays resident and in its LRU place, no other eviction picks it, and check, lock,
// insert, allocate and forget of it throw std::logic_error. release() of it forgets the
// key at once (it may be brought back right away) and its memory is freed when the
// callback returns, whatever it answers. Lock order: the cache's mutex, then the heap's;
// the heap never calls the cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "memweave/alloc/device_heap.hpp"

namespace memweave {

/// A tensor as the cache knows it: a dense small integer (the engine's tensor id).
using tensor_key = std::uint32_t;

/// The cache's counters since construction or reset_stats().
struct tensor_cache_stats {
  std::uint64_t hits = 0;                ///< check() calls that found the tensor resident
  std::uint64_t misses = 0;              ///< check() calls that did not
  std::uint64_t evictions = 0;           ///< victims whose eviction callback returned true
  std::uint64_t bytes_evicted = 0;       ///< their bytes (as given to allocate/insert)
  std::uint64_t allocations = 0;         ///< allocate() calls that returned memory
  std::uint64_t failed_allocations = 0;  ///< allocate() calls that threw out_of_memory
};

class tensor_cache_impl;

/// The tensor cache. Thread-safe (see the file comment for what runs unlocked).
class tensor_cache {
 public:
  /// Called for each victim, with the cache's mutex released: move the data out (or decide
  /// to drop it) and return true when the cache may free `ptr` now, i.e. no pending work
  /// still reads or writes it; false to keep the tensor resident and skip it (the cache
  /// then tries the next one towards the LRU front). An exception leaves the victim
  /// resident and propagates out of allocate().
  using eviction_callback = std::function<bool(tensor_key key, void* ptr, std::size_t bytes)>;
  /// A readable name of a tensor for error messages ("conv1 output"); called unlocked.
  using name_callback = std::function<std::string(tensor_key key)>;

  /// Keys are below this bound (the cache keeps a slot per key up to the largest seen).
  static constexpr tensor_key max_keys = tensor_key{1} << 24;

  /// A cache over `heap`, which must outlive it. An empty `evict` means nothing can be
  /// evicted (allocate() throws out_of_memory as soon as the heap cannot serve); an empty
  /// `name` writes tensors as "tensor <key>".
  tensor_cache(device_heap& heap, eviction_callback evict, name_callback name = {});
  /// Frees the memory of every tensor still resident. Never throws.
  ~tensor_cache();
  tensor_cache(const tensor_cache&) = delete;
  tensor_cache& operator=(const tensor_cache&) = delete;

  /// Algorithm 2's Check: true (a hit) when `key` is resident; an unlocked tensor then
  /// moves to the LRU front (a locked one goes there when unlocked). False (a miss): bring
  /// the tensor back (prefetch, copy or recompute) and insert() or allocate() it. O(1).
  bool check(tensor_key key);

  /// Device memory for `key`, about to become resident: from the heap, evicting unlocked
  /// tensors from the LRU end one at a time until the heap can serve it (Algorithm 2's
  /// LRU.out). The tensor is inserted resident, unlocked, at the LRU front. Throws
  /// out_of_memory (requested, heap free bytes, largest free run) whose message lists the
  /// heap's numbers and the tensors that could not be evicted when every remaining tensor
  /// is locked, being evicted or refused by the callback; std::logic_error when `key` is
  /// resident already or `bytes` is 0. O(1) per eviction plus the tensors skipped at the
  /// LRU end (refused by the callback or being evicted by another call).
  void* allocate(tensor_key key, std::size_t bytes);

  /// Makes `ptr`, a live allocation of at least `bytes` from this cache's heap that the
  /// caller took itself (a prefetch target), the resident memory of `key`: unlocked, at
  /// the LRU front; the cache now owns it. std::logic_error when `key` is resident already,
  /// `bytes` is 0 or `ptr` is not such an allocation. O(1).
  void insert(tensor_key key, void* ptr, std::size_t bytes);

  /// The tensor died: frees its memory and forgets it. std::logic_error when `key` is not
  /// resident or is locked. While `key` is being evicted it is forgotten at once and its
  /// memory freed when its callback returns. O(1).
  void release(tensor_key key);

  /// Removes `key` from the cache WITHOUT freeing its memory and returns the pointer, which
  /// the caller now owns (a background offload that frees it when the copy completes).
  /// std::logic_error when `key` is not resident, is locked or is being evicted. O(1).
  void* forget(tensor_key key);

  /// Evicts `key` now, as allocate() would evict a victim: calls the eviction callback
  /// and, when it returns true, frees the memory and forgets the key (counted in stats());
  /// returns the callback's answer. For a caller that must empty the cache or repack it.
  /// std::logic_error when `key` is not resident, is locked or being evicted, or the cache
  /// has no callback. An exception from the callback leaves the tensor resident.
  bool evict(tensor_key key);

  /// Adds one lock: the tensor is not evicted until as many unlock() calls. It leaves the
  /// LRU list while locked. std::logic_error when `key` is not resident or is being
  /// evicted. O(1).
  void lock(tensor_key key);
  /// Removes one lock; at zero the tensor returns to the LRU front (it was just used).
  /// std::logic_error when `key` is not resident or not locked. O(1).
  void unlock(tensor_key key);

  /// The device memory of `key`, or nullptr when not resident. O(1).
  void* ptr(tensor_key key) const;
  /// Whether the cache holds device memory for `key` (also while it is being evicted). O(1).
  bool resident(tensor_key key) const;
  /// Whether `key` is resident with a lock count above zero. O(1).
  bool locked(tensor_key key) const;
  /// Sum of the bytes (as given to allocate/insert) of the resident tensors. O(1).
  std::size_t bytes_resident() const;
  /// Number of resident tensors, locked or not. O(1).
  std::size_t resident_count() const;

  tensor_cache_stats stats() const;
  /// Zeroes every counter of stats().
  void reset_stats();

  /// Inspection (tests, tools): the unlocked resident keys from the LRU front (most
  /// recently used) to the end (the next victim). O(resident).
  std::vector<tensor_key> lru_order() const;
  /// The next victims: up to `max` unlocked resident keys from the LRU end (not those being
  /// evicted), most likely victim first. O(max). For write-back ahead of eviction.
  std::vector<tensor_key> lru_tail(std::size_t max) const;
  /// Checks every internal invariant (the LRU and locked lists partition the resident
  /// tensors by lock count and link consistently; counts and bytes equal a recount; every
  /// resident pointer is a live heap allocation of at least its bytes) and throws
  /// std::logic_error naming the first one broken. O(keys); for tests.
  void check_invariants() const;

  device_heap& heap() const noexcept;

 private:
  std::unique_ptr<tensor_cache_impl> impl_;
};

}  // namespace memweave
