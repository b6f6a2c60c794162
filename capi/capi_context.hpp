// The process-wide state behind the C API (memweave.h) and the PyTorch entry points.
// Private to capi/.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "capi/capi_busy.h"
#include "capi/capi_runtime.hpp"
#include "memweave/alloc/device_heap.hpp"
#include "memweave/alloc/pinned_host_pool.hpp"
#include "memweave/alloc/stream_ordered_heap.hpp"
#include "memweave/device/device.hpp"
#include "memweave/memweave.h"

namespace memweave::capi {

/// The pool of one device. Members in construction order (destroyed in reverse).
struct pool {
  int ordinal = 0;
  std::unique_ptr<device> dev;
  std::unique_ptr<device_heap> heap;
  std::unique_ptr<stream_ordered_heap> ordered;  ///< every allocation and free goes here
};

/// Device ordinals the C API can hold pools for (0 .. k_max_devices-1).
inline constexpr int k_max_devices = 64;

/// One initialized library. Members are declared in construction order, so the host pools
/// are destroyed before the pools and the pools before the runtime.
struct context {
  device_options device_settings;   ///< what the devices are made with (kind resolved)
  heap_options heap_settings;       ///< what each pool's heap is made with
  std::size_t host_pool_bytes = 0;  ///< region size of each device's pinned host pool
  /// What set host_pool_bytes, named in the pool's failures (empty: MEMWEAVE_HOST_POOL_BYTES).
  std::string host_pool_knob;
  std::unique_ptr<runtime> rt;

  std::mutex pools_mutex;  ///< guards owned_pools, the stores into pools and trace_path
  /// The trace memweaveTraceStart runs (pools made while it runs trace too), else the
  /// configured one (memweave_config.trace_path, MEMWEAVE_TRACE); "" for none.
  std::string trace_path;
  /// What set trace_path, named when a trace file cannot be opened.
  std::string trace_knob;
  /// Per device, the pools made under the running trace so far: a pool made after the
  /// device's pool was released (cudaDeviceReset) traces to a file of its own, the earlier
  /// pool's trace staying whole (trace_path_of's `generation`). Cleared with trace_path.
  std::array<unsigned, k_max_devices> traced_pools{};
  std::vector<std::unique_ptr<pool>> owned_pools;
  std::array<std::atomic<pool*>, k_max_devices> pools{};  ///< by ordinal (lock-free reads)

  /// The pinned host pools, one per device, each made on the device's first
  /// memweaveHostMalloc through its pool's device: page-locked memory belongs to the context
  /// current when it was pinned, and a reset of that device frees it and nothing else (with
  /// one pool for every device, made through the first that asked, device 1's pinned
  /// allocations died with device 0's reset, where cudaHostAlloc's survive it).
  std::mutex host_mutex;  ///< guards hosts (their creation); a pool itself is thread-safe
  std::array<std::unique_ptr<pinned_host_pool>, k_max_devices> hosts;
  /// hosts[d].get() once made (lock-free reads), by ordinal.
  std::array<std::atomic<pinned_host_pool*>, k_max_devices> host_ptrs{};

  /// Grace periods for what memweaveReleaseDevicePool destroys (pool_reader): the readers
  /// of each parity of reader_epoch, and one release's wait at a time.
  std::atomic<unsigned> reader_epoch{0};
  std::array<std::atomic<long>, 2> readers{};
  std::mutex grace_mutex;
  /// One memweaveReleaseDevicePool at a time (lock order: release_mutex, then pools_mutex).
  std::mutex release_mutex;

  ~context();  ///< host pools, then the pools (each drained), then the runtime
};

/// While one lives, the pools and the host pool the calling thread loads from `ctx` are not
/// destroyed: memweaveReleaseDevicePool (cudaDeviceReset) unpublishes a pool and then waits
/// (wait_for_pool_readers) for every reader that began before, since threads using other
/// devices load it too (owner_of scans every device's pool for the pointer a cudaFree
/// passes; a device-1 free read device 0's heap as the reset freed it: SIGSEGV, session
/// 44's hostile run). Holds no lock and must not wait inside for what a release holds
/// (pools_mutex, host_mutex): making a pool is done outside one.
class pool_reader {
 public:
  explicit pool_reader(context& ctx) noexcept;
  ~pool_reader();
  pool_reader(const pool_reader&) = delete;
  pool_reader& operator=(const pool_reader&) = delete;

