// The one seam to hardware (like mimalloc's prim.h): raw device memory, pinned host
// memory, in-order streams, events and async copies. Everything above device/ uses only
// this interface.
//
// Backends: `cuda` (the CUDA runtime), `host` (a simulated device on the CPU: a host arena,
// one worker thread per stream, optionally throttled copies) and `null` (planning: real
// addresses with no memory behind them; no kernel or copy runs; ordering and events behave,
// and each stream keeps a simulated clock from the costs it is given).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "memweave/device/device_throughput.hpp"

namespace memweave {

enum class device_kind { cuda, host, null };

/// "cuda", "host", "null".
const char* to_string(device_kind kind) noexcept;

/// The three in-order streams of a device.
enum class stream_role { compute = 0, host_to_device = 1, device_to_host = 2 };

/// "compute", "host_to_device", "device_to_host".
const char* to_string(stream_role role) noexcept;

enum class copy_kind { host_to_device, device_to_host, device_to_device, host_to_host };

/// "host_to_device", "device_to_host", "device_to_device", "host_to_host".
const char* to_string(copy_kind kind) noexcept;

struct memory_info {
  std::size_t free_bytes = 0;   ///< free device memory now (outside any memweave pool)
  std::size_t total_bytes = 0;  ///< device capacity
};

/// A marker in a stream: complete once all work enqueued before its record() has run.
/// May be recorded again (the latest record() counts). Events work on the streams of the
/// device kind that created them (invalid_argument otherwise). Not thread-safe against
/// concurrent record() on the same event; query/synchronize are.
class event {
 public:
  virtual ~event() = default;
  /// True when complete, or never recorded.
  virtual bool query() = 0;
  /// Blocks the calling thread until complete; throws device_error when the work before
  /// it failed.
  virtual void synchronize() = 0;
};

/// How an event is made. Backends without a use for an option ignore it.
struct event_options {
  /// synchronize() puts the waiting thread to sleep until the event completes instead of
  /// spinning on it (cuda: cudaEventBlockingSync). For a thread that waits long and off the
  /// critical path, such as the transfer engine's watcher: it frees its core for the
  /// kernels' host work, at the price of a wake-up latency. `host` and `null` events
  /// already wait on a condition variable (they ignore it). Stream waits (stream::wait) are
  /// unaffected.
  bool blocking_sync = false;
};

/// An in-order queue of work. All methods may be called from any thread.
class stream {
 public:
  virtual ~stream() = default;
  virtual stream_role role() const noexcept = 0;
  /// Enqueues host code: on `host` it runs on the stream's worker thread; on `cuda` it
  /// runs as a host function in stream order; on `null` it is not run and `cost_s`
  /// advances the stream's simulated clock. An exception thrown by `work` fails the stream
  /// for good (like a sticky CUDA error): synchronize() and events recorded after it throw
  /// device_error carrying its message, while later work still runs and later events still
  /// complete. `work` must not synchronize its own stream (invalid_argument on `host`) and,
  /// on `cuda`, must not call CUDA (host-function rules).
  virtual void launch(std::function<void()> work, double cost_s = 0.0) = 0;
  /// Enqueues a copy of `bytes` bytes (0 is a no-op). On `host`, host<->device copies last
  /// at least bytes / host_link_gbps when a link speed is set, after the copies in the same
  /// direction from any stream reserved before them; on `null` nothing is copied
  /// and the clock advances by bytes / rate (host_link_gbps or 16 GB/s for host<->device,
  /// 450 GB/s device-to-device, 10 GB/s host-to-host). On `cuda` the direction is taken from
  /// the pointers (cudaMemcpyDefault): a copy into page-locked host memory (a staged tensor's,
  /// TSPLIT) is a host copy whatever `kind` says.
  virtual void copy_async(void* dst, const void* src, std::size_t bytes, copy_kind kind) = 0;
  /// Enqueues work, as launch, that itself moves `to_device_bytes` and `to_host_bytes` over
  /// the host<->device link while it runs (a split step copying its micro-tensors between
  /// its micro-steps). On `null` those copies share the link with the other streams' copies
  /// (as copy_async's do): the clock advances by cost_s and by however long that traffic
  /// delays them. On `host` with a link speed, the bytes are reserved on its shared link when
  /// the work starts and the work ends no earlier than they would be done. Elsewhere (cuda,
  /// whose copies take their real time) the work moves the bytes itself: launch.
  virtual void launch_with_link(std::function<void()> work, double cost_s,
                                std::size_t to_device_bytes, std::size_t to_host_bytes) {
    (void)to_device_bytes;
    (void)to_host_bytes;
    launch(std::move(work), cost_s);
  }
  /// Records `e` at the current end of this stream (`null`: e takes the stream's clock).
  virtual void record(event& e) = 0;
  /// Work enqueued on this stream after this call starts only once `e`, as last recorded
  /// before this call, is complete (`null`: clock = max(clock, e's time)).
  virtual void wait(event& e) = 0;
  /// Blocks until all enqueued work has run; throws device_error if any of it failed.
  virtual void synchronize() = 0;
  /// cudaStream_t on `cuda`; nullptr otherwise.
  virtual void* native_handle() const noexcept = 0;
  /// Simulated seconds of work enqueued so far (`null`); 0 elsewhere.
  virtual double simulated_time_s() const noexcept { return 0.0; }
};

/// A device. Thread-safe.
class device {
 public:
  virtual ~device() = default;
  virtual device_kind kind() const noexcept = 0;
  /// Human-readable name ("NVIDIA H100 80GB HBM3 (cuda:0)", "host (simulated, 8.00 GiB)").
  virtual std::string name() const = 0;
  /// Raw device memory (the heap takes its arena here, once); nullptr for 0 bytes. Throws
  /// out_of_memory with the requested and free bytes. `host`/`null` memory is lazily
  /// committed and bounded by capacity_bytes; `null` memory must never be touched.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* p, std::size_t bytes) noexcept = 0;
  /// Page-locked host memory (cudaHostAlloc on `cuda`; page-aligned, lazily committed
  /// mmap memory on `host` and `null`, real and writable on both). Throws out_of_memory.
  virtual void* allocate_pinned(std::size_t bytes) = 0;
  virtual void deallocate_pinned(void* p, std::size_t bytes) noexcept = 0;
  /// Free and total device memory.
  virtual memory_info memory() const = 0;
  /// One of the device's three streams; lives as long as the device. Destroying the
  /// device runs (host) or waits for (cuda) all enqueued work first.
  virtual stream& get_stream(stream_role role) = 0;
  /// A new event on this device, never recorded.
  std::unique_ptr<event> create_event(const event_options& options = {}) {
    return make_event(options);
  }
  /// Waits for all three streams; then throws the first stream failure, if any.
  virtual void synchronize() = 0;
  /// False on `null`: memory has addresses but must never be read or written.
  virtual bool touches_memory() const noexcept { return true; }
  /// The device's own peak rates and host link for a cost model: on `cuda` from its
  /// attributes and copies timed at the first call (a few milliseconds; memory it needs for
  /// them is taken and given back then), cached after; nullopt on the simulated devices
  /// (`host`, `null`), whose model is a preset, and where a GPU's attributes are incomplete.
  virtual std::optional<device_throughput> throughput() { return std::nullopt; }

