// host_memory over the pinned host pool (memweave/alloc/pinned_host_pool.hpp): the host
// memory the transfer engine uses in training. Header-only: a thin adapter.
#pragma once

#include <cstddef>

#include "memweave/alloc/pinned_host_pool.hpp"
#include "memweave/swap/host_memory.hpp"

namespace memweave {

/// Host copies carved from a pinned_host_pool. Thread-safe as the pool is.
class pinned_pool_host_memory final : public host_memory {
 public:
  /// Uses `pool`, which must outlive this object.
  explicit pinned_pool_host_memory(pinned_host_pool& pool) noexcept : pool_(pool) {}
  /// pool.allocate(bytes): nullptr when the pinned region cannot serve it.
  void* allocate(std::size_t bytes) noexcept override { return pool_.allocate(bytes); }
  /// pool.deallocate(p) (the pool knows the size).
  void deallocate(void* p, std::size_t /*bytes*/) noexcept override { (void)pool_.deallocate(p); }
  /// The pinned region's size.
  std::size_t capacity() const noexcept override { return pool_.capacity(); }
  /// The pool's bytes in use (jemalloc's usable sizes).
  std::size_t bytes_in_use() const noexcept override { return pool_.bytes_in_use(); }

 private:
  pinned_host_pool& pool_;
};

}  // namespace memweave
