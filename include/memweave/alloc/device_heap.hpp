// The device heap: one arena taken from a device once, divided into blocks, served by
// best-fit (or the SuperNeurons paper's first-fit) with neighbour coalescing. This is what
// replaces cudaMalloc/cudaFree inside memweave (SuperNeurons §3.2.1).
//
// Every allocation is a whole number of blocks (heap_options::block_bytes, default 1 KiB)
// and starts block_bytes-multiples after the arena's base, so a pointer is aligned as the
// device's own allocations are (cudaMalloc: 256 B) and to block_bytes relative to the
// arena. All members are thread-safe. The heap never reads or writes the memory it hands
// out, so it works on devices whose memory the host cannot touch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "memweave/core/error.hpp"
#include "memweave/device/device.hpp"

namespace memweave {

/// How a free run is chosen for an allocation.
enum class fit_policy {
  best,   ///< the smallest free run that fits (O(1) for runs under 256 Ki blocks, else O(log))
  first,  ///< the lowest-address free run that fits (the paper's list walk; O(free runs))
};

/// "best", "first".
const char* to_string(fit_policy fit) noexcept;

/// Whether `bytes` is a block size the heap takes: a power of two of at least 256.
bool valid_block_bytes(std::size_t bytes) noexcept;

/// How to build a heap. from_environment() reads the MEMWEAVE_* variables; fields set in
/// code override them.
struct heap_options {
  std::size_t pool_bytes = 0;  ///< arena size; 0 = pool_fraction of free device memory
  /// What set pool_bytes (or, with pool_bytes 0, pool_fraction), named in the heap's errors
  /// and their remedy (empty: the MEMWEAVE_POOL_* variables; the executor's budget: "the
  /// budget, --budget"; the C API's fields).
  std::string pool_knob;
  double pool_fraction = 0.9;         ///< used when pool_bytes is 0; in (0, 1]
  std::size_t block_bytes = 1024;     ///< the unit of allocation: a power of two, >= 256
  fit_policy fit = fit_policy::best;  ///< placement policy
  std::size_t grow_bytes = 0;         ///< 0 = never grow; else add arenas of >= this size
  /// Where pool_knob is set: what turns growth on, named in the remedy while growth is off
  /// (the C API's "memweave_config.grow_bytes"); empty: none (a pool that is a budget, which
  /// growing would exceed). Without pool_knob the remedy names MEMWEAVE_POOL_GROW.
  std::string grow_knob;
  std::string trace_path;  ///< empty = no trace; else start_trace(trace_path, trace_knob)
  /// What set trace_path, named when the file cannot be opened (empty: MEMWEAVE_TRACE).
  std::string trace_knob;
  /// Called (from stop_trace() or the destructor, never throwing out) with what went wrong
  /// when a trace ends incomplete (a write failed, events were lost); the failure is also
  /// logged. A caller that reports outputs sets it: the trace is finished work that was lost.
  std::function<void(const std::string&)> on_trace_error;
  /// Reads MEMWEAVE_POOL_BYTES, MEMWEAVE_POOL_FRACTION, MEMWEAVE_BLOCK_BYTES, MEMWEAVE_FIT,
  /// MEMWEAVE_POOL_GROW and MEMWEAVE_TRACE; throws invalid_argument naming the variable.
  static heap_options from_environment();
};

/// A consistent snapshot of the heap's numbers (all bytes are whole blocks).
struct heap_stats {
  std::size_t bytes_in_use = 0;       ///< rounded bytes of the live allocations
  std::size_t peak_bytes_in_use = 0;  ///< highest bytes_in_use since construction/reset_peak
  std::size_t bytes_reserved = 0;     ///< total size of the arenas
  std::size_t free_bytes = 0;         ///< bytes_reserved - bytes_in_use
  std::size_t largest_free_run =
      0;                       ///< bytes of the largest free run (the largest possible allocation)
  double fragmentation = 0.0;  ///< 1 - largest_free_run / free_bytes (0 if none free)
  std::uint64_t allocations = 0;     ///< successful allocations
  std::uint64_t frees = 0;           ///< successful frees (null frees not counted)
  std::uint64_t failures = 0;        ///< allocations of > 0 bytes that returned nullptr
  std::uint64_t invalid_frees = 0;   ///< frees rejected (foreign, double, interior)
  std::size_t live_allocations = 0;  ///< allocations not yet freed
  std::size_t arenas = 0;            ///< arenas taken from the device (1 + growth)
  std::size_t free_runs = 0;         ///< number of maximal free runs
};

/// One maximal run of blocks, for inspection (device_heap::runs()).
struct heap_run {
  std::size_t offset = 0;     ///< bytes from the start of the heap's address space
  std::size_t bytes = 0;      ///< length (whole blocks)
  std::size_t requested = 0;  ///< bytes asked for (allocated runs), 0 for free runs
  bool free = false;          ///< free or allocated
  std::size_t arena = 0;      ///< index of the arena holding it
};

class device_heap_impl;

/// The device heap. Thread-safe; one internal mutex serialises every call.
class device_heap {
 public:
  /// Takes the arena from `dev` once: options.pool_bytes, else pool_fraction x the device's
  /// free memory, rounded down to whole blocks. Throws invalid_argument for bad options
  /// (block size, fraction, an arena under one block) and out_of_memory when the device
  /// refuses the arena; invalid_argument when the trace file cannot be opened.
  device_heap(device& dev, const heap_options& options);
  /// Flushes the trace and gives every arena back to the device. Allocations still live
  /// are reported at info level. Never throws.
  ~device_heap();
  device_heap(const device_heap&) = delete;
  device_heap& operator=(const device_heap&) = delete;

