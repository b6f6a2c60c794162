// The Unified Tensor Pool's transfers (SuperNeurons §3.3.1): offload a tensor to host
// memory asynchronously on the device-to-host stream and tell the executor when its device
// memory may be freed; prefetch it back on the host-to-device stream ahead of use, with
// the compute stream waiting only when the copy is not done yet.
//
// Tensors are known by an integer key, a device pointer and a size; which tensors move and
// when is the caller's policy. One engine per training run; it must be destroyed before
// the device and the host memory it uses.
//
// Where errors surface (no tensor is ever lost: a device copy is freed by the caller only
// after on_offloaded, which is called only once the host copy is known good):
// - offload(): throws out_of_memory (host memory exhausted; names the tensor and the host
//   memory's numbers) or invalid_argument; the tensor then stays on the device.
// - A copy that fails on a stream, or a verification mismatch, is detected asynchronously
//   and thrown as one device_error (naming every tensor concerned) by the NEXT call to
//   offload, prefetch, make_ready, fetch_now, wait_offloaded, wait_any_offload,
//   wait_all_offloads or check(). A failed offload never calls on_offloaded: the tensor
//   stays resident and its (partial) host copy is discarded. A failed prefetch keeps the
//   host copy. fetch_now throws its own copy's failure at once.
// - make_ready() also makes the compute stream fail (sticky, with a message naming the
//   tensor) when the prefetch it waits for failed in verify or fault-injection mode, so
//   work after it and compute.synchronize() report it.
// - Queries (has_host_copy, host_copy, pending_offloads, stats), drop_host, reset_stats and
//   the destructor never throw pending failures.
//
// Threads: every member may be called from any thread, but calls for the same key must not
// race each other (as an executor's step loop does not). on_offloaded runs on the engine's
// watcher thread with no engine lock held. On a device that runs no work (`null`), an
// offload completes within offload() (nothing to wait for or verify) unless a fault is
// injected or on_offloaded is set.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "memweave/device/device.hpp"
#include "memweave/swap/fp16_codec.hpp"
#include "memweave/swap/host_memory.hpp"

