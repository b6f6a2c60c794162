// Stream-ordered frees over a device heap, as cudaMallocAsync's pools and RMM's
// stream-ordered resources behave: a block freed on stream S is reusable at once by later
// work on S (the stream runs in order), and by any other stream only once an event
// recorded on S at the free has completed. Until then the block stays allocated in the
// heap ("pending") and belongs to S.
//
// Streams are opaque keys (a cudaStream_t's value); the caller records the event on the
// stream and hands it over, so this class never calls a device runtime. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "memweave/alloc/device_heap.hpp"
#include "memweave/core/error.hpp"
#include "memweave/device/device.hpp"

namespace memweave {

/// Numbers of the blocks freed but not yet back in the heap.
struct pending_stats {
  std::size_t blocks = 0;   ///< frees whose event has not been seen complete
  std::size_t bytes = 0;    ///< their rounded bytes
  std::size_t streams = 0;  ///< streams holding at least one
};

class stream_ordered_heap_impl;

/// A device heap with stream-ordered frees. Lock order: this class's mutex, then the heap's.
class stream_ordered_heap {
 public:
  /// No stream key: a stream whose blocks are never reused without their event (for
  /// handles that name a different stream on each thread, such as cudaStreamPerThread).
  static constexpr std::uintptr_t no_reuse_stream = ~std::uintptr_t{0};

  /// Serves allocations from `heap`, which must outlive this object.
  explicit stream_ordered_heap(device_heap& heap);
  /// Waits for every pending event and returns the blocks to the heap. Never throws.
  ~stream_ordered_heap();
  stream_ordered_heap(const stream_ordered_heap&) = delete;
  stream_ordered_heap& operator=(const stream_ordered_heap&) = delete;

  /// At least `bytes` for work on `stream`, or nullptr. In order: a block pending on the
  /// same stream of at most twice the rounded size; the heap, after returning the
  /// completed pending blocks; any larger block pending on the stream; and, only when
  /// `wait` is true, the heap again after waiting for every pending event (and, where none
  /// was pending, for the blocks another thread's reclaim or drain is returning). 0 bytes
  /// gives nullptr. Never throws.
  void* try_allocate(std::size_t bytes, std::uintptr_t stream, bool wait = true) noexcept;

  /// Frees `p` for reuse at once on `stream` and on other streams once `done` is complete.
  /// `done` nullptr means complete already (the device was synchronized, or its streams
  /// cannot be enqueued on by the caller): the block goes straight back to the heap. A pointer that
  /// is not a live allocation of the heap, or that is already pending, gives
  /// status::invalid_device_pointer and changes nothing (*why says which, when non-null).
  status deallocate(void* p, std::uintptr_t stream, std::unique_ptr<event> done,
                    std::string* why = nullptr) noexcept;

  /// `stream` is going away (cudaStreamDestroy): its pending blocks are from now on reused
  /// only once their events complete, by any stream. A destroyed stream's queued work still
  /// runs, and a stream created later may get the same handle value, which would otherwise
  /// take those blocks at once. The number of blocks it concerned. Never throws.
  std::size_t retire_stream(std::uintptr_t stream) noexcept;

  /// Returns to the heap every pending block whose event has completed; the bytes returned.
  std::size_t reclaim() noexcept;
  /// Waits for every pending event and returns every pending block; the bytes returned.
  /// An event whose work failed still releases its block (the failure is logged).
  std::size_t drain() noexcept;
  /// drain, then waits for the blocks other threads took out of the lists to return to the
  /// heap (a reclaim or drain of theirs still waiting on, or releasing, their events): once
  /// it returns, no event of a block freed before the call is still held. The bytes drain
  /// returned. Never throws.
  std::size_t settle() noexcept;

  /// Whether `p` is the start of a pending block.
  bool is_pending(const void* p) const noexcept;
  pending_stats pending() const noexcept;
  /// describe_failure of the heap, plus the pending bytes.
  std::string describe_failure(std::size_t bytes) const;
  device_heap& heap() const noexcept;

 private:
  std::unique_ptr<stream_ordered_heap_impl> impl_;
};

}  // namespace memweave
