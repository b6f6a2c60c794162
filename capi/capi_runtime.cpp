// The C API's runtimes (capi_runtime.hpp): the CUDA runtime's current device, events on
// the caller's streams and cudaDeviceSynchronize for `cuda`; trivial ones for `host` and
// `null`, whose devices have no streams a caller can enqueue on.
//
// Thread safety: the only state is the cuda runtime's pool of spare events (a mutex);
// every CUDA call made here is per thread or thread-safe in the runtime. Calls go to the CUDA
// runtime by their plain names; the interposer passes them through (cudaGetLastError, the one
// of these it replaces, too: they are made inside memweave, memweave_internal_busy()), so
// nothing here re-enters memweave.
#include "capi/capi_runtime.hpp"

#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "memweave/alloc/stream_ordered_heap.hpp"
#include "memweave/core/error.hpp"

#if MEMWEAVE_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "device/cuda/cuda_device.hpp"
#include "device/cuda/relaxed_capture_mode.hpp"
#endif

namespace memweave::capi {
namespace {

class simulated_runtime final : public runtime {
 public:
  int current_device() override { return 0; }
  int stream_device(CUstream_st*, int) override { return 0; }
  int device_count() override { return 1; }
  std::unique_ptr<event> record(CUstream_st*, int) override { return nullptr; }
  void synchronize_stream(CUstream_st*, int) override {}
  void synchronize_device(int, device& dev) override { dev.synchronize(); }
  bool capturing(CUstream_st*, int) override { return false; }
  void forget_device(int) noexcept override {}
  std::uintptr_t stream_key(CUstream_st* stream, int) const noexcept override {
    return reinterpret_cast<std::uintptr_t>(stream);
  }
  bool is_default_stream(CUstream_st* stream) const noexcept override { return stream == nullptr; }
};

#if MEMWEAVE_HAVE_CUDA

[[noreturn]] void throw_cuda(cudaError_t e, const std::string& call) {
  (void)cudaGetLastError();
  throw device_error(call + " failed: " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e),
                     static_cast<int>(e));
}

/// Events kept for reuse, by device (cudaEventCreate/Destroy on every free would cost more
/// than the free itself). Thread-safe.
class event_pool {
 public:
  ~event_pool() {
    for (const auto& [ordinal, e] : free_) {
      if (cudaEventDestroy(e) != cudaSuccess) (void)cudaGetLastError();
    }
  }
  /// An unrecorded event of device `ordinal`, which must be current. Throws device_error.
  cudaEvent_t get(int ordinal) {
    {
      std::lock_guard lock(mu_);
      for (auto it = free_.rbegin(); it != free_.rend(); ++it) {
        if (it->first == ordinal) {
          const cudaEvent_t e = it->second;
          free_.erase(std::next(it).base());
          return e;
        }
      }
    }
    cudaEvent_t e = nullptr;
    const cudaError_t rc =
        cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync);
    if (rc != cudaSuccess) throw_cuda(rc, "cudaEventCreateWithFlags");
    return e;
  }
  /// Destroys the spare events of device `ordinal`.
  void drop(int ordinal) noexcept {
    std::vector<cudaEvent_t> gone;
    try {
      std::lock_guard lock(mu_);
      for (auto it = free_.begin(); it != free_.end();) {
        if (it->first == ordinal) {
          gone.push_back(it->second);
          it = free_.erase(it);
        } else {
          ++it;
        }
      }
    } catch (...) {  // no memory for the list: the events stay, as before
    }
    for (cudaEvent_t e : gone) {
      if (cudaEventDestroy(e) != cudaSuccess) (void)cudaGetLastError();
    }
  }
  void put(int ordinal, cudaEvent_t e) noexcept {
    try {
      std::lock_guard lock(mu_);
      if (free_.size() < k_keep) {
        free_.emplace_back(ordinal, e);
        return;
      }
    } catch (...) {
    }
    if (cudaEventDestroy(e) != cudaSuccess) (void)cudaGetLastError();
  }

 private:
  static constexpr std::size_t k_keep = 4096;
  std::mutex mu_;  // guards free_
  std::vector<std::pair<int, cudaEvent_t>> free_;
};

using cuda_backend::relaxed_capture_mode;

