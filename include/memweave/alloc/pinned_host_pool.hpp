// Pinned (page-locked) host memory for offloaded tensors.
//
// One region is reserved up front from device::allocate_pinned (cudaHostAlloc on `cuda`,
// plain memory on `host`), and a private jemalloc arena hands out pieces of it: jemalloc
// does the allocating, the arena's extent hooks only carve the region. jemalloc is loaded
// at run time with dlopen(RTLD_LOCAL) and used only through mallocx/dallocx on that arena,
// so the host program's malloc is never replaced.
//
// jemalloc's library needs about 2.6 KB of static TLS, more than glibc keeps spare for
// libraries loaded after start-up; a process that creates a pool must therefore start with
// GLIBC_TUNABLES=glibc.rtld.optional_static_tls=16384 (or have jemalloc loaded already).
// The constructor says so when it cannot load jemalloc; runtime_available() asks first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "memweave/core/error.hpp"

namespace memweave {

class device;

/// Counters of a pinned_host_pool, read together.
struct pinned_host_stats {
  std::size_t capacity = 0;           ///< bytes of the pinned region
  std::size_t bytes_in_use = 0;       ///< sum of the usable sizes of live allocations
  std::size_t peak_bytes_in_use = 0;  ///< highest bytes_in_use since creation / reset_peak
  std::size_t live_allocations = 0;   ///< allocations not yet freed
  std::uint64_t allocations = 0;      ///< successful allocate calls
  std::uint64_t frees = 0;            ///< successful deallocate calls (nullptr not counted)
  std::uint64_t failures = 0;         ///< allocate calls that returned nullptr
  std::uint64_t invalid_frees = 0;    ///< deallocate calls with a pointer not live here
};

/// A thread-safe pool of pinned host memory. Every member may be called from any thread.
class pinned_host_pool {
 public:
  /// The smallest region accepted: jemalloc places its own metadata (2 MiB-aligned) in it.
  static constexpr std::size_t min_bytes = std::size_t{8} << 20;

  /// The GLIBC_TUNABLES setting that lets jemalloc be loaded after start-up.
  static constexpr const char* static_tls_tunable = "glibc.rtld.optional_static_tls=16384";

  /// Reserves `bytes` of pinned memory from `dev` (0 = MEMWEAVE_HOST_POOL_BYTES) and makes a
  /// jemalloc arena over it. Throws invalid_argument when bytes < min_bytes, out_of_memory
  /// when the device cannot pin that much, device_error when jemalloc cannot be loaded or
  /// the arena cannot be made (the message says why and what to do). `dev` must outlive
  /// the pool.
  pinned_host_pool(device& dev, std::size_t bytes = 0);

  /// Destroys the arena, then gives the region back. Live allocations are released with
  /// it (one warning line says how many).
  ~pinned_host_pool();

  pinned_host_pool(const pinned_host_pool&) = delete;
  pinned_host_pool& operator=(const pinned_host_pool&) = delete;

  /// At least `bytes` of pinned memory aligned to `alignment` (0 = 16; else a power of
  /// two), or nullptr when the region cannot serve it, bytes is 0, or alignment is not a
  /// power of two. Never throws.
  void* allocate(std::size_t bytes, std::size_t alignment = 0) noexcept;

  /// Frees `p`. nullptr is a no-op (success); a pointer that is not a live allocation of
  /// this pool (foreign, interior, freed twice) changes nothing and returns
  /// status::invalid_device_pointer (one warning line).
  status deallocate(void* p) noexcept;

  /// Whether `p` lies inside this pool's region (not whether it is a live allocation).
  bool owns(const void* p) const noexcept;

  /// The usable size of live allocation `p`, or 0 when `p` is not one.
  std::size_t allocation_size(const void* p) const noexcept;

  /// Bytes of the pinned region.
  std::size_t capacity() const noexcept;

  /// The largest allocation the pool could serve now, found by trying sizes downwards
  /// (within 1/16; jemalloc does not say): for a failure's message, not for a fast path.
  /// Below capacity() even when empty: jemalloc's size classes (four per doubling) leave
  /// the largest one allocation about 7/8 of the region.
  std::size_t largest_allocation() const noexcept;

  /// Sum of the usable sizes (jemalloc's sallocx) of the live allocations.
  std::size_t bytes_in_use() const noexcept;

  /// Highest bytes_in_use() since creation or the last reset_peak().
  std::size_t peak_bytes_in_use() const noexcept;

  /// Sets the peak to the current bytes_in_use().
  void reset_peak() noexcept;

  /// All counters at once.
  pinned_host_stats stats() const noexcept;

  /// The device the region came from.
  device& get_device() const noexcept;

  /// MEMWEAVE_HOST_POOL_BYTES (default 4 GiB). Throws invalid_argument on a bad value.
  static std::size_t bytes_from_environment();

  /// Whether jemalloc can be loaded into this process; when not, `why` (if given) gets the
  /// reason and the fix. Loads it on the first call; never throws.
  static bool runtime_available(std::string* why = nullptr) noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace memweave