 protected:
  /// create_event's backend part (one virtual, so that no override hides an overload).
  virtual std::unique_ptr<event> make_event(const event_options& options) = 0;
};

/// How to make a device. Defaults come from the MEMWEAVE_* variables
/// (device_options::from_environment); fields set in code override them.
struct device_options {
  std::string kind = "auto";                ///< auto|cuda|host|null (MEMWEAVE_DEVICE)
  int cuda_ordinal = 0;                     ///< MEMWEAVE_CUDA_DEVICE
  std::size_t capacity_bytes = 8ull << 30;  ///< host/null capacity (MEMWEAVE_DEVICE_BYTES)
  /// What set capacity_bytes, as the device's out-of-memory errors name it (the C API's
  /// `memweave_config.device_bytes` when it was set there).
  std::string capacity_knob = "MEMWEAVE_DEVICE_BYTES";
  /// Host<->device link, GB/s (1e9 bytes/s; MEMWEAVE_HOST_LINK_GBPS): `host` throttles its
  /// copies to it (0 = as fast as memcpy); `null` costs copies with it (0 = 16 GB/s).
  double host_link_gbps = 0.0;
  /// Reads MEMWEAVE_DEVICE, MEMWEAVE_CUDA_DEVICE, MEMWEAVE_DEVICE_BYTES, MEMWEAVE_HOST_LINK_GBPS.
  /// Throws invalid_argument naming the variable when a value is malformed.
  static device_options from_environment();
};

/// Makes the device `options.kind` names; `auto` gives cuda when the cuda backend is built
/// and a GPU is present, else host. Throws no_device_error for `cuda` without a GPU (or
/// without the cuda backend built), invalid_argument for a bad option.
std::unique_ptr<device> make_device(const device_options& options);

/// Whether the cuda backend was built into this library.
bool cuda_backend_built() noexcept;

/// Whether a CUDA device can be used (backend built and at least one GPU present).
bool cuda_device_present() noexcept;

/// Why no CUDA device can be used ("built without the cuda backend", the runtime's
/// answer); "" when one can.
std::string cuda_unavailable_reason();

}  // namespace memweave