  /// An allocation of at least `bytes` (rounded to whole blocks), or nullptr when it cannot
  /// be served (a failure is counted, nothing is logged: for callers that evict and
  /// retry). 0 bytes gives nullptr without a failure, as cudaMalloc(&p, 0) does. When no
  /// free run fits and grow_bytes > 0, a further arena of max(grow_bytes, the request) is
  /// taken from the device (with the heap's lock held: the device must not call back
  /// into the heap). `stream` is recorded in the trace only: the heap does not order
  /// reuse by stream, so free memory only once the device is done with it (as cudaFree).
  void* try_allocate(std::size_t bytes, int stream = 0) noexcept;
  /// As try_allocate, and on failure logs ONE warning: describe_failure(bytes).
  void* allocate(std::size_t bytes, int stream = 0) noexcept;
  /// As try_allocate, and on failure throws out_of_memory with describe_failure's text
  /// and numbers. 0 bytes returns nullptr.
  void* allocate_or_throw(std::size_t bytes, int stream = 0);

  /// Frees an allocation. nullptr is a successful no-op. A pointer that is not the start of
  /// a live allocation of this heap (foreign, freed already, interior) is logged with the
  /// reason, counted in invalid_frees and returns status::invalid_device_pointer; the heap
  /// is otherwise unchanged.
  status deallocate(void* p, int stream = 0) noexcept;
  /// As deallocate, throwing invalid_pointer naming the pointer and why (not logged).
  void deallocate_or_throw(void* p);
  /// Counts in invalid_frees (and logs why, as deallocate does) a free its caller found
  /// invalid, changing nothing: deallocate would free the block should another thread have
  /// been handed it since the caller looked.
  void count_invalid_free(const void* p) noexcept;

  /// Whether `p` lies inside one of the arenas (allocated or not). Lock-free.
  bool owns(const void* p) const noexcept;
  /// Rounded bytes of the live allocation that starts at `p`; 0 if there is none.
  std::size_t allocation_size(const void* p) const noexcept;
  /// Bytes from the start of the heap's address space (arenas numbered as if concatenated)
  /// to `p`, as written in traces; SIZE_MAX when `p` is not inside an arena.
  std::size_t offset_of(const void* p) const noexcept;

  heap_stats stats() const noexcept;
  /// Sets peak_bytes_in_use to the current bytes_in_use.
  void reset_peak() noexcept;
  /// Bytes of the largest free run (the largest allocation that would succeed without
  /// growth). O(1).
  std::size_t largest_free_run() const noexcept;
  std::size_t block_bytes() const noexcept;
  fit_policy fit() const noexcept;
  /// `bytes` rounded up to whole blocks; 0 when that does not fit in size_t.
  std::size_t round_up(std::size_t bytes) const noexcept;
  /// The out-of-memory message for a request of `bytes` now: the request, free bytes, the
  /// largest free run, the fragmentation, the arenas, and what to do.
  std::string describe_failure(std::size_t bytes) const;

  /// Starts writing every allocation and free to `path` (see memweave/alloc/trace.hpp);
  /// a trace already running is stopped first (and stays stopped, complete, when `path`
  /// cannot be opened). Throws invalid_argument naming the path, the system's reason and
  /// `knob`, what set the path (empty: MEMWEAVE_TRACE), when it cannot be opened.
  void start_trace(const std::string& path, const std::string& knob = {});
  /// Flushes and closes the trace; a no-op when none runs.
  void stop_trace() noexcept;

  device& get_device() const noexcept;

  /// Inspection (tests, tools): every run of every arena in address order. O(runs).
  std::vector<heap_run> runs() const;
  /// Checks every internal invariant (runs tile each arena; no two free runs adjacent;
  /// the size index, the first-fit lists and the pointer table hold exactly the free or
  /// live runs; the statistics equal a recount) and throws std::logic_error naming the
  /// first one broken. O(runs + bins); for tests.
  void check_invariants() const;

 private:
  std::unique_ptr<device_heap_impl> impl_;
};

}  // namespace memweave
