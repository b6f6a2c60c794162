// host_memory taken straight from device::allocate_pinned, one mapping per host copy,
// bounded by a byte limit. No jemalloc is needed, so it suits planning on the null device
// (lazily committed memory that is never touched there) and tests; in training on `cuda`
// prefer the pinned host pool (cudaHostAlloc per tensor is slow).
#pragma once

#include <atomic>
#include <cstddef>

#include "memweave/swap/host_memory.hpp"

namespace memweave {

class device;

/// Per-allocation pinned memory from a device, at most `limit_bytes` live at once.
/// Thread-safe (the byte count is an atomic; the device is thread-safe).
class direct_pinned_memory final : public host_memory {
 public:
  /// `dev` must outlive this object. limit_bytes 0 = MEMWEAVE_HOST_POOL_BYTES (the same
  /// budget the pinned pool would have).
  explicit direct_pinned_memory(device& dev, std::size_t limit_bytes = 0);
  /// Live allocations are the owner's to give back first; any left are reported in one
  /// warning line (and leaked: their sizes are not kept).
  ~direct_pinned_memory() override;
  direct_pinned_memory(const direct_pinned_memory&) = delete;
  direct_pinned_memory& operator=(const direct_pinned_memory&) = delete;

  /// nullptr when bytes is 0, when the limit would be passed, or when the device refuses.
  void* allocate(std::size_t bytes) noexcept override;
  void deallocate(void* p, std::size_t bytes) noexcept override;
  /// The limit.
  std::size_t capacity() const noexcept override { return limit_; }
  /// Exact sum of the live allocations' requested sizes.
  std::size_t bytes_in_use() const noexcept override {
    return in_use_.load(std::memory_order_acquire);
  }

 private:
  device& dev_;
  const std::size_t limit_;
  std::atomic<std::size_t> in_use_{0};
};

}  // namespace memweave
