// The C API (memweave.h): one process-wide context (device, heap, pinned host pool) behind
// plain C functions.
//
// Invariants: g_context is nullptr or a fully built context; it changes only under
// g_init_mutex (memweaveInit, memweaveFinalize, lazy initialization). Calls that use the
// context read it lock-free (acquire) and rely on the documented rule that Finalize does
// not run concurrently with them; the heap and the host pool are thread-safe themselves.
// Nothing throws across the C boundary: every entry point catches everything and turns it
// into a code plus a thread-local message.
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "capi/capi_context.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/log.hpp"
#include "memweave/core/units.hpp"
#include "memweave/memweave.h"

#ifndef MEMWEAVE_VERSION_STRING
#define MEMWEAVE_VERSION_STRING "0.0.0"
#endif

namespace memweave::capi {
namespace {

std::mutex g_init_mutex;  // guards: changes of g_context (init, lazy init, finalize)
std::atomic<context*> g_context{nullptr};

thread_local std::string t_last_error;

std::string pointer_text(const void* p) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", p);
  return text;
}

// The environment's settings, overridden by the non-zero fields of `config`.
std::unique_ptr<context> make_context(const memweave_config* config) {
  device_options dopt = device_options::from_environment();
  heap_options hopt = heap_options::from_environment();
  std::size_t host_bytes = 0;
  if (config != nullptr) {
    if (config->device != nullptr && *config->device != '\0') dopt.kind = config->device;
    if (config->device_bytes != 0) dopt.capacity_bytes = config->device_bytes;
    if (config->pool_bytes != 0) hopt.pool_bytes = config->pool_bytes;
    if (config->pool_fraction != 0.0) {
      if (!(config->pool_fraction > 0.0 && config->pool_fraction <= 1.0)) {
        throw invalid_argument(
            "memweave_config.pool_fraction = " + std::to_string(config->pool_fraction) +
            " is not in (0, 1]; use e.g. 0.9, or 0 for MEMWEAVE_POOL_FRACTION");
      }
      hopt.pool_fraction = config->pool_fraction;
    }
    if (config->block_bytes != 0) hopt.block_bytes = config->block_bytes;
    switch (config->fit) {
      case MEMWEAVE_FIT_DEFAULT:
        break;
      case MEMWEAVE_FIT_BEST:
        hopt.fit = fit_policy::best;
        break;
      case MEMWEAVE_FIT_FIRST:
        hopt.fit = fit_policy::first;
        break;
      default:
        throw invalid_argument("memweave_config.fit = " + std::to_string(config->fit) +
                               " is not MEMWEAVE_FIT_DEFAULT (0), MEMWEAVE_FIT_BEST (1) or "
                               "MEMWEAVE_FIT_FIRST (2)");
    }
    if (config->grow_bytes != 0) hopt.grow_bytes = config->grow_bytes;
    if (config->trace_path != nullptr && *config->trace_path != '\0') {
      hopt.trace_path = config->trace_path;
    }
    host_bytes = config->host_pool_bytes;
  }
  // Read now so that a bad MEMWEAVE_HOST_POOL_BYTES is reported at initialization.
  if (host_bytes == 0) host_bytes = pinned_host_pool::bytes_from_environment();

  auto ctx = std::make_unique<context>();
  ctx->device_settings = dopt;
  ctx->host_pool_bytes = host_bytes;
  ctx->dev = make_device(dopt);
  ctx->heap = std::make_unique<device_heap>(*ctx->dev, hopt);
  return ctx;
}

std::string describe(const context& c) {
  return std::string(to_string(c.dev->kind())) + " device, pool of " +
         format_bytes(c.heap->stats().bytes_reserved);
}

}  // namespace

context* current() noexcept {
  return g_context.load(std::memory_order_acquire);
}

int fail(int rc, const std::string& message) noexcept {
  try {
    t_last_error = message;
  } catch (...) {
    t_last_error.clear();  // no memory for the text: the code still says what happened
  }
  return rc;
}

