// The device heap's pointer -> allocation table: an open-addressing hash table from a
// pointer value to a 32-bit node index. Private to alloc/.
//
// Why not std::unordered_map: it allocates a node per insert (a malloc on every heap
// allocation) and chases a pointer per lookup. Here a lookup is one multiply and, at load
// <= 1/2, about 1.5 probes of one 16-byte slot; erase uses backward shifting, so there are
// no tombstones and probe lengths stay short under churn. Not thread-safe (the heap's
// mutex guards it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace memweave::detail {

class device_heap_ptr_table {
 public:
  static constexpr std::uint32_t npos = UINT32_MAX;

  device_heap_ptr_table() { rehash(1024); }

  std::size_t size() const noexcept { return size_; }

  /// Makes sure one more insert cannot allocate. Throws std::bad_alloc.
  void reserve_one() {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.size() * 2);
  }

  /// Inserts `key` (non-zero, not present). Call reserve_one() first: this never allocates.
  void insert(std::uintptr_t key, std::uint32_t value) noexcept {
    std::size_t i = home(key);
    while (slots_[i].key != 0) i = (i + 1) & mask_;
    slots_[i] = {key, value};
    ++size_;
  }

  /// The value of `key`, or npos.
  std::uint32_t find(std::uintptr_t key) const noexcept {
    if (key == 0) return npos;
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return slots_[i].value;
      if (slots_[i].key == 0) return npos;
    }
  }

  /// Removes `key` and returns its value, or npos when absent.
  std::uint32_t take(std::uintptr_t key) noexcept {
    if (key == 0) return npos;
    std::size_t i = home(key);
    while (slots_[i].key != key) {
      if (slots_[i].key == 0) return npos;
      i = (i + 1) & mask_;
    }
    const std::uint32_t value = slots_[i].value;
    // Backward-shift deletion: move later members of the probe run into the hole when
    // their home slot is not cyclically inside (hole, j].
    std::size_t j = i;
    for (;;) {
      j = (j + 1) & mask_;
      if (slots_[j].key == 0) break;
      const std::size_t h = home(slots_[j].key);
      const bool stays = (i <= j) ? (i < h && h <= j) : (i < h || h <= j);
      if (!stays) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i].key = 0;
    --size_;
    return value;
  }

  /// Calls f(key, value) for every entry (inspection).
  template <class F>
  void for_each(F&& f) const {
    for (const auto& s : slots_) {
      if (s.key != 0) f(s.key, s.value);
    }
  }

 private:
  struct slot {
    std::uintptr_t key = 0;  // 0 = empty (no allocation is at address 0)
    std::uint32_t value = 0;
  };

  std::size_t home(std::uintptr_t key) const noexcept {
    // Fibonacci hashing: the high bits of the product depend on every bit of the key, so
    // block-aligned pointers (low bits all zero) still spread.
    return static_cast<std::size_t>((static_cast<std::uint64_t>(key) * 0x9E3779B97F4A7C15ull) >>
                                    shift_);
  }

  void rehash(std::size_t capacity) {
    std::vector<slot> old(capacity);
    old.swap(slots_);
    mask_ = capacity - 1;
    shift_ = 64;
    for (std::size_t c = capacity; c > 1; c >>= 1) --shift_;
    size_ = 0;
    for (const auto& s : old) {
      if (s.key != 0) insert(s.key, s.value);
    }
  }

  std::vector<slot> slots_;  // capacity is a power of two, load <= 1/2
  std::size_t mask_ = 0;     // slots_.size() - 1
  unsigned shift_ = 64;      // 64 - log2(slots_.size())
  std::size_t size_ = 0;     // entries
};

}  // namespace memweave::detail