namespace memweave {

class stream_timeline;

/// How a transfer engine behaves. from_environment() reads the MEMWEAVE_* variables; fields
/// set in code override them.
struct transfer_options {
  /// Checksum every tensor at offload (the device bytes, compared with the host copy once
  /// it lands) and again after each prefetch (the device bytes, compared with the offload's
  /// checksum); a mismatch is a device_error naming the tensor and both checksums. Costs a
  /// pass over every byte moved (and on `cuda` a second copy). A no-op on `null`, where no
  /// data moves. MEMWEAVE_VERIFY_TRANSFERS.
  bool verify = false;
  /// Verify from a copy of the device bytes made into a scratch host buffer instead of
  /// reading device memory. Always so on `cuda` (device memory is not host-addressable);
  /// set it on `host` to exercise that path.
  bool verify_by_copy_back = false;
  /// Names a key in error messages ("conv3 output"); optional. Called from any thread,
  /// sometimes with the engine's lock held: it must not call into the engine.
  std::function<std::string(std::uint32_t key)> name_fn;
  /// Makes the codec of compressed (fp16) offloads, once, for the engine's device; empty =
  /// make_host_fp16_codec on `host` and `null`, none on `cuda` (a compressed offload there is
  /// then an invalid_argument; the executor gives the cuda backend's conversion kernels,
  /// engine/runtime/cuda_fp16_codec.hpp). The engine owns what it returns.
  std::function<std::unique_ptr<fp16_codec>(device&)> fp16_codec_factory;
  /// What sized the host pool, named where it runs out (the option or variable the user
  /// gave); the default names both.
  std::string pool_knob = "--host-pool or MEMWEAVE_HOST_POOL_BYTES";
  /// Reads MEMWEAVE_VERIFY_TRANSFERS; throws invalid_argument naming it when malformed.
  static transfer_options from_environment();
};

/// How a tensor crosses the link.
enum class transfer_encoding : std::uint8_t {
  exact,  ///< byte for byte
  /// An fp32 tensor travels as fp16 (half the bytes each way) and comes back as
  /// fp32(fp16(x)): lossy (relative error <= 2^-11 within range, +-inf from 65520 on; see
  /// fp16.hpp), opt-in (MEMWEAVE_SCHEDULE_COMPRESS=fp16). Verify mode checks the fp16 bytes.
  fp16,
};

/// Fault injection for tests. Copies and allocations are numbered from 1, counted since the
/// last set_faults(); 0 disables a fault.
struct transfer_faults {
  /// The Nth payload copy (offloads and prefetches/fetches together, in enqueue order)
  /// fails: its stream runs work that throws instead of copying. As with a real failure,
  /// that stream stays failed (sticky), so later transfers on it fail as well.
  std::uint64_t fail_copy = 0;
  /// The Nth payload copy lands with one byte flipped in its destination (verify mode must
  /// catch it). Not applied on `null`, nor on `cuda` to host-to-device copies.
  std::uint64_t corrupt_copy = 0;
  /// The Nth host allocation fails as if the host memory were exhausted.
  std::uint64_t fail_host_allocation = 0;
  /// After the Nth offload lands and passes verification, one byte of its host copy is
  /// flipped (corruption between offload and prefetch: the prefetch's check must catch it).
  /// Not applied on `null`.
  std::uint64_t corrupt_host_copy = 0;
};

/// What an engine has done. Counters cover the period since construction or reset_stats();
/// the fields marked "now" are the current state.
struct transfer_stats {
  std::uint64_t offloads = 0;             ///< offload copies enqueued
  std::uint64_t prefetches = 0;           ///< host-to-device copies enqueued (prefetch + fetch_now)
  std::uint64_t on_demand_fetches = 0;    ///< of those, by fetch_now
  std::uint64_t bytes_offloaded = 0;      ///< bytes of the offload copies enqueued (link bytes)
  std::uint64_t bytes_prefetched = 0;     ///< bytes of the host-to-device copies enqueued (link)
  std::uint64_t compressed_offloads = 0;  ///< of the offloads, those enqueued as fp16
  /// Device (fp32) bytes of those: each moved half of them over the link, each way.
  std::uint64_t bytes_compressed = 0;
  /// The largest relative round-trip error max |x - fp32(fp16(x))| / max(|x|, 2^-14) over the
  /// values of the compressed offloads completed (measured by the conversion itself, from the
  /// device data); +inf when a value overflowed fp16. 0 on `null` (no data) or with none.
  double max_compression_error = 0.0;
  std::uint64_t offloads_completed = 0;        ///< offloads whose host copy landed good
  std::uint64_t failed_offloads = 0;           ///< offloads that failed (copy, verification)
  std::uint64_t failed_prefetches = 0;         ///< prefetches/fetches that failed
  std::uint64_t host_allocation_failures = 0;  ///< offloads refused for lack of host memory
  std::uint64_t waits = 0;           ///< calls that blocked their thread (wait_*, fetch_now)
  double wait_seconds = 0.0;         ///< seconds those calls blocked their thread
  std::size_t pending_offloads = 0;  ///< now: offloads not yet completed
  std::size_t host_copies = 0;       ///< now: keys holding host memory
  std::size_t host_bytes = 0;        ///< now: host memory held (copies, scratch, deferred)
};

/// The transfer engine. Thread-safe (see the file comment for the one rule per key).
class transfer_engine {
 public:
  /// Called once per successful offload, after the copy landed (and was verified).
  using offloaded_callback = std::function<void(std::uint32_t key)>;

  /// Uses `dev`'s device_to_host and host_to_device streams and `host` for host copies;
  /// both must outlive the engine. Starts the watcher thread.
  transfer_engine(device& dev, host_memory& host,
                  transfer_options options = transfer_options::from_environment());
  /// Waits for every copy in flight (on_offloaded is not called for offloads completing
  /// now: their device copies stay the caller's), then frees all host memory. Never throws.
  ~transfer_engine();
  transfer_engine(const transfer_engine&) = delete;
  transfer_engine& operator=(const transfer_engine&) = delete;

  /// Sets the completion callback. It runs on the watcher thread with no engine lock held;
  /// it may call any member except wait_offloaded/wait_any_offload/wait_all_offloads (they
  /// would wait for the watcher itself: invalid_argument). An exception from it is reported
  /// like a failed offload (the host copy is kept).
  void set_on_offloaded(offloaded_callback callback);

  /// Records every tensor copy (offload, prefetch) in `timeline` from now on (nullptr: stop);
  /// it must outlive the engine or be unset first.
  void set_timeline(stream_timeline* timeline);

  /// Host memory of the same capacity held outside the engine (TSPLIT's staging buffers,
  /// which count against the host pool with the swapped copies): the engine's own buffers
  /// take at most capacity - `bytes`; beyond, host memory is exhausted (out_of_memory).
  void set_host_held_elsewhere(std::size_t bytes);

  /// Replaces the fault settings and restarts their counts. Faults also turn on make_ready's
  /// compute-stream check.
  void set_faults(const transfer_faults& faults);