int fail_from_current_exception(const char* what_call, int unknown_rc) noexcept {
  const std::string prefix = std::string(what_call) + ": ";
  try {
    throw;
  } catch (const out_of_memory& e) {
    return fail(MEMWEAVE_ERROR_MEMORY_ALLOCATION, prefix + e.what());
  } catch (const no_device_error& e) {
    return fail(MEMWEAVE_ERROR_NO_DEVICE, prefix + e.what());
  } catch (const invalid_argument& e) {
    return fail(MEMWEAVE_ERROR_INVALID_VALUE, prefix + e.what());
  } catch (const invalid_pointer& e) {
    return fail(MEMWEAVE_ERROR_INVALID_DEVICE_POINTER, prefix + e.what());
  } catch (const std::bad_alloc&) {
    return fail(MEMWEAVE_ERROR_MEMORY_ALLOCATION, prefix + "host memory is exhausted");
  } catch (const std::exception& e) {
    return fail(unknown_rc, prefix + e.what());
  } catch (...) {
    return fail(unknown_rc, prefix + "unknown exception");
  }
}

context* ensure(int* rc) noexcept {
  if (context* c = current()) return c;
  try {
    std::lock_guard<std::mutex> lock(g_init_mutex);
    if (context* c = current()) return c;
    context* c = make_context(nullptr).release();
    g_context.store(c, std::memory_order_release);
    return c;
  } catch (...) {
    *rc = fail_from_current_exception("memweave: initializing from the MEMWEAVE_* environment",
                                      MEMWEAVE_ERROR_INITIALIZATION_ERROR);
    return nullptr;
  }
}

pinned_host_pool* host_pool(context& ctx, int* rc) noexcept {
  if (pinned_host_pool* p = ctx.host_ptr.load(std::memory_order_acquire)) return p;
  try {
    std::lock_guard<std::mutex> lock(ctx.host_mutex);
    if (!ctx.host) {
      ctx.host = std::make_unique<pinned_host_pool>(*ctx.dev, ctx.host_pool_bytes);
      ctx.host_ptr.store(ctx.host.get(), std::memory_order_release);
    }
    return ctx.host.get();
  } catch (...) {
    // device_error here means jemalloc could not be loaded: the pool cannot start.
    *rc = fail_from_current_exception("memweave: making the pinned host pool",
                                      MEMWEAVE_ERROR_INITIALIZATION_ERROR);
    return nullptr;
  }
}

}  // namespace memweave::capi

using memweave::capi::context;
using memweave::capi::fail;
using memweave::capi::fail_from_current_exception;
using memweave::capi::pointer_text;