// The errors of a call that a stream capture refused: the event's state is unknown, not
// failed.
bool refused_by_a_capture(cudaError_t e) noexcept {
  return e == cudaErrorStreamCaptureUnsupported || e == cudaErrorStreamCaptureInvalidated ||
         e == cudaErrorStreamCaptureImplicit || e == cudaErrorStreamCaptureWrongThread;
}

/// An event recorded on a caller's stream; back to the pool with the object. Its query and
/// wait run in the relaxed capture mode (relaxed_capture_mode.hpp).
class caller_event final : public event {
 public:
  caller_event(event_pool& pool, int ordinal, cudaEvent_t e) noexcept
      : pool_(pool), ordinal_(ordinal), event_(e) {}
  ~caller_event() override { pool_.put(ordinal_, event_); }
  caller_event(const caller_event&) = delete;
  caller_event& operator=(const caller_event&) = delete;

  cudaEvent_t handle() const noexcept { return event_; }

  bool query() override {
    const relaxed_capture_mode relaxed;
    const cudaError_t e = cudaEventQuery(event_);
    if (e == cudaSuccess) return true;
    // Not known to be done: the block stays pending (releasing it could hand out memory the
    // freeing stream still uses).
    if (e == cudaErrorNotReady || refused_by_a_capture(e)) {
      (void)cudaGetLastError();
      return false;
    }
    throw_cuda(e, "cudaEventQuery (a stream-ordered free)");
  }
  void synchronize() override {
    const relaxed_capture_mode relaxed;
    const cudaError_t e = cudaEventSynchronize(event_);
    if (refused_by_a_capture(e)) {
      (void)cudaGetLastError();
      throw wait_refused(std::string("cudaEventSynchronize (a stream-ordered free) refused: ") +
                             cudaGetErrorName(e),
                         static_cast<int>(e));
    }
    if (e != cudaSuccess) throw_cuda(e, "cudaEventSynchronize (a stream-ordered free)");
  }

 private:
  event_pool& pool_;
  const int ordinal_;
  cudaEvent_t event_;
};

// `call` failed as it does only when the runtime cannot start: no driver, no GPU.
[[noreturn]] void throw_no_device(cudaError_t e, const char* call) {
  (void)cudaGetLastError();
  throw no_device_error(std::string("no CUDA GPU can be used (") + call +
                        " failed: " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e) +
                        "); the C API, the interposer and the PyTorch entry points serve "
                        "only GPU memory (MEMWEAVE_DEVICE=auto means cuda there); set "
                        "MEMWEAVE_DEVICE=host to use the simulated device on purpose");
}

// Makes device `ordinal` the calling thread's current one while it lives, and the thread as
// it was after. A thread with a context: cudaSetDevice there and back. A thread without one
// (it never chose a device): the device's primary context pushed and popped, which leaves it
// without a context and with its default device; cudaSetDevice would have left it on
// `ordinal` (a later allocation of that thread would land there), and setting device 0 back
// would have made it a context on GPU 0. Where the driver's calls cannot be had, the thread
// is left on `ordinal`.
class device_scope {
 public:
  explicit device_scope(int ordinal) {
    int previous = ordinal;
    if (cudaGetDevice(&previous) != cudaSuccess) (void)cudaGetLastError();
    const bool had_context = cuda_backend::context_current();
    if (previous == ordinal && had_context) return;
    if (!had_context && cuda_backend::push_primary_context(ordinal)) {
      pushed_ = ordinal;
      return;
    }
    if (previous == ordinal) return;
    const cudaError_t e = cudaSetDevice(ordinal);
    if (e != cudaSuccess) throw_cuda(e, "cudaSetDevice(" + std::to_string(ordinal) + ")");
    restore_ = had_context;
    previous_ = previous;
  }
  ~device_scope() {
    if (pushed_ >= 0) cuda_backend::pop_primary_context(pushed_);
    if (restore_ && cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
  }
  device_scope(const device_scope&) = delete;
  device_scope& operator=(const device_scope&) = delete;

 private:
  int pushed_ = -1;  // the ordinal whose primary context was pushed
  bool restore_ = false;
  int previous_ = 0;
};

// Whether `stream` is a handle that names no stream of its own but a device's default one
// (NULL, the legacy stream, the calling thread's per-thread stream).
bool default_handle(CUstream_st* stream) noexcept {
  return stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread;
}

class cuda_runtime final : public runtime {
 public:
  int current_device() override {
    int d = 0;
    const cudaError_t e = cudaGetDevice(&d);
    if (e != cudaSuccess) throw_no_device(e, "cudaGetDevice");
    return d;
  }

