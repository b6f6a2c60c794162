// Where the transfer engine keeps host copies of offloaded tensors: a small interface so
// that the engine works over the pinned host pool (pinned_pool_host_memory), over plain
// per-tensor pinned allocations (direct_pinned_memory), or over a test double.
#pragma once

#include <cstddef>

namespace memweave {

/// A source of host memory for host copies. Implementations must be thread-safe: the
/// transfer engine allocates from the calling thread and frees from its watcher thread.
class host_memory {
 public:
  virtual ~host_memory() = default;
  /// At least `bytes` (> 0) of host memory the device can copy to and from (pinned on
  /// `cuda`), aligned to at least 16 bytes, or nullptr when exhausted. Never throws.
  virtual void* allocate(std::size_t bytes) noexcept = 0;
  /// Gives back `p`, which allocate(`bytes`) returned. Never throws.
  virtual void deallocate(void* p, std::size_t bytes) noexcept = 0;
  /// Bytes this memory can hold in all (for out-of-memory messages).
  virtual std::size_t capacity() const noexcept = 0;
  /// Bytes handed out and not yet given back (for out-of-memory messages).
  virtual std::size_t bytes_in_use() const noexcept = 0;
};

}  // namespace memweave
