// The device heap (SuperNeurons §3.2.1, with best-fit in place of the paper's first-fit).
//
// Shape. The heap's address space is the concatenation of its arenas, counted in blocks.
// Every maximal run of blocks, free or allocated, is one 56-byte node in a slab (a vector
// of nodes linked by 32-bit indices, with a free list of unused nodes), so the metadata
// grows with the number of runs, never with the arena: an 80 GB arena of 75 M blocks costs
// what its live allocations cost. Indexes over the nodes:
//  - address order: each node links to its neighbours in the same arena (addr_prev/next),
//    so coalescing a freed run with both neighbours is O(1);
//  - size order: free runs by exact length in bins found through a 3-level bitmap (O(1)
//    exact best-fit below 2^18 blocks) and a short sorted vector for longer runs
//    (device_heap_size_index.hpp);
//  - pointer -> node: an open-addressing hash table (device_heap_ptr_table.hpp);
//  - fit_policy::first only: each arena's free runs as a list in address order, walked
//    from the lowest address as the paper does.
// Why this shape (measured, 2 shared cores, CPU time per malloc+free pair, log-uniform
// 1 KiB..512 MiB sizes with random lifetimes at 100 / 1k / 10k live, and the synthetic
// training trace at 10k live): a best-fit over std::map (by address) + std::set (by size,
// address) costs 360 / 460 / 750 ns and 138 ns on the trace; the same trees on a
// std::pmr::unsynchronized_pool_resource, 390 / 500 / 800 and 170 ns (the mallocs were
// not the cost: ~14 dependent cache misses per tree operation, several per pair, were).
// This design: 90 / 125 / 140 ns and 55 ns. Boundary tags were not an option: they need
// per-block metadata on the host, since device memory cannot hold them. What remains
// on random lengths is about one cache miss per bin touched (the 1 MiB bin-head array
// indexed by a fresh length); on the trace, lengths repeat and bins stay cached. Best-fit
// is exact: the smallest run that fits; ties go to the most recently freed run for
// short lengths and to the lowest address for long ones.
//
// Invariants (check_invariants() verifies them all): the runs of each arena tile it
// exactly, in address order; no two free runs are adjacent (full coalescing); the size
// index (and, for first-fit, the free lists) holds exactly the free runs; the pointer
// table holds exactly the allocated runs; bytes_in_use is the sum of allocated runs.
// Every fallible step (host memory for the slab, the table, a new arena) is done before
// the first mutation, so a failure changes nothing but the failure count.
//
// Thread safety. One mutex (mu_) guards all mutable state: the nodes, the indexes, the
// statistics, the first-fit list heads and the trace pointer. The arena descriptors are
// append-only and published with a release store of arena_count_, so owns() and
// offset_of() read them without the mutex. The trace's file mutex is only ever taken
// while holding mu_ or after it (order: mu_ -> trace file mutex), and the formatting and
// writing of a trace batch happen after mu_ is released.
#include "memweave/alloc/device_heap.hpp"

#include <array>
#include <atomic>
#include <bit>
#include <cinttypes>
#include <cstdio>
#include <mutex>
#include <utility>

#include "alloc/device_heap_ptr_table.hpp"
#include "alloc/device_heap_size_index.hpp"
#include "alloc/trace_writer.hpp"
#include "memweave/core/config.hpp"
#include "memweave/core/log.hpp"
#include "memweave/core/units.hpp"

namespace memweave {

bool valid_block_bytes(std::size_t bytes) noexcept {
  return bytes >= 256 && std::has_single_bit(bytes);
}

const char* to_string(fit_policy fit) noexcept {
  return fit == fit_policy::first ? "first" : "best";
}

namespace {

constexpr std::size_t max_arenas = 256;
constexpr std::uint32_t nil = detail::nil_node;
using detail::run_node;
using detail::run_state;

std::string pointer_text(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

std::string pointer_text(std::uintptr_t p) {
  return pointer_text(reinterpret_cast<void*>(p));
}

std::string bytes_text(std::size_t b) {
  return format_bytes(b) + " (" + std::to_string(b) + " bytes)";
}

void log_noexcept(log_level level, const std::string& message) noexcept {
  log(level, message);
}

// A message built and logged without letting an allocation failure escape.
template <class F>
void log_built(log_level level, F&& build) noexcept {
  if (!log_enabled(level)) return;
  try {
    log(level, build());
  } catch (...) {
  }
}

}  // namespace

heap_options heap_options::from_environment() {
  heap_options o;
  if (auto v = option_bytes("MEMWEAVE_POOL_BYTES")) o.pool_bytes = *v;
  if (auto v = option_double("MEMWEAVE_POOL_FRACTION")) o.pool_fraction = *v;
  if (auto v = option_bytes("MEMWEAVE_BLOCK_BYTES")) {
    if (!valid_block_bytes(*v)) {
      throw invalid_argument(
          "MEMWEAVE_BLOCK_BYTES=" + option_raw("MEMWEAVE_BLOCK_BYTES").value_or("") + " is " +
          std::to_string(*v) +
          " bytes, not a power of two >= 256; use 256, 512, 1024 (the "
          "default), 4096, ... or unset it");
    }
    o.block_bytes = *v;
  }
  o.fit = option_string("MEMWEAVE_FIT") == "first" ? fit_policy::first : fit_policy::best;
  if (auto v = option_bytes("MEMWEAVE_POOL_GROW")) o.grow_bytes = *v;
  o.trace_path = option_string("MEMWEAVE_TRACE");
  return o;
}

class device_heap_impl {
 public:
  device_heap_impl(device& dev, const heap_options& options);
  ~device_heap_impl();