  int stream_device(CUstream_st* stream, int default_device) override {
    if (default_handle(stream)) return default_device >= 0 ? default_device : current_device();
    int d = 0;
    const cudaError_t e = cudaStreamGetDevice(stream, &d);
    if (e != cudaSuccess)
      throw_cuda(e, "cudaStreamGetDevice (the stream of a stream-ordered call)");
    return d;
  }

  int device_count() override {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) throw_no_device(e, "cudaGetDeviceCount");
    return n;
  }

  std::unique_ptr<event> record(CUstream_st* stream, int default_device) override {
    // The event must belong to the stream's device, and a default-stream handle means the
    // current device's stream: make that device current if it is not.
    const int ordinal = stream_device(stream, default_device);
    const device_scope on(ordinal);
    auto out = std::make_unique<caller_event>(events_, ordinal, events_.get(ordinal));
    const cudaError_t e = cudaEventRecord(out->handle(), stream);
    if (e != cudaSuccess) throw_cuda(e, "cudaEventRecord on the freeing stream");
    return out;
  }

  void synchronize_stream(CUstream_st* stream, int default_device) override {
    const device_scope on(stream_device(stream, default_device));
    const cudaError_t e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) throw_cuda(e, "cudaStreamSynchronize (the freeing stream)");
  }

  bool capturing(CUstream_st* stream, int default_device) override {
    // A default-stream handle means the stream of its device: made current to be asked (a
    // created stream's handle names its device itself).
    std::optional<device_scope> on;
    if (default_handle(stream)) on.emplace(stream_device(stream, default_device));
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    const cudaError_t e = cudaStreamIsCapturing(stream, &status);
    if (e == cudaErrorStreamCaptureImplicit) {
      (void)cudaGetLastError();
      return true;  // the legacy stream, which a capture elsewhere makes unusable
    }
    if (e != cudaSuccess)
      throw_cuda(e, "cudaStreamIsCapturing (the stream of a stream-ordered call)");
    return status != cudaStreamCaptureStatusNone;
  }

  void synchronize_device(int ordinal, device&) override {
    const device_scope on(ordinal);
    const cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
      // Refused by a capture: the device is not known to be idle (one code for all of them,
      // which the C API's free reads).
      if (!refused_by_a_capture(e)) {
        throw_cuda(e, "cudaDeviceSynchronize of device " + std::to_string(ordinal));
      }
      (void)cudaGetLastError();
      throw device_error(std::string("cudaDeviceSynchronize of device ") + std::to_string(ordinal) +
                             " failed: " + cudaGetErrorName(e) +
                             " (a stream of the device is being captured into a CUDA graph)",
                         static_cast<int>(cudaErrorStreamCaptureUnsupported));
    }
  }

  std::uintptr_t stream_key(CUstream_st* stream, int device) const noexcept override {
    if (stream == cudaStreamPerThread) return stream_ordered_heap::no_reuse_stream;
    // Each device's default stream (NULL, or the legacy handle naming the same stream) is a
    // stream of its own: keyed by the device (1 + ordinal: no created stream's handle is so
    // small), so that a block freed on one device's default stream is not taken at once by
    // another's.
    if (stream == nullptr || stream == cudaStreamLegacy) {
      return static_cast<std::uintptr_t>(device) + 1;
    }
    return reinterpret_cast<std::uintptr_t>(stream);
  }

  bool is_default_stream(CUstream_st* stream) const noexcept override {
    return default_handle(stream);
  }

  void forget_device(int ordinal) noexcept override { events_.drop(ordinal); }

 private:
  event_pool events_;  // outlives every caller_event: the pools are destroyed first
};

#endif  // MEMWEAVE_HAVE_CUDA

}  // namespace

std::unique_ptr<runtime> make_runtime(device_kind kind) {
#if MEMWEAVE_HAVE_CUDA
  if (kind == device_kind::cuda) return std::make_unique<cuda_runtime>();
#else
  (void)kind;
#endif
  return std::make_unique<simulated_runtime>();
}

}  // namespace memweave::capi
