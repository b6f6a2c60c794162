// Anonymous memory mappings handed out as device or pinned memory by the host and null
// backends, with their accounting (capacity, bytes allocated). Private to device/.
#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>

namespace memweave::detail {

/// A set of anonymous mmap regions. Each allocate() is one mapping, lazily committed
/// (MAP_NORESERVE); `capacity` bounds the bytes outstanding. Thread-safe.
class mapped_memory {
 public:
  /// `what` names the memory in messages ("host device memory"); `prot` is the mmap
  /// protection of every region (PROT_NONE for reservations that must never be touched);
  /// `capacity_hint` says how to raise the capacity ("raise MEMWEAVE_DEVICE_BYTES").
  mapped_memory(std::string what, int prot, std::size_t capacity, std::string capacity_hint);
  /// Unmaps what is still allocated (logged as a leak); never throws.
  ~mapped_memory();
  mapped_memory(const mapped_memory&) = delete;
  mapped_memory& operator=(const mapped_memory&) = delete;

  /// A fresh page-aligned region of `bytes`; nullptr for 0 bytes. Throws out_of_memory
  /// when the capacity or the operating system cannot serve it.
  void* allocate(std::size_t bytes);
  /// Unmaps a region from allocate(). Null is ignored; a foreign pointer is logged and
  /// ignored (never throws). The size recorded at allocation is used, not `bytes`.
  void deallocate(void* p, std::size_t bytes) noexcept;
  /// Bytes outstanding (as requested, not rounded to pages).
  std::size_t allocated() const;
  std::size_t capacity() const noexcept { return capacity_; }

 private:
  const std::string what_;
  const int prot_;
  const std::size_t capacity_;
  const std::string capacity_hint_;
  mutable std::mutex mu_;                           // guards regions_ and allocated_
  std::unordered_map<void*, std::size_t> regions_;  // start -> requested bytes
  std::size_t allocated_ = 0;                       // sum of regions_' sizes
};

}  // namespace memweave::detail