  // What a failed allocation saw, taken under the same lock as the attempt.
  struct failure_info {
    std::string message;  // describe_failure's text
    std::size_t free_bytes = 0;
    std::size_t largest_free_run = 0;
  };
  // On failure, when `failure` is non-null, fills it.
  void* allocate(std::size_t bytes, int stream, failure_info* failure) noexcept;
  // On an invalid pointer, when `why` is non-null, fills it with the reason.
  status deallocate(void* p, int stream, std::string* why) noexcept;
  void count_invalid_free(const void* p, std::string* why) noexcept;

  bool owns(const void* p) const noexcept { return arena_of(p) != max_arenas; }
  std::size_t allocation_size(const void* p) const noexcept;
  std::size_t offset_of(const void* p) const noexcept;
  heap_stats stats() const noexcept;
  void reset_peak() noexcept;
  std::size_t largest_free_run() const noexcept;
  std::size_t block_bytes() const noexcept { return block_; }
  fit_policy fit() const noexcept { return fit_; }
  std::size_t round_up(std::size_t bytes) const noexcept;
  std::string describe_failure(std::size_t bytes) const;
  void start_trace(const std::string& path, const std::string& knob);
  void stop_trace() noexcept { replace_trace(nullptr); }
  device& get_device() const noexcept { return dev_; }
  std::vector<heap_run> runs() const;
  void check_invariants() const;

 private:
  struct arena_info {
    std::uintptr_t base = 0;        // device pointer of the arena
    std::size_t bytes = 0;          // blocks * block_
    std::uint64_t first_block = 0;  // where it starts in the concatenated address space
    std::uint64_t blocks = 0;
    std::uint32_t first_node = nil;  // the run at its start (never changes: merges keep
                                     // the lower node, splits keep the node at the start)
  };

  // --- all below with mu_ held ---
  void* allocate_locked(std::size_t bytes, int stream) noexcept;
  status deallocate_locked(void* p, int stream, std::string* why) noexcept;
  std::uint64_t blocks_for(std::size_t bytes) const noexcept;
  std::uint32_t find_run(std::uint64_t blocks) const noexcept;
  bool grow(std::uint64_t blocks) noexcept;
  void add_arena(std::size_t bytes);  // throws; changes nothing on failure
  bool reserve_node() noexcept;
  std::uint32_t new_node() noexcept;
  void release_node(std::uint32_t idx) noexcept;
  std::uintptr_t pointer_of(const run_node& n) const noexcept {
    const arena_info& a = arenas_[n.arena];
    return a.base + static_cast<std::uintptr_t>((n.start - a.first_block) << block_shift_);
  }
  void free_list_unlink(std::uint32_t idx) noexcept;
  void free_list_replace(std::uint32_t old_idx, std::uint32_t new_idx) noexcept;
  void free_list_insert(std::uint32_t idx) noexcept;
  std::string describe_failure_locked(std::size_t bytes) const;
  std::string diagnose_locked(std::uintptr_t p) const;
  heap_stats stats_locked() const noexcept;
  void trace_locked(char op, const run_node& n, int stream) noexcept {
    if (trace_ && trace_->append(op, n.start << block_shift_, n.requested, stream)) {
      trace_flush_due_ = true;
    }
  }
  // Writes a full trace batch after releasing `lk` (which holds mu_).
  void flush_trace(std::unique_lock<std::mutex>& lk) noexcept;
  void replace_trace(std::shared_ptr<detail::trace_writer> next) noexcept;

  // Lock-free: the arena holding p, or max_arenas.
  std::size_t arena_of(const void* p) const noexcept {
    const auto u = reinterpret_cast<std::uintptr_t>(p);
    const std::size_t n = arena_count_.load(std::memory_order_acquire);
    for (std::size_t i = 0; i < n; ++i) {
      if (u >= arenas_[i].base && u - arenas_[i].base < arenas_[i].bytes) return i;
    }
    return max_arenas;
  }

  device& dev_;
  const std::size_t block_;     // block bytes, a power of two
  const unsigned block_shift_;  // log2(block_)
  const fit_policy fit_;
  const std::size_t grow_bytes_;                                  // 0 = never grow
  const std::function<void(const std::string&)> on_trace_error_;  // heap_options'
  const std::string pool_knob_;  // heap_options': what sized the pool, where a caller did
  const std::string grow_knob_;  // heap_options': what turns growth on, beside pool_knob_

  // Entries [0, arena_count_) never change once published; growth (under mu_) writes the
  // next entry and then stores arena_count_ with release order.
  std::array<arena_info, max_arenas> arenas_{};
  std::atomic<std::size_t> arena_count_{0};