  /// Starts copying `bytes` at `device_ptr` into a host copy: allocates host memory, makes
  /// the device-to-host stream wait for `ready` (recorded after the kernel that produced the
  /// tensor), enqueues the copy and returns. The compute stream never waits for it. When a
  /// host copy of `key` exists it is replaced (a tensor that did not change need not be
  /// offloaded again: see has_host_copy). Throws first any pending failure (see the file
  /// comment); throws out_of_memory when host memory is exhausted; invalid_argument for a
  /// null pointer, 0 bytes, an offload of `key` still in flight, or an event of another
  /// device. When it throws, no offload was started and the tensor stays on the device.
  /// With transfer_encoding::fp16 the tensor is fp32 (`bytes` a multiple of 4) and its host
  /// copy holds fp16 (bytes / 2); the device bytes are left unchanged; later prefetches of
  /// the key expand it back to fp32. invalid_argument when `bytes` is not a multiple of 4 or
  /// the engine has no fp16 codec (`cuda` for now).
  void offload(std::uint32_t key, const void* device_ptr, std::size_t bytes, event& ready,
               transfer_encoding encoding = transfer_encoding::exact);

  /// Blocks until the offload of `key` in flight has completed and on_offloaded(key) has
  /// returned (at once when none is in flight); returns the seconds blocked. With `compute`,
  /// that stream also waits for the copy (on `null` its clock advances to the copy's end).
  /// Throws pending failures, this offload's included.
  double wait_offloaded(std::uint32_t key, stream* compute = nullptr);
  /// Makes `s` wait for the latest offload of `key` (on `null` its clock advances to the
  /// copy's end) without blocking the caller: work enqueued on `s` afterwards may reuse the
  /// device memory the copy reads. A no-op when `key` was never offloaded. The offload itself
  /// is still in flight for every other call (prefetch needs it landed: wait_offloaded).
  void order_after_offload(std::uint32_t key, stream& s);
  /// Blocks until the offload that completes first (the oldest: offloads complete in
  /// order) has been handled; at once when none is pending. As wait_offloaded otherwise.
  double wait_any_offload(stream* compute = nullptr);
  /// Blocks until every offload pending at the call has been handled; as wait_offloaded.
  double wait_all_offloads();
  /// Offloads started and not yet handled.
  std::size_t pending_offloads() const;

  /// Enqueues the copy of `key`'s host copy into `device_ptr` (which must hold the bytes
  /// offloaded) on the host-to-device stream and records an event; a host copy offloaded as
  /// fp16 is expanded back to fp32 there, in stream order. With `writable`, the copy first
  /// waits for it (e.g. the compute stream's last use of recycled memory). Throws pending
  /// failures; invalid_argument when `key` has no host copy (never offloaded, dropped, its
  /// offload failed, or still in flight: its device copy is then still resident).
  void prefetch(std::uint32_t key, void* device_ptr, event* writable = nullptr);
  /// Makes `compute` wait for `key`'s last prefetch (it waits only if the copy is not done);
  /// call right before the kernel that reads the tensor. Throws pending failures;
  /// invalid_argument when no prefetch of `key` was issued since its last offload.
  void make_ready(std::uint32_t key, stream& compute);
  /// An on-demand copy: prefetch, block this thread until it lands, then make `compute`
  /// wait for it. Returns the seconds blocked. Throws pending failures, and a device_error
  /// naming the tensor when this copy fails.
  double fetch_now(std::uint32_t key, void* device_ptr, stream& compute, event* writable = nullptr);

  /// Whether `key` has a complete host copy (valid until drop_host or a new offload; it
  /// stays valid after prefetches).
  bool has_host_copy(std::uint32_t key) const;
  /// The host copy of `key`, or nullptr when it has none (fp16 values when it was offloaded
  /// with transfer_encoding::fp16).
  const void* host_copy(std::uint32_t key) const;
  /// Forgets `key`'s host copy and frees its memory (once any copy still reading or
  /// writing it is done). A no-op for an unknown key. An offload of `key` in flight is
  /// discarded when it lands (on_offloaded is not called). Never throws pending failures.
  void drop_host(std::uint32_t key);

  /// Blocks until the copies that still read or write host buffers already given back
  /// (drop_host of a key whose prefetch or offload was in flight) are done, and frees those
  /// buffers; returns the bytes freed, 0 at once when none was waiting. Host memory held
  /// afterwards is the kept keys' copies and their offloads in flight. For a caller that
  /// found host memory full: on `null` nothing is ever waiting (its events are complete), so
  /// on `host` and `cuda` waiting here first decides as `null` does. Throws pending failures.
  std::size_t reclaim_host();

  /// Throws pending failures, if any (one device_error naming every tensor concerned).
  void check();

  transfer_stats stats() const;
  /// Zeroes the counters (not the "now" fields).
  void reset_stats();

  device& get_device() const noexcept;
  const transfer_options& options() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// The checksum used by verify mode (64-bit; any change confined to one aligned 8-byte word
/// always changes it). Exposed for tests and tools.
std::uint64_t transfer_checksum(const void* data, std::size_t bytes) noexcept;

}  // namespace memweave
