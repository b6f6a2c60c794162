// The device heap's run nodes and its size-ordered index of free runs. Private to alloc/.
//
// Size index: free runs shorter than `exact_limit` blocks (at most 2^18 = 256 Ki blocks,
// 256 MiB at 1 KiB blocks) sit in one bin per exact length, each bin an intrusive doubly
// linked list (LIFO) through the nodes; a three-level bitmap (64 x 64 x 64 bits) marks the
// non-empty bins, so the smallest non-empty bin >= n is found with at most three
// count-trailing-zeros steps and the largest with three count-leading-zeros: best-fit is
// exact and O(1) for these lengths. Longer free runs go to a vector sorted by (length,
// start), searched by binary search; since each is >= exact_limit blocks and they are
// disjoint, there are at most reserved_blocks / exact_limit of them (about 300 for an
// 80 GB arena), so its capacity is reserved up front (no allocation on the hot path) and
// an insert moves at most a few KiB. Nothing here allocates after init()/reserve_large().
//
// Not thread-safe (the heap's mutex guards it).
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace memweave::detail {

inline constexpr std::uint32_t nil_node = UINT32_MAX;

enum class run_state : std::uint8_t { unused = 0, free = 1, allocated = 2 };

/// One maximal run of blocks, free or allocated. 56 bytes; nodes live in one vector (the
/// slab) and refer to each other by index, so they cost no allocation of their own.
struct run_node {
  std::uint64_t start = 0;             // first block, in the heap's concatenated address space
  std::uint64_t length = 0;            // blocks
  std::uint64_t requested = 0;         // bytes asked for (allocated runs); 0 when free
  std::uint32_t addr_prev = nil_node;  // neighbouring runs of the same arena, by address
  std::uint32_t addr_next = nil_node;
  std::uint32_t bin_prev = nil_node;  // free: the exact-size bin's list; unused: slab free list
  std::uint32_t bin_next = nil_node;
  std::uint32_t free_prev = nil_node;  // fit_policy::first: the arena's free runs by address
  std::uint32_t free_next = nil_node;
  std::uint32_t arena = 0;  // arena index
  run_state state = run_state::unused;
};

static_assert(sizeof(run_node) == 56, "keep run nodes small: one per run, cache-resident");

class device_heap_size_index {
 public:
  static constexpr std::uint64_t max_exact_limit = 64ull * 64 * 64;

  /// `exact_limit`: a power of two in [64, 2^18]; `max_large`: the most large runs possible.
  void init(std::vector<run_node>* nodes, std::uint64_t exact_limit, std::size_t max_large) {
    nodes_ = nodes;
    limit_ = exact_limit;
    heads_.assign(limit_, nil_node);
    l2_.assign(limit_ / 64, 0);
    l1_.assign((l2_.size() + 63) / 64, 0);
    l0_ = 0;
    large_.clear();
    large_.reserve(max_large);
    count_ = 0;
  }

  /// Raises the capacity for large runs (after growth). Throws std::bad_alloc.
  void reserve_large(std::size_t max_large) { large_.reserve(max_large); }

  std::uint64_t exact_limit() const noexcept { return limit_; }
  std::size_t count() const noexcept { return count_; }

  void insert(std::uint32_t idx) noexcept {
    run_node& n = (*nodes_)[idx];
    ++count_;
    if (n.length < limit_) {
      const std::uint32_t head = heads_[n.length];
      n.bin_prev = nil_node;
      n.bin_next = head;
      if (head != nil_node) {
        (*nodes_)[head].bin_prev = idx;
      } else {
        set_bit(n.length);
      }
      heads_[n.length] = idx;
      return;
    }
    const large_entry e{n.length, n.start, idx};
    large_.insert(std::lower_bound(large_.begin(), large_.end(), e), e);
  }

  void remove(std::uint32_t idx) noexcept {
    run_node& n = (*nodes_)[idx];
    --count_;
    if (n.length < limit_) {
      if (n.bin_prev != nil_node) {
        (*nodes_)[n.bin_prev].bin_next = n.bin_next;
      } else {
        heads_[n.length] = n.bin_next;
        if (n.bin_next == nil_node) clear_bit(n.length);
      }
      if (n.bin_next != nil_node) (*nodes_)[n.bin_next].bin_prev = n.bin_prev;
      n.bin_prev = n.bin_next = nil_node;
      return;
    }
    const large_entry e{n.length, n.start, idx};
    auto it = std::lower_bound(large_.begin(), large_.end(), e);
    large_.erase(it);
  }

  /// A free run of the smallest length >= `blocks` (lowest address among long runs of
  /// equal length, most recently freed among short ones), or nil_node.
  std::uint32_t best(std::uint64_t blocks) const noexcept {
    if (blocks < limit_) {
      const std::uint64_t b = first_set_from(blocks);
      if (b != none) return heads_[b];
      return large_.empty() ? nil_node : large_.front().idx;
    }
    auto it = std::lower_bound(large_.begin(), large_.end(), large_entry{blocks, 0, 0});
    return it == large_.end() ? nil_node : it->idx;
  }

  /// Length in blocks of the longest free run; 0 when none.
  std::uint64_t largest() const noexcept {
    if (!large_.empty()) return large_.back().length;
    if (l0_ == 0) return 0;
    const std::uint64_t w1 = 63 - std::countl_zero(l0_);
    const std::uint64_t w2 = (w1 << 6) | (63 - std::countl_zero(l1_[w1]));
    return (w2 << 6) | (63 - std::countl_zero(l2_[w2]));
  }

  /// Throws std::logic_error unless the index holds exactly the free runs in `free_runs`
  /// (a sorted vector of node indices) with consistent links and bitmaps.
  void check(const std::vector<std::uint32_t>& free_runs) const {
    std::vector<std::uint32_t> seen;
    for (std::size_t w = 0; w < l2_.size(); ++w) {
      std::uint64_t expected = 0;
      for (std::size_t b = 0; b < 64; ++b) {
        expected |= static_cast<std::uint64_t>(heads_[w * 64 + b] != nil_node) << b;
      }
      if (expected != l2_[w]) fail("bitmap word " + std::to_string(w) + " != its bins");
    }
    for (std::uint64_t len = first_set_from(0); len != none;
         len = len + 1 < limit_ ? first_set_from(len + 1) : none) {
      std::uint32_t prev = nil_node;
      for (std::uint32_t i = heads_[len]; i != nil_node; i = (*nodes_)[i].bin_next) {
        const run_node& n = (*nodes_)[i];
        if (n.length != len || n.state != run_state::free || n.bin_prev != prev) {
          fail("bin " + std::to_string(len) + " holds node " + std::to_string(i) + " of length " +
               std::to_string(n.length));
        }
        seen.push_back(i);
        prev = i;
        if (seen.size() > nodes_->size()) fail("cycle in bin " + std::to_string(len));
      }
    }
    for (std::size_t w = 0; w < l2_.size(); ++w) {
      if (((l1_[w >> 6] >> (w & 63)) & 1) != (l2_[w] != 0)) fail("level-1 bitmap");
    }
    for (std::size_t w = 0; w < l1_.size(); ++w) {
      if (((l0_ >> w) & 1) != (l1_[w] != 0)) fail("level-0 bitmap");
    }
    if (!std::is_sorted(large_.begin(), large_.end())) fail("large runs out of order");
    for (const auto& e : large_) {
      const run_node& n = (*nodes_)[e.idx];
      if (n.length != e.length || n.start != e.start || n.state != run_state::free ||
          n.length < limit_) {
        fail("large entry for node " + std::to_string(e.idx));
      }
      seen.push_back(e.idx);
    }
    std::sort(seen.begin(), seen.end());
    if (seen != free_runs) fail("size index does not hold exactly the free runs");
    if (count_ != free_runs.size()) fail("free run count");
  }

 private:
  static constexpr std::uint64_t none = UINT64_MAX;

  struct large_entry {
    std::uint64_t length;
    std::uint64_t start;
    std::uint32_t idx;
    bool operator<(const large_entry& o) const noexcept {
      return length != o.length ? length < o.length : start < o.start;
    }
  };

  [[noreturn]] static void fail(const std::string& what) {
    throw std::logic_error("device heap size index: " + what);
  }

  void set_bit(std::uint64_t i) noexcept {
    const std::uint64_t w = i >> 6;
    l2_[w] |= 1ull << (i & 63);
    l1_[w >> 6] |= 1ull << (w & 63);
    l0_ |= 1ull << (w >> 6);
  }

  void clear_bit(std::uint64_t i) noexcept {
    const std::uint64_t w = i >> 6;
    l2_[w] &= ~(1ull << (i & 63));
    if (l2_[w] != 0) return;
    l1_[w >> 6] &= ~(1ull << (w & 63));
    if (l1_[w >> 6] != 0) return;
    l0_ &= ~(1ull << (w >> 6));
  }

  // The lowest set bit >= i, or none.
  std::uint64_t first_set_from(std::uint64_t i) const noexcept {
    std::uint64_t w = i >> 6;
    std::uint64_t m = l2_[w] & (~0ull << (i & 63));
    if (m != 0) return (w << 6) | std::countr_zero(m);
    const std::uint64_t i1 = w + 1;  // the next level-2 word
    if (i1 >= l2_.size()) return none;
    std::uint64_t w1 = i1 >> 6;
    m = l1_[w1] & (~0ull << (i1 & 63));
    if (m == 0) {
      const std::uint64_t i0 = w1 + 1;  // the next level-1 word
      if (i0 >= l1_.size()) return none;
      m = l0_ & (~0ull << i0);
      if (m == 0) return none;
      w1 = std::countr_zero(m);
      m = l1_[w1];
    }
    w = (w1 << 6) | std::countr_zero(m);
    return (w << 6) | std::countr_zero(l2_[w]);
  }

  std::vector<run_node>* nodes_ = nullptr;
  std::uint64_t limit_ = 0;           // lengths below this have exact bins
  std::vector<std::uint32_t> heads_;  // bin by length -> first node, or nil_node
  std::vector<std::uint64_t> l2_;     // bit per bin: non-empty
  std::vector<std::uint64_t> l1_;     // bit per l2_ word: non-zero
  std::uint64_t l0_ = 0;              // bit per l1_ word: non-zero
  std::vector<large_entry> large_;    // runs >= limit_, sorted by (length, start)
  std::size_t count_ = 0;             // free runs held
};

}  // namespace memweave::detail