extern "C" {

memweave_status memweaveInit(const memweave_config* config) {
  using namespace memweave::capi;
  try {
    std::lock_guard<std::mutex> lock(g_init_mutex);
    if (context* c = current()) {
      return fail(MEMWEAVE_ERROR_INITIALIZATION_ERROR,
                  "memweaveInit: memweave is already initialized (" + describe(*c) +
                      "), explicitly or by an earlier memweaveMalloc; call memweaveFinalize() "
                      "first to initialize again with another configuration");
    }
    context* c = make_context(config).release();
    g_context.store(c, std::memory_order_release);
    return MEMWEAVE_SUCCESS;
  } catch (...) {
    return fail_from_current_exception("memweaveInit", MEMWEAVE_ERROR_INITIALIZATION_ERROR);
  }
}

memweave_status memweaveFinalize(void) {
  using namespace memweave::capi;
  try {
    std::lock_guard<std::mutex> lock(g_init_mutex);
    context* c = g_context.exchange(nullptr, std::memory_order_acq_rel);
    if (c == nullptr) return MEMWEAVE_SUCCESS;
    const memweave::heap_stats s = c->heap->stats();
    if (s.live_allocations != 0) {
      memweave::log(memweave::log_level::warn,
                    "memweaveFinalize: " + std::to_string(s.live_allocations) + " allocations (" +
                        memweave::format_bytes(s.bytes_in_use) +
                        ") were still live; their pointers are now invalid");
    }
    delete c;  // heap, host pool, then device; destructors never throw
    return MEMWEAVE_SUCCESS;
  } catch (...) {
    return fail_from_current_exception("memweaveFinalize");
  }
}

int memweaveIsInitialized(void) {
  return memweave::capi::current() != nullptr ? 1 : 0;
}

memweave_status memweaveMalloc(void** ptr, std::size_t bytes) {
  if (ptr == nullptr) {
    return fail(MEMWEAVE_ERROR_INVALID_VALUE,
                "memweaveMalloc: ptr is NULL; pass the address of a void* to receive the "
                "allocation");
  }
  *ptr = nullptr;
  if (bytes == 0) return MEMWEAVE_SUCCESS;  // as cudaMalloc: NULL and success
  int rc = MEMWEAVE_SUCCESS;
  context* c = memweave::capi::ensure(&rc);
  if (c == nullptr) return rc;
  void* p = c->heap->try_allocate(bytes);
  if (p == nullptr) {
    try {
      return fail(MEMWEAVE_ERROR_MEMORY_ALLOCATION,
                  "memweaveMalloc: " + c->heap->describe_failure(bytes));
    } catch (...) {
      return fail(MEMWEAVE_ERROR_MEMORY_ALLOCATION, "");
    }
  }
  *ptr = p;
  return MEMWEAVE_SUCCESS;
}

memweave_status memweaveFree(void* ptr) {
  if (ptr == nullptr) return MEMWEAVE_SUCCESS;
  try {
    context* c = memweave::capi::current();
    if (c == nullptr) {
      return fail(MEMWEAVE_ERROR_INVALID_DEVICE_POINTER,
                  "memweaveFree(" + pointer_text(ptr) +
                      "): memweave is not initialized, so this is not one of its allocations");
    }
    if (c->heap->deallocate(ptr) == memweave::status::success) return MEMWEAVE_SUCCESS;
    return fail(MEMWEAVE_ERROR_INVALID_DEVICE_POINTER,
                "memweaveFree(" + pointer_text(ptr) + "): " +
                    (c->heap->owns(ptr)
                         ? "inside the pool but not the start of a live allocation (freed "
                           "already, or an interior pointer); nothing changed"
                         : "not an allocation of the memweave pool (from cudaMalloc, or host "
                           "memory?); nothing changed"));
  } catch (...) {
    return fail_from_current_exception("memweaveFree");
  }
}

int memweaveOwns(const void* ptr) {
  context* c = memweave::capi::current();
  return c != nullptr && c->heap->owns(ptr) ? 1 : 0;
}

memweave_status memweaveMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  if (free_bytes == nullptr && total_bytes == nullptr) {
    return fail(MEMWEAVE_ERROR_INVALID_VALUE,
                "memweaveMemGetInfo: both out-pointers are NULL; pass at least one");
  }
  int rc = MEMWEAVE_SUCCESS;
  context* c = memweave::capi::ensure(&rc);
  if (c == nullptr) return rc;
  const memweave::heap_stats s = c->heap->stats();
  if (free_bytes != nullptr) *free_bytes = s.free_bytes;
  if (total_bytes != nullptr) *total_bytes = s.bytes_reserved;
  return MEMWEAVE_SUCCESS;
}

memweave_status memweaveGetStats(memweave_stats* stats) {
  if (stats == nullptr) {
    return fail(MEMWEAVE_ERROR_INVALID_VALUE, "memweaveGetStats: stats is NULL");
  }
  int rc = MEMWEAVE_SUCCESS;
  context* c = memweave::capi::ensure(&rc);
  if (c == nullptr) return rc;
  const memweave::heap_stats s = c->heap->stats();
  memweave_stats out{};
  out.bytes_in_use = s.bytes_in_use;
  out.peak_bytes_in_use = s.peak_bytes_in_use;
  out.bytes_reserved = s.bytes_reserved;
  out.free_bytes = s.free_bytes;
  out.largest_free_run = s.largest_free_run;
  out.fragmentation = s.fragmentation;
  out.allocations = s.allocations;
  out.frees = s.frees;
  out.failures = s.failures;
  out.invalid_frees = s.invalid_frees;
  out.live_allocations = s.live_allocations;
  out.arenas = s.arenas;
  if (memweave::pinned_host_pool* h = c->host_ptr.load(std::memory_order_acquire)) {
    const memweave::pinned_host_stats hs = h->stats();
    out.host_capacity = hs.capacity;
    out.host_bytes_in_use = hs.bytes_in_use;
    out.host_peak_bytes_in_use = hs.peak_bytes_in_use;
    out.host_live_allocations = hs.live_allocations;
  }
  *stats = out;
  return MEMWEAVE_SUCCESS;
}

memweave_status memweaveResetPeak(void) {
  int rc = MEMWEAVE_SUCCESS;
  context* c = memweave::capi::ensure(&rc);
  if (c == nullptr) return rc;
  c->heap->reset_peak();
  if (memweave::pinned_host_pool* h = c->host_ptr.load(std::memory_order_acquire)) {
    h->reset_peak();
  }
  return MEMWEAVE_SUCCESS;
}