 private:
  context& ctx_;
  unsigned parity_ = 0;
};

/// Waits until every pool_reader of `ctx` begun before the call has ended; call after
/// unpublishing (storing nullptr over) what is to be destroyed.
void wait_for_pool_readers(context& ctx);

/// The initialized context, or nullptr. Lock-free.
context* current() noexcept;

/// The initialized context, initializing from the environment when there is none. On
/// failure returns nullptr, stores the code in *rc and the message as the last error.
context* ensure(int* rc) noexcept;

/// The pool of device `ordinal` (-1: the calling thread's current device), made on first
/// use; nullptr on failure (code in *rc, message as the last error, `what_call` in front).
/// A device the runtime does not list is MEMWEAVE_ERROR_INVALID_VALUE; a pool whose arena
/// cannot be taken is `arena_rc`: MEMWEAVE_ERROR_INITIALIZATION_ERROR when made on first
/// use (memweave cannot serve that device: the interposer forwards its calls), what
/// memweaveInit documents when made there.
pool* get_pool(context& ctx, int ordinal, const char* what_call, int* rc,
               int arena_rc = MEMWEAVE_ERROR_INITIALIZATION_ERROR) noexcept;

/// The heap trace file of device `ordinal` when traces go to `path`: `path` itself for
/// device 0 (and the simulated devices), `path` + ".device<N>" for device N, so that the
/// pools of several devices never write one file (each replays as one heap); the pool made
/// after the device's `generation`-th release (cudaDeviceReset) appends ".reset<generation>",
/// so that a new pool never truncates the trace of the one before it.
std::string trace_path_of(const std::string& path, int ordinal, unsigned generation = 0);

/// The pool whose arenas hold `p`, or nullptr. Lock-free.
pool* owner_of(context& ctx, const void* p) noexcept;

/// The ordinal of the calling thread's current device, its pool and its pinned host pool
/// made on first use; -1 on failure (code in *rc, message as the last error). The host pool
/// itself is read from ctx.host_ptrs under a pool_reader, since a release may destroy it.
int make_host_pool(context& ctx, int* rc) noexcept;

/// The pinned host pool (of any device) whose region holds `p`, or nullptr. Call under a
/// pool_reader.
pinned_host_pool* host_owner_of(context& ctx, const void* p) noexcept;

/// Frees `ptr` (memweaveFree, memweaveFreeAsync, memweave_torch_free): ordered on `stream`
/// when `stream_ordered` (a default-stream handle names the default stream of
/// `default_device`, of the current device where that is -1), else once its device is
/// idle. The C API's code; the message as the last error.
int release(const char* what_call, void* ptr, CUstream_st* stream, bool stream_ordered,
            int default_device) noexcept;

/// Records `message` as this thread's last error and returns `rc`. Never throws.
int fail(int rc, const std::string& message) noexcept;

/// The C API code of the exception being handled (call only inside a catch block),
/// recording its message with `what_call` ("memweaveInit") in front. Exceptions of no
/// specific code (device_error, std::exception, ...) give `unknown_rc`.
int fail_from_current_exception(const char* what_call,
                                int unknown_rc = MEMWEAVE_ERROR_UNKNOWN) noexcept;

/// While one lives, the calling thread is inside memweave: CUDA runtime calls it makes
/// (memweave's cuda backend taking an arena, freeing one, asking for free memory) must
/// reach the real runtime, not the interposer (which would re-enter memweave and
/// deadlock on the mutex this thread holds). See memweave_internal_busy().
class busy_scope {
 public:
  busy_scope() noexcept;
  ~busy_scope();
  busy_scope(const busy_scope&) = delete;
  busy_scope& operator=(const busy_scope&) = delete;
};

}  // namespace memweave::capi
