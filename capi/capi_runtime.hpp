// What the C API needs from the device runtime beyond device.hpp: the calling thread's
// current device, events recorded on the CALLER's streams (for stream-ordered frees) and
// waiting for a whole device (the synchronous free). Private to capi/.
#pragma once

#include <cstdint>
#include <memory>

#include "memweave/device/device.hpp"

struct CUstream_st;

namespace memweave::capi {

class runtime {
 public:
  virtual ~runtime() = default;
  /// The calling thread's current device ordinal (cudaGetDevice); 0 where devices have no
  /// ordinals. Throws no_device_error when the runtime cannot start (no driver, no GPU).
  virtual int current_device() = 0;
  /// The device `stream` belongs to (cudaStreamGetDevice). The NULL, legacy and per-thread
  /// handles name no device of their own: they mean the default stream of `default_device`,
  /// or of the calling thread's current device where that is -1 (the CUDA runtime's
  /// meaning; PyTorch names the block's device instead, and does not make it current). A
  /// stream-ordered allocation comes from its pool, as cudaMallocAsync's comes from the
  /// stream's device's pool. 0 where devices have no ordinals. Throws device_error when the
  /// runtime cannot say (a destroyed stream).
  virtual int stream_device(CUstream_st* stream, int default_device) = 0;
  /// The number of devices the runtime lists (1 where devices have no ordinals). Throws
  /// no_device_error when the runtime cannot start.
  virtual int device_count() = 0;
  /// An event recorded now at the end of `stream` (a default-stream handle: of
  /// `default_device`, as stream_device), made on the stream's device (the block freed may
  /// be another device's: an event must belong to its stream's device), or nullptr when
  /// nothing enqueued on it can still be running (no caller streams on this backend). Throws
  /// device_error when the event cannot be recorded.
  virtual std::unique_ptr<event> record(CUstream_st* stream, int default_device) = 0;
  /// Blocks until `stream` (as in record) has run everything enqueued on it
  /// (cudaStreamSynchronize): a stream-ordered free whose event could not be recorded waits
  /// for its stream this way. Throws device_error.
  virtual void synchronize_stream(CUstream_st* stream, int default_device) = 0;
  /// Blocks until every stream of device `ordinal` (`dev` is memweave's device for it) is
  /// idle, as cudaFree does before it frees. Throws device_error.
  virtual void synchronize_device(int ordinal, device& dev) = 0;
  /// The key under which blocks freed on `stream` are reused at once by allocations on it:
  /// one per device for the NULL and legacy handles (each device's default stream is a
  /// stream of its own: `device`, the one stream_device gave), the handle for a created
  /// stream, stream_ordered_heap::no_reuse_stream for a handle that names a different
  /// stream on each thread (cudaStreamPerThread).
  virtual std::uintptr_t stream_key(CUstream_st* stream, int device) const noexcept = 0;
  /// Whether work enqueued on `stream` (as in record) now would be captured into a CUDA
  /// graph (cudaStreamIsCapturing: a capture active or invalidated; the legacy stream while
  /// another stream's capture forbids its implicit synchronization). Ask it before
  /// stream_device: cudaStreamGetDevice on a capturing stream invalidates the capture.
  /// Throws device_error.
  virtual bool capturing(CUstream_st* stream, int default_device) = 0;
  /// Device `ordinal`'s resources are about to be destroyed (cudaDeviceReset): what the
  /// runtime keeps of it (spare events) is destroyed now. Never throws.
  virtual void forget_device(int ordinal) noexcept = 0;
  /// Whether `stream` is a handle naming a device's default stream (NULL, legacy,
  /// per-thread), which cannot be destroyed.
  virtual bool is_default_stream(CUstream_st* stream) const noexcept = 0;
};

/// The runtime of a device kind: the CUDA runtime for `cuda`, trivial ones for `host` and
/// `null` (their devices have no caller streams: frees are complete once made).
std::unique_ptr<runtime> make_runtime(device_kind kind);

}  // namespace memweave::capi
