// Per-tensor pinned memory from the device, bounded by a limit. The limit is enforced by
// reserving the bytes in an atomic counter before asking the device (and giving them back
// when it refuses), so concurrent callers never pass it together. Thread-safe.
#include "memweave/swap/direct_pinned_memory.hpp"

#include "memweave/core/config.hpp"
#include "memweave/core/log.hpp"
#include "memweave/core/units.hpp"
#include "memweave/device/device.hpp"

namespace memweave {
namespace {

std::size_t limit_or_default(std::size_t limit_bytes) {
  if (limit_bytes != 0) return limit_bytes;
  return option_bytes("MEMWEAVE_HOST_POOL_BYTES").value_or(std::size_t{4} << 30);
}

}  // namespace

direct_pinned_memory::direct_pinned_memory(device& dev, std::size_t limit_bytes)
    : dev_(dev), limit_(limit_or_default(limit_bytes)) {}

direct_pinned_memory::~direct_pinned_memory() {
  const std::size_t left = in_use_.load(std::memory_order_acquire);
  if (left != 0) {
    log(log_level::warn, "direct_pinned_memory destroyed with " + format_bytes(left) +
                             " still allocated; give host copies back before destroying it");
  }
}

void* direct_pinned_memory::allocate(std::size_t bytes) noexcept {
  if (bytes == 0) return nullptr;
  std::size_t used = in_use_.load(std::memory_order_relaxed);
  do {
    if (bytes > limit_ - used) return nullptr;
  } while (!in_use_.compare_exchange_weak(used, used + bytes, std::memory_order_acq_rel));
  try {
    void* p = dev_.allocate_pinned(bytes);
    if (p != nullptr) return p;
  } catch (...) {
    // The device refused (out_of_memory): report exhaustion as a nullptr, like the pool.
  }
  in_use_.fetch_sub(bytes, std::memory_order_acq_rel);
  return nullptr;
}

void direct_pinned_memory::deallocate(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  dev_.deallocate_pinned(p, bytes);
  in_use_.fetch_sub(bytes, std::memory_order_acq_rel);
}

}  // namespace memweave