memweave_status memweaveTraceStart(const char* path) {
  if (path == nullptr || *path == '\0') {
    return fail(MEMWEAVE_ERROR_INVALID_VALUE,
                "memweaveTraceStart: path is NULL or empty; pass the file to write");
  }
  int rc = MEMWEAVE_SUCCESS;
  context* c = memweave::capi::ensure(&rc);
  if (c == nullptr) return rc;
  try {
    c->heap->start_trace(path);
    return MEMWEAVE_SUCCESS;
  } catch (...) {
    return fail_from_current_exception("memweaveTraceStart");
  }
}

memweave_status memweaveTraceStop(void) {
  if (context* c = memweave::capi::current()) c->heap->stop_trace();
  return MEMWEAVE_SUCCESS;
}

memweave_status memweaveHostMalloc(void** ptr, std::size_t bytes) {
  if (ptr == nullptr) {
    return fail(MEMWEAVE_ERROR_INVALID_VALUE,
                "memweaveHostMalloc: ptr is NULL; pass the address of a void* to receive the "
                "allocation");
  }
  *ptr = nullptr;
  if (bytes == 0) return MEMWEAVE_SUCCESS;
  int rc = MEMWEAVE_SUCCESS;
  context* c = memweave::capi::ensure(&rc);
  if (c == nullptr) return rc;
  memweave::pinned_host_pool* h = memweave::capi::host_pool(*c, &rc);
  if (h == nullptr) return rc;
  void* p = h->allocate(bytes);
  if (p == nullptr) {
    try {
      return fail(MEMWEAVE_ERROR_MEMORY_ALLOCATION,
                  "memweaveHostMalloc: " + std::to_string(bytes) + " bytes (" +
                      memweave::format_bytes(bytes) + ") do not fit in the pinned host pool: " +
                      memweave::format_bytes(h->bytes_in_use()) + " of " +
                      memweave::format_bytes(h->capacity()) +
                      " in use; free host memory or raise MEMWEAVE_HOST_POOL_BYTES "
                      "(memweave_config.host_pool_bytes)");
    } catch (...) {
      return fail(MEMWEAVE_ERROR_MEMORY_ALLOCATION, "");
    }
  }
  *ptr = p;
  return MEMWEAVE_SUCCESS;
}

memweave_status memweaveHostFree(void* ptr) {
  if (ptr == nullptr) return MEMWEAVE_SUCCESS;
  try {
    context* c = memweave::capi::current();
    memweave::pinned_host_pool* h =
        c != nullptr ? c->host_ptr.load(std::memory_order_acquire) : nullptr;
    if (h != nullptr && h->deallocate(ptr) == memweave::status::success) {
      return MEMWEAVE_SUCCESS;
    }
    return fail(MEMWEAVE_ERROR_INVALID_DEVICE_POINTER,
                "memweaveHostFree(" + pointer_text(ptr) +
                    "): not a live allocation of the pinned host pool (foreign, freed "
                    "already, or interior); nothing changed");
  } catch (...) {
    return fail_from_current_exception("memweaveHostFree");
  }
}

const char* memweaveGetErrorString(memweave_status status) {
  switch (status) {
    case MEMWEAVE_SUCCESS:
      return "no error";
    case MEMWEAVE_ERROR_INVALID_VALUE:
      return "invalid argument";
    case MEMWEAVE_ERROR_MEMORY_ALLOCATION:
      return "out of memory";
    case MEMWEAVE_ERROR_INITIALIZATION_ERROR:
      return "initialization error";
    case MEMWEAVE_ERROR_INVALID_DEVICE_POINTER:
      return "invalid device pointer";
    case MEMWEAVE_ERROR_NO_DEVICE:
      return "no device";
    case MEMWEAVE_ERROR_NOT_SUPPORTED:
      return "operation not supported";
    case MEMWEAVE_ERROR_UNKNOWN:
      return "unknown error";
    default:
      return "unrecognized error code";
  }
}

const char* memweaveGetLastErrorMessage(void) {
  return memweave::capi::t_last_error.c_str();
}

const char* memweaveGetVersion(void) {
  return MEMWEAVE_VERSION_STRING;
}

}  // extern "C"