  mutable std::mutex mu_;                               // guards every member below
  std::vector<run_node> nodes_;                         // the slab
  std::uint32_t unused_head_ = nil;                     // unused nodes, linked through bin_next
  std::size_t used_nodes_ = 0;                          // nodes holding a run
  detail::device_heap_size_index sizes_;                // free runs by length
  detail::device_heap_ptr_table table_;                 // allocated runs by pointer
  std::array<std::uint32_t, max_arenas> free_heads_{};  // first-fit: lowest free run per arena
  std::uint64_t total_blocks_ = 0;                      // blocks of all arenas
  std::size_t in_use_ = 0;                              // bytes of allocated runs
  std::size_t peak_ = 0;
  std::uint64_t allocations_ = 0, frees_ = 0, failures_ = 0, invalid_frees_ = 0;
  std::string growth_note_;                      // why the last growth failed, for OOM messages
  std::shared_ptr<detail::trace_writer> trace_;  // null when not tracing
  bool trace_flush_due_ = false;                 // trace_'s buffer is full
};

// ---------------------------------------------------------------- construction

device_heap_impl::device_heap_impl(device& dev, const heap_options& options)
    : dev_(dev),
      block_(options.block_bytes),
      block_shift_(static_cast<unsigned>(std::countr_zero(options.block_bytes))),
      fit_(options.fit),
      grow_bytes_(options.grow_bytes),
      on_trace_error_(options.on_trace_error),
      pool_knob_(options.pool_knob),
      grow_knob_(options.grow_knob) {
  MEMWEAVE_EXPECTS(valid_block_bytes(options.block_bytes),
                   "heap_options::block_bytes = " + std::to_string(options.block_bytes) +
                       " is not a power of two >= 256; use 256, 512, 1024 (the default), "
                       "4096, ...");
  std::size_t want = options.pool_bytes;
  const std::string knob = options.pool_knob.empty() ? "MEMWEAVE_POOL_BYTES" : options.pool_knob;
  std::string source = "heap_options::pool_bytes (" + knob + ")";
  std::string remedy = "lower " + knob;
  if (options.pool_knob.empty()) remedy += " or MEMWEAVE_POOL_FRACTION";
  if (want == 0) {
    MEMWEAVE_EXPECTS(options.pool_fraction > 0.0 && options.pool_fraction <= 1.0,
                     "heap_options::pool_fraction = " + format_number(options.pool_fraction) +
                         " is not in (0, 1]; use e.g. 0.9 (the default), or set pool_bytes");
    const memory_info info = dev.memory();
    want = static_cast<std::size_t>(options.pool_fraction * static_cast<double>(info.free_bytes));
    source = format_number(options.pool_fraction) + " x the device's free memory " +
             bytes_text(info.free_bytes) + " (" +
             (options.pool_knob.empty() ? "MEMWEAVE_POOL_FRACTION" : options.pool_knob) + ")";
  }
  // From the device's free memory, a pool size alone cannot help where the device is that
  // small: its size is what to change (it named only the pool; session 48's hostile run).
  const std::string small_device = options.pool_bytes == 0 && dev.memory().total_bytes < block_
                                       ? ", and a device of at least that (" + dev.name() +
                                             "; on host and null its size is MEMWEAVE_DEVICE_BYTES)"
                                       : "";
  MEMWEAVE_EXPECTS(want >= block_, "the device heap's arena would be less than one block of " +
                                       std::to_string(block_) + " bytes: " + std::to_string(want) +
                                       " bytes, from " + source + "; give " + knob +
                                       " at least one block" + small_device);
  want = want / block_ * block_;
  const std::uint64_t blocks = want / block_;
  const std::uint64_t limit = std::clamp<std::uint64_t>(
      std::bit_ceil(blocks + 1), 4096, detail::device_heap_size_index::max_exact_limit);
  nodes_.reserve(1024);
  sizes_.init(&nodes_, limit, 0);
  free_heads_.fill(nil);
  try {
    add_arena(want);
  } catch (const out_of_memory& e) {
    throw out_of_memory("the device heap could not take its arena of " + bytes_text(want) +
                            " (from " + source + ") from " + dev.name() + ": " + e.what() + "; " +
                            remedy,
                        want, dev.memory().free_bytes, 0);
  }
  if (!options.trace_path.empty()) {
    try {
      start_trace(options.trace_path, options.trace_knob);
    } catch (...) {
      dev_.deallocate(reinterpret_cast<void*>(arenas_[0].base), arenas_[0].bytes);
      throw;
    }
  }
}

device_heap_impl::~device_heap_impl() {
  stop_trace();
  const std::size_t live = table_.size();
  if (live != 0) {
    log_built(log_level::info, [&] {
      return "device heap destroyed with " + std::to_string(live) + " live allocations (" +
             bytes_text(in_use_) + "); their memory goes back to the device";
    });
  }
  const std::size_t n = arena_count_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < n; ++i) {
    dev_.deallocate(reinterpret_cast<void*>(arenas_[i].base), arenas_[i].bytes);
  }
}

void device_heap_impl::add_arena(std::size_t bytes) {
  const std::size_t n = arena_count_.load(std::memory_order_relaxed);
  if (n == max_arenas) {
    throw out_of_memory("the heap already has " + std::to_string(max_arenas) + " arenas; raise " +
                            (grow_knob_.empty() ? std::string("MEMWEAVE_POOL_GROW") : grow_knob_) +
                            " so that each is larger",
                        bytes, 0, 0);
  }
  const std::uint64_t blocks = bytes / block_;
  // The device first (it refuses absurd sizes), then the host-side reservations, which
  // are proportional to the arena: the long-run index holds at most one entry per
  // exact_limit blocks. If those fail, the arena goes back and nothing has changed.
  void* base = dev_.allocate(bytes);
  if (base == nullptr) throw out_of_memory("the device returned no memory", bytes, 0, 0);
  try {
    sizes_.reserve_large((total_blocks_ + blocks) / sizes_.exact_limit() + 1);
    if (!reserve_node()) throw std::bad_alloc();
  } catch (...) {
    dev_.deallocate(base, bytes);
    throw;
  }
  const std::uint32_t idx = new_node();
  run_node& node = nodes_[idx];
  node.start = total_blocks_;
  node.length = blocks;
  node.arena = static_cast<std::uint32_t>(n);
  node.state = run_state::free;
  arenas_[n] =
      arena_info{reinterpret_cast<std::uintptr_t>(base), bytes, total_blocks_, blocks, idx};
  sizes_.insert(idx);
  if (fit_ == fit_policy::first) free_heads_[n] = idx;
  total_blocks_ += blocks;
  arena_count_.store(n + 1, std::memory_order_release);
}

bool device_heap_impl::grow(std::uint64_t blocks) noexcept {
  const std::size_t need = static_cast<std::size_t>(blocks) << block_shift_;
  // grow_bytes rounded up to whole blocks, or down where that would wrap (memweave_config
  // can ask for SIZE_MAX): the arena is then too large to take, and the heap does not grow.
  const std::size_t grow = grow_bytes_ > SIZE_MAX - (block_ - 1)
                               ? grow_bytes_ / block_ * block_
                               : (grow_bytes_ + block_ - 1) / block_ * block_;
  const std::size_t bytes = std::max(need, grow);
  try {
    add_arena(bytes);
    growth_note_.clear();
    log_built(log_level::info, [&] {
      return "device heap grew by an arena of " + bytes_text(bytes) + " (now " +
             std::to_string(arena_count_.load()) + " arenas)";
    });
    return true;
  } catch (const std::exception& e) {
    try {
      growth_note_ = "growing by a further arena of " + bytes_text(bytes) + " failed: " + e.what();
    } catch (...) {
    }
    return false;
  }
}

// ---------------------------------------------------------------- nodes

bool device_heap_impl::reserve_node() noexcept {
  if (unused_head_ != nil || nodes_.size() < nodes_.capacity()) return true;
  if (nodes_.size() >= nil - 1) return false;
  try {
    nodes_.reserve(std::min<std::size_t>(nodes_.capacity() * 2, nil - 1));
    return true;
  } catch (...) {
    return false;
  }
}

std::uint32_t device_heap_impl::new_node() noexcept {
  ++used_nodes_;
  if (unused_head_ != nil) {
    const std::uint32_t idx = unused_head_;
    unused_head_ = nodes_[idx].bin_next;
    nodes_[idx] = run_node{};
    return idx;
  }
  nodes_.emplace_back();  // capacity reserved by reserve_node(): no reallocation
  return static_cast<std::uint32_t>(nodes_.size() - 1);
}

void device_heap_impl::release_node(std::uint32_t idx) noexcept {
  --used_nodes_;
  nodes_[idx] = run_node{};
  nodes_[idx].bin_next = unused_head_;
  unused_head_ = idx;
}

// ---------------------------------------------------------------- first-fit lists

void device_heap_impl::free_list_unlink(std::uint32_t idx) noexcept {
  run_node& n = nodes_[idx];
  if (n.free_prev != nil) {
    nodes_[n.free_prev].free_next = n.free_next;
  } else {
    free_heads_[n.arena] = n.free_next;
  }
  if (n.free_next != nil) nodes_[n.free_next].free_prev = n.free_prev;
  n.free_prev = n.free_next = nil;
}

void device_heap_impl::free_list_replace(std::uint32_t old_idx, std::uint32_t new_idx) noexcept {
  run_node& o = nodes_[old_idx];
  run_node& n = nodes_[new_idx];
  n.free_prev = o.free_prev;
  n.free_next = o.free_next;
  if (o.free_prev != nil) {
    nodes_[o.free_prev].free_next = new_idx;
  } else {
    free_heads_[o.arena] = new_idx;
  }
  if (o.free_next != nil) nodes_[o.free_next].free_prev = new_idx;
  o.free_prev = o.free_next = nil;
}

// A freed run with no free neighbour: find its place by stepping outwards along the
// address list, both ways at once, to the nearest free run (the paper's list would be
// searched too; this is the price of keeping it in address order).
void device_heap_impl::free_list_insert(std::uint32_t idx) noexcept {
  run_node& n = nodes_[idx];
  std::uint32_t back = n.addr_prev;
  std::uint32_t fwd = n.addr_next;
  while (back != nil || fwd != nil) {
    if (back != nil) {
      run_node& b = nodes_[back];
      if (b.state == run_state::free) {
        n.free_prev = back;
        n.free_next = b.free_next;
        if (b.free_next != nil) nodes_[b.free_next].free_prev = idx;
        b.free_next = idx;
        return;
      }
      back = b.addr_prev;
    }
    if (fwd != nil) {
      run_node& f = nodes_[fwd];
      if (f.state == run_state::free) {
        n.free_next = fwd;
        n.free_prev = f.free_prev;
        if (f.free_prev != nil) {
          nodes_[f.free_prev].free_next = idx;
        } else {
          free_heads_[n.arena] = idx;
        }
        f.free_prev = idx;
        return;
      }
      fwd = f.addr_next;
    }
  }
  n.free_prev = n.free_next = nil;
  free_heads_[n.arena] = idx;
}

// ---------------------------------------------------------------- allocate / free

std::uint64_t device_heap_impl::blocks_for(std::size_t bytes) const noexcept {
  if (bytes > SIZE_MAX - (block_ - 1)) return 0;
  return (bytes + block_ - 1) >> block_shift_;
}

std::size_t device_heap_impl::round_up(std::size_t bytes) const noexcept {
  return static_cast<std::size_t>(blocks_for(bytes)) << block_shift_;
}

std::uint32_t device_heap_impl::find_run(std::uint64_t blocks) const noexcept {
  if (fit_ == fit_policy::best) return sizes_.best(blocks);
  const std::size_t n = arena_count_.load(std::memory_order_relaxed);
  for (std::size_t a = 0; a < n; ++a) {
    for (std::uint32_t i = free_heads_[a]; i != nil; i = nodes_[i].free_next) {
      if (nodes_[i].length >= blocks) return i;
    }
  }
  return nil;
}

void* device_heap_impl::allocate_locked(std::size_t bytes, int stream) noexcept {
  const std::uint64_t need = blocks_for(bytes);
  if (need == 0) {  // larger than the address space
    ++failures_;
    return nullptr;
  }
  // Reserve host memory for a split node and a table slot before changing anything.
  try {
    table_.reserve_one();
  } catch (...) {
    ++failures_;
    return nullptr;
  }
  if (!reserve_node()) {
    ++failures_;
    return nullptr;
  }
  std::uint32_t idx = find_run(need);
  if (idx == nil && grow_bytes_ != 0 && grow(need)) idx = find_run(need);
  if (idx == nil) {
    ++failures_;
    return nullptr;
  }
  sizes_.remove(idx);
  if (nodes_[idx].length > need) {
    const std::uint32_t r = new_node();
    run_node& n = nodes_[idx];
    run_node& rest = nodes_[r];
    rest.start = n.start + need;
    rest.length = n.length - need;
    rest.arena = n.arena;
    rest.state = run_state::free;
    rest.addr_prev = idx;
    rest.addr_next = n.addr_next;
    if (n.addr_next != nil) nodes_[n.addr_next].addr_prev = r;
    n.addr_next = r;
    n.length = need;
    sizes_.insert(r);
    if (fit_ == fit_policy::first) free_list_replace(idx, r);
  } else if (fit_ == fit_policy::first) {
    free_list_unlink(idx);
  }
  run_node& n = nodes_[idx];
  n.state = run_state::allocated;
  n.requested = bytes;
  in_use_ += static_cast<std::size_t>(need) << block_shift_;
  if (in_use_ > peak_) peak_ = in_use_;
  ++allocations_;
  const std::uintptr_t p = pointer_of(n);
  table_.insert(p, idx);
  trace_locked('a', n, stream);
  return reinterpret_cast<void*>(p);
}

status device_heap_impl::deallocate_locked(void* p, int stream, std::string* why) noexcept {
  const auto u = reinterpret_cast<std::uintptr_t>(p);
  const std::uint32_t idx = table_.take(u);
  if (idx == nil) {
    ++invalid_frees_;
    if (why != nullptr) {
      try {
        *why = diagnose_locked(u);
      } catch (...) {
      }
    }
    return status::invalid_device_pointer;
  }
  run_node& n = nodes_[idx];
  in_use_ -= static_cast<std::size_t>(n.length) << block_shift_;
  ++frees_;
  trace_locked('f', n, stream);
  n.state = run_state::free;
  n.requested = 0;
  const std::uint32_t prev = n.addr_prev;
  const std::uint32_t next = n.addr_next;
  const bool prev_free = prev != nil && nodes_[prev].state == run_state::free;
  const bool next_free = next != nil && nodes_[next].state == run_state::free;
  if (next_free) {  // absorb the next run into this one
    sizes_.remove(next);
    if (fit_ == fit_policy::first) {
      if (prev_free) {
        free_list_unlink(next);
      } else {
        free_list_replace(next, idx);
      }
    }
    run_node& nx = nodes_[next];
    n.length += nx.length;
    n.addr_next = nx.addr_next;
    if (nx.addr_next != nil) nodes_[nx.addr_next].addr_prev = idx;
    release_node(next);
  }
  if (prev_free) {  // absorb this run into the previous one
    run_node& pv = nodes_[prev];
    sizes_.remove(prev);
    pv.length += n.length;
    pv.addr_next = n.addr_next;
    if (n.addr_next != nil) nodes_[n.addr_next].addr_prev = prev;
    release_node(idx);
    sizes_.insert(prev);
  } else {
    sizes_.insert(idx);
    if (fit_ == fit_policy::first && !next_free) free_list_insert(idx);
  }
  return status::success;
}

void* device_heap_impl::allocate(std::size_t bytes, int stream, failure_info* failure) noexcept {
  if (bytes == 0) return nullptr;
  std::unique_lock lk(mu_);
  void* p = allocate_locked(bytes, stream);
  if (p == nullptr) {
    if (failure != nullptr) {
      failure->free_bytes = (static_cast<std::size_t>(total_blocks_) << block_shift_) - in_use_;
      failure->largest_free_run = static_cast<std::size_t>(sizes_.largest()) << block_shift_;
      try {
        failure->message = describe_failure_locked(bytes);
      } catch (...) {
      }
    }
    return nullptr;
  }
  if (trace_flush_due_) flush_trace(lk);
  return p;
}

status device_heap_impl::deallocate(void* p, int stream, std::string* why) noexcept {
  if (p == nullptr) return status::success;
  std::unique_lock lk(mu_);
  const status s = deallocate_locked(p, stream, why);
  if (trace_flush_due_) flush_trace(lk);
  return s;
}

void device_heap_impl::count_invalid_free(const void* p, std::string* why) noexcept {
  std::lock_guard lk(mu_);
  ++invalid_frees_;
  const auto u = reinterpret_cast<std::uintptr_t>(p);
  // Live again by now (handed out since the caller looked): the caller's reason stands.
  if (table_.find(u) != nil) return;
  try {
    *why = diagnose_locked(u);
  } catch (...) {
  }
}

// ---------------------------------------------------------------- queries

std::size_t device_heap_impl::allocation_size(const void* p) const noexcept {
  std::lock_guard lk(mu_);
  const std::uint32_t idx = table_.find(reinterpret_cast<std::uintptr_t>(p));
  return idx == nil ? 0 : static_cast<std::size_t>(nodes_[idx].length) << block_shift_;
}

std::size_t device_heap_impl::offset_of(const void* p) const noexcept {
  const std::size_t a = arena_of(p);
  if (a == max_arenas) return SIZE_MAX;
  return (static_cast<std::size_t>(arenas_[a].first_block) << block_shift_) +
         (reinterpret_cast<std::uintptr_t>(p) - arenas_[a].base);
}

heap_stats device_heap_impl::stats_locked() const noexcept {
  heap_stats s;
  s.bytes_in_use = in_use_;
  s.peak_bytes_in_use = peak_;
  s.bytes_reserved = static_cast<std::size_t>(total_blocks_) << block_shift_;
  s.free_bytes = s.bytes_reserved - in_use_;
  s.largest_free_run = static_cast<std::size_t>(sizes_.largest()) << block_shift_;
  s.fragmentation = s.free_bytes == 0 ? 0.0
                                      : 1.0 - static_cast<double>(s.largest_free_run) /
                                                  static_cast<double>(s.free_bytes);
  s.allocations = allocations_;
  s.frees = frees_;
  s.failures = failures_;
  s.invalid_frees = invalid_frees_;
  s.live_allocations = table_.size();
  s.arenas = arena_count_.load(std::memory_order_relaxed);
  s.free_runs = sizes_.count();
  return s;
}

heap_stats device_heap_impl::stats() const noexcept {
  std::lock_guard lk(mu_);
  return stats_locked();
}

void device_heap_impl::reset_peak() noexcept {
  std::lock_guard lk(mu_);
  peak_ = in_use_;
}

std::size_t device_heap_impl::largest_free_run() const noexcept {
  std::lock_guard lk(mu_);
  return static_cast<std::size_t>(sizes_.largest()) << block_shift_;
}

std::string device_heap_impl::describe_failure(std::size_t bytes) const {
  std::lock_guard lk(mu_);
  return describe_failure_locked(bytes);
}

std::string device_heap_impl::describe_failure_locked(std::size_t bytes) const {
  const heap_stats s = stats_locked();
  const std::uint64_t need = blocks_for(bytes);
  std::string m = "device heap: cannot allocate " + bytes_text(bytes);
  if (need == 0) {
    m += ", more than the address space holds";
  } else {
    m += " = " + std::to_string(need) + " blocks of " + std::to_string(block_) + " B";
  }
  char frag[32];
  std::snprintf(frag, sizeof frag, "%.1f%%", 100.0 * s.fragmentation);
  m += ": free " + bytes_text(s.free_bytes) + " in " + std::to_string(s.free_runs) +
       " runs, largest free run " + bytes_text(s.largest_free_run) + ", fragmentation " + frag +
       "; " + std::to_string(s.arenas) + (s.arenas == 1 ? " arena" : " arenas") + " of " +
       bytes_text(s.bytes_reserved) + " reserved, " + bytes_text(s.bytes_in_use) + " in " +
       std::to_string(s.live_allocations) + " live allocations.";
  if (need != 0 && s.free_bytes >= (static_cast<std::size_t>(need) << block_shift_) &&
      s.largest_free_run < (static_cast<std::size_t>(need) << block_shift_)) {
    m += " Enough is free in total but no free run is long enough (fragmentation).";
  }
  if (grow_bytes_ == 0) {
    m += " Growth is off.";
  } else if (!growth_note_.empty()) {
    m += " Growth: " + growth_note_ + ".";
  }
  // The knob that sized this pool (the executor's --budget, replay's --pool) where its
  // caller named one: the pool variables do not size it then.
  // Growth that failed taking an arena of the knob's size, larger than the request: a smaller
  // one might be had (asking to set the knob the user set would help nobody).
  const bool grown_too_far = grow_bytes_ != 0 && !growth_note_.empty() && need != 0 &&
                             grow_bytes_ > (static_cast<std::size_t>(need) << block_shift_);
  if (!pool_knob_.empty()) {
    m += " Free or evict tensors, or raise " + pool_knob_;
    if (grow_bytes_ == 0 && !grow_knob_.empty()) {
      m += ", or set " + grow_knob_ + " to let the heap take further arenas";
    } else if (grown_too_far && !grow_knob_.empty()) {
      m += ", or lower " + grow_knob_ + " to an arena the device can give";
    }
    m += ".";
    return m;
  }
  m += " Free or evict tensors, raise MEMWEAVE_POOL_BYTES or MEMWEAVE_POOL_FRACTION, or ";
  m += grown_too_far ? "lower MEMWEAVE_POOL_GROW to an arena the device can give."
                     : "set MEMWEAVE_POOL_GROW to let the heap take further arenas.";
  return m;
}

std::string device_heap_impl::diagnose_locked(std::uintptr_t p) const {
  std::string m = "device heap: cannot free " + pointer_text(p) + ": ";
  const std::size_t a = arena_of(reinterpret_cast<const void*>(p));
  if (a == max_arenas) {
    m += "it is not inside this heap's arenas (";
    const std::size_t n = arena_count_.load(std::memory_order_relaxed);
    for (std::size_t i = 0; i < n; ++i) {
      if (i != 0) m += ", ";
      m += '[';
      m += pointer_text(arenas_[i].base);
      m += ", ";
      m += pointer_text(arenas_[i].base + arenas_[i].bytes);
      m += ')';
      if (i == 3 && n > 5) {
        m += ", ... " + std::to_string(n - 4) + " more";
        break;
      }
    }
    return m +
           "): a foreign pointer, from another allocator or another (perhaps destroyed) "
           "heap; free it where it was allocated";
  }
  for (std::uint32_t i = arenas_[a].first_node; i != nil; i = nodes_[i].addr_next) {
    const run_node& n = nodes_[i];
    const std::uintptr_t start = pointer_of(n);
    const std::uintptr_t end = start + (static_cast<std::uintptr_t>(n.length) << block_shift_);
    if (p < start || p >= end) continue;
    if (n.state == run_state::allocated) {
      return m + "it is " + std::to_string(p - start) + " bytes inside the live allocation at " +
             pointer_text(start) + " (" + bytes_text(n.requested) +
             " requested): an interior pointer; free the pointer that allocate returned";
    }
    return m + "it lies in free memory of this heap (offset " +
           std::to_string(offset_of(reinterpret_cast<const void*>(p))) +
           "): freed already (a double free) or never returned by allocate";
  }
  return m + "it is inside arena " + std::to_string(a) + " but in no run (corrupt heap?)";
}

// ---------------------------------------------------------------- trace

void device_heap_impl::flush_trace(std::unique_lock<std::mutex>& lk) noexcept {
  trace_flush_due_ = false;
  std::shared_ptr<detail::trace_writer> w = trace_;
  std::vector<detail::trace_writer::record> batch = w->take();
  std::unique_lock flk(w->file_mutex());  // before letting go of mu_: keeps batches in order
  lk.unlock();
  w->write(batch);
}

void device_heap_impl::replace_trace(std::shared_ptr<detail::trace_writer> next) noexcept {
  std::shared_ptr<detail::trace_writer> old;
  std::vector<detail::trace_writer::record> batch;
  std::unique_lock<std::mutex> flk;
  {
    std::lock_guard lk(mu_);
    old = std::exchange(trace_, std::move(next));
    trace_flush_due_ = false;
    if (!old) return;
    batch = old->take();
    flk = std::unique_lock(old->file_mutex());
  }
  old->write(batch);
  if (!old->close() && on_trace_error_) {
    try {
      on_trace_error_(old->error().empty() ? std::string("heap trace incomplete") : old->error());
    } catch (...) {
      // Logged by the writer already; the caller's hook must not take the heap down.
    }
  }
}

void device_heap_impl::start_trace(const std::string& path, const std::string& knob) {
  // The running trace is finished and closed before the new file is opened: it may be the
  // same file, which opening truncates, and its batches still to be written would then land
  // over the new trace's (session 42's hostile run: a restart on the same path returned
  // success and left a file that no longer read). A new file that cannot be opened leaves no
  // trace running, the old one complete.
  replace_trace(nullptr);
  replace_trace(std::make_shared<detail::trace_writer>(path, block_, knob));
}

// ---------------------------------------------------------------- inspection

std::vector<heap_run> device_heap_impl::runs() const {
  std::lock_guard lk(mu_);
  std::vector<heap_run> out;
  out.reserve(used_nodes_);
  const std::size_t n = arena_count_.load(std::memory_order_relaxed);
  for (std::size_t a = 0; a < n; ++a) {
    for (std::uint32_t i = arenas_[a].first_node; i != nil; i = nodes_[i].addr_next) {
      const run_node& r = nodes_[i];
      out.push_back({static_cast<std::size_t>(r.start) << block_shift_,
                     static_cast<std::size_t>(r.length) << block_shift_,
                     static_cast<std::size_t>(r.requested), r.state == run_state::free, a});
      if (out.size() > used_nodes_) throw std::logic_error("device heap: cycle in address list");
    }
  }
  return out;
}

void device_heap_impl::check_invariants() const {
  std::lock_guard lk(mu_);
  auto fail = [](const std::string& what) {
    throw std::logic_error("device heap invariant broken: " + what);
  };
  const std::size_t n_arenas = arena_count_.load(std::memory_order_relaxed);
  std::vector<std::uint32_t> free_runs;
  std::size_t runs = 0, allocated = 0, in_use = 0;
  std::uint64_t blocks = 0;
  for (std::size_t a = 0; a < n_arenas; ++a) {
    const arena_info& ar = arenas_[a];
    if (ar.first_block != blocks) fail("arena " + std::to_string(a) + " first block");
    std::uint64_t at = ar.first_block;
    std::uint32_t prev = nil;
    bool prev_free = false;
    std::uint32_t free_expected = fit_ == fit_policy::first ? free_heads_[a] : nil;
    std::uint32_t free_prev = nil;
    for (std::uint32_t i = ar.first_node; i != nil; i = nodes_[i].addr_next) {
      const run_node& r = nodes_[i];
      const std::string where = "run " + std::to_string(i) + " at block " + std::to_string(at);
      if (++runs > used_nodes_) fail("cycle or stray nodes in arena " + std::to_string(a));
      if (r.arena != a || r.start != at || r.length == 0 || r.addr_prev != prev) {
        fail(where + ": start/length/arena/back link");
      }
      if (r.state == run_state::free) {
        if (prev_free) fail(where + ": two adjacent free runs (missed coalescing)");
        free_runs.push_back(i);
        if (fit_ == fit_policy::first) {
          if (i != free_expected || r.free_prev != free_prev) {
            fail(where + ": first-fit free list out of address order");
          }
          free_prev = i;
          free_expected = r.free_next;
        }
      } else if (r.state == run_state::allocated) {
        ++allocated;
        in_use += static_cast<std::size_t>(r.length) << block_shift_;
        if (table_.find(pointer_of(r)) != i) fail(where + ": allocated run not in pointer table");
        if (r.requested == 0 || round_up(r.requested) != r.length << block_shift_) {
          fail(where + ": requested bytes do not round to the run");
        }
      } else {
        fail(where + ": unused node in the address list");
      }
      prev_free = r.state == run_state::free;
      at += r.length;
      prev = i;
    }
    if (at != ar.first_block + ar.blocks) fail("arena " + std::to_string(a) + " not tiled");
    if (fit_ == fit_policy::first && free_expected != nil) fail("first-fit list has extra runs");
    blocks += ar.blocks;
  }
  if (blocks != total_blocks_) fail("total blocks");
  if (runs != used_nodes_)
    fail("nodes in use " + std::to_string(used_nodes_) + " != runs " + std::to_string(runs));
  if (allocated != table_.size()) fail("pointer table size != allocated runs");
  if (in_use != in_use_)
    fail("bytes_in_use " + std::to_string(in_use_) + " != recount " + std::to_string(in_use));
  if (peak_ < in_use_) fail("peak below bytes in use");
  std::sort(free_runs.begin(), free_runs.end());
  sizes_.check(free_runs);
  std::size_t unused = 0;
  for (std::uint32_t i = unused_head_; i != nil; i = nodes_[i].bin_next) {
    if (nodes_[i].state != run_state::unused || ++unused > nodes_.size()) fail("slab free list");
  }
  if (unused + used_nodes_ != nodes_.size()) fail("slab accounting");
}

// ---------------------------------------------------------------- public class

device_heap::device_heap(device& dev, const heap_options& options)
    : impl_(std::make_unique<device_heap_impl>(dev, options)) {}

device_heap::~device_heap() = default;

void* device_heap::try_allocate(std::size_t bytes, int stream) noexcept {
  return impl_->allocate(bytes, stream, nullptr);
}

void* device_heap::allocate(std::size_t bytes, int stream) noexcept {
  device_heap_impl::failure_info failure;
  void* p = impl_->allocate(bytes, stream, &failure);
  if (p == nullptr && !failure.message.empty()) log_noexcept(log_level::warn, failure.message);
  return p;
}

void* device_heap::allocate_or_throw(std::size_t bytes, int stream) {
  if (bytes == 0) return nullptr;
  device_heap_impl::failure_info failure;
  void* p = impl_->allocate(bytes, stream, &failure);
  if (p == nullptr) {
    if (failure.message.empty()) {
      failure.message = "device heap: cannot allocate " + std::to_string(bytes) + " bytes";
    }
    throw out_of_memory(failure.message, bytes, failure.free_bytes, failure.largest_free_run);
  }
  return p;
}

status device_heap::deallocate(void* p, int stream) noexcept {
  std::string why;
  const status s = impl_->deallocate(p, stream, &why);
  if (s != status::success) log_noexcept(log_level::warn, why);
  return s;
}

void device_heap::count_invalid_free(const void* p) noexcept {
  std::string why;
  impl_->count_invalid_free(p, &why);
  if (!why.empty()) log_noexcept(log_level::warn, why);
}

void device_heap::deallocate_or_throw(void* p) {
  std::string why;
  if (impl_->deallocate(p, 0, &why) != status::success) throw invalid_pointer(why);
}

bool device_heap::owns(const void* p) const noexcept {
  return impl_->owns(p);
}
std::size_t device_heap::allocation_size(const void* p) const noexcept {
  return impl_->allocation_size(p);
}
std::size_t device_heap::offset_of(const void* p) const noexcept {
  return impl_->offset_of(p);
}
heap_stats device_heap::stats() const noexcept {
  return impl_->stats();
}
void device_heap::reset_peak() noexcept {
  impl_->reset_peak();
}
std::size_t device_heap::largest_free_run() const noexcept {
  return impl_->largest_free_run();
}
std::size_t device_heap::block_bytes() const noexcept {
  return impl_->block_bytes();
}
fit_policy device_heap::fit() const noexcept {
  return impl_->fit();
}
std::size_t device_heap::round_up(std::size_t bytes) const noexcept {
  return impl_->round_up(bytes);
}
std::string device_heap::describe_failure(std::size_t bytes) const {
  return impl_->describe_failure(bytes);
}
void device_heap::start_trace(const std::string& path, const std::string& knob) {
  impl_->start_trace(path, knob);
}
void device_heap::stop_trace() noexcept {
  impl_->stop_trace();
}
device& device_heap::get_device() const noexcept {
  return impl_->get_device();
}
std::vector<heap_run> device_heap::runs() const {
  return impl_->runs();
}
void device_heap::check_invariants() const {
  impl_->check_invariants();
}

}  // namespace memweave
