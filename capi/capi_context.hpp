// The process-wide state behind the C API (memweave.h) and the PyTorch entry points.
// Private to capi/.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "memweave/alloc/device_heap.hpp"
#include "memweave/alloc/pinned_host_pool.hpp"
#include "memweave/device/device.hpp"
#include "memweave/memweave.h"

namespace memweave::capi {

/// One initialized library. Members are declared in construction order, so the heap and
/// the host pool are destroyed before the device they came from.
struct context {
  device_options device_settings;   ///< what the device was made with
  std::size_t host_pool_bytes = 0;  ///< region size for the pinned host pool
  std::unique_ptr<device> dev;
  std::unique_ptr<device_heap> heap;

  std::mutex host_mutex;  ///< guards host (its creation); the pool itself is thread-safe
  std::unique_ptr<pinned_host_pool> host;
  std::atomic<pinned_host_pool*> host_ptr{nullptr};  ///< host.get() once made (lock-free reads)
};

/// The initialized context, or nullptr. Lock-free.
context* current() noexcept;

/// The initialized context, initializing from the environment when there is none. On
/// failure returns nullptr, stores the code in *rc and the message as the last error.
context* ensure(int* rc) noexcept;

/// The pinned host pool of `ctx`, made on first use; nullptr on failure (code in *rc,
/// message as the last error).
pinned_host_pool* host_pool(context& ctx, int* rc) noexcept;

/// Records `message` as this thread's last error and returns `rc`. Never throws.
int fail(int rc, const std::string& message) noexcept;

/// The C API code of the exception being handled (call only inside a catch block),
/// recording its message with `what_call` ("memweaveInit") in front. Exceptions of no
/// specific code (device_error, std::exception, ...) give `unknown_rc`.
int fail_from_current_exception(const char* what_call,
                                int unknown_rc = MEMWEAVE_ERROR_UNKNOWN) noexcept;

}  // namespace memweave::capi
