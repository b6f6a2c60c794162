// The C API (memweave.h): one process-wide context (the runtime, one pool per device, the
// pinned host pool) behind plain C functions.
//
// Invariants: g_context is nullptr or a fully built context; it changes only under
// g_init_mutex (memweaveInit, memweaveFinalize, lazy initialization). Calls that use the
// context read it lock-free (acquire) and rely on the documented rule that Finalize does
// not run concurrently with them. A pool, once stored in context::pools, lives until
// Finalize or its device's release (memweaveReleaseDevicePool, cudaDeviceReset), which
// unpublishes it and waits for the lookups of other threads that may hold it (pool_reader:
// a lookup by pointer scans every device's pool); pools are made under context::pools_mutex
// (lock order: g_init_mutex, then pools_mutex, then a heap's own locks). Every allocation and free
// goes through the pool's stream_ordered_heap, so a block is never handed out while a stream may
// still use it: synchronous frees first wait for the device (as cudaFree), stream-ordered frees
// record an event on the caller's stream. Nothing throws across the C boundary: every
// entry point catches everything and turns it into a code plus a thread-local message.
// Every entry point that can reach the CUDA runtime holds a busy_scope, so that the
// runtime calls memweave makes go to the real runtime when the interposer is preloaded.
#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <new>
#include <optional>
#include <string>

#include "capi/capi_context.hpp"
#include "memweave/core/config.hpp"
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

// Set in the child of a fork() made after memweave was initialized: the pools' streams and
// worker threads stayed in the parent (and a lock another thread held then stays held), so
// every call there refuses with fork_refusal() instead of waiting for them forever.
std::atomic<bool> g_forked{false};
// Threads inside g_init_mutex (init, lazy init, finalize): a fork then leaves the child with
// that mutex held by a thread it does not have, so the child refuses too.
std::atomic<int> g_initializing{0};
[[maybe_unused]] const int g_atfork = ::pthread_atfork(nullptr, nullptr, [] {
  if (g_context.load(std::memory_order_relaxed) != nullptr ||
      g_initializing.load(std::memory_order_relaxed) != 0) {
    g_forked.store(true);
  }
});

// Holds g_init_mutex, counted in g_initializing (before the lock is tried, so that a fork
// made while this thread waits for it also counts).
class init_lock {
 public:
  init_lock() : counted_(), lock_(g_init_mutex) {}
  init_lock(const init_lock&) = delete;
  init_lock& operator=(const init_lock&) = delete;

 private:
  struct counted {
    counted() noexcept { g_initializing.fetch_add(1); }
    ~counted() { g_initializing.fetch_sub(1); }
  };
  counted counted_;
  std::lock_guard<std::mutex> lock_;
};

int fork_refusal(const char* what_call) noexcept {
  try {
    return fail(MEMWEAVE_ERROR_NOT_SUPPORTED,
                std::string(what_call) +
                    ": this process was forked from one that had initialized memweave; its "
                    "pools, streams and threads stayed in the parent (the CUDA runtime cannot "
                    "be used after fork either), so memweave refuses every call here: fork "
                    "before memweave's first use, or exec the child");
  } catch (...) {  // no memory for the text: the code says it
    return MEMWEAVE_ERROR_NOT_SUPPORTED;
  }
}

// This thread's last error message. The string is destroyed when the thread ends (the main
// thread's at exit, before global destructors and libraries' destructor functions, which may
// still call memweave); from then on a failure keeps only its code, and the message is "".
thread_local bool t_last_error_gone = false;  // trivially destructible: readable to the end
struct last_error_slot {
  std::string text;
  ~last_error_slot() { t_last_error_gone = true; }
};
thread_local last_error_slot t_last_error;
thread_local int t_busy = 0;  // busy_scope depth on this thread

std::string pointer_text(const void* p) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", p);
  return text;
}

device_kind kind_of(const std::string& k) {
  if (k == "cuda") return device_kind::cuda;
  if (k == "host") return device_kind::host;
  if (k == "null") return device_kind::null;
  throw invalid_argument("device kind '" + k +
                         "' is not one of auto|cuda|host|null; fix MEMWEAVE_DEVICE "
                         "(memweave_config.device)");
}

// The environment's settings, overridden by the non-zero fields of `config`. Makes no
// device: the first pool does (make_pool).
std::unique_ptr<context> make_context(const memweave_config* config) {
  // Every MEMWEAVE_* value is checked, as the command line checks them: a malformed one is
  // an error naming it, an unknown name a warning (a typo would otherwise go unnoticed).
  validate_environment();
  device_options dopt = device_options::from_environment();
  heap_options hopt = heap_options::from_environment();
  std::size_t host_bytes = 0;
  if (config != nullptr) {
    if (config->device != nullptr && *config->device != '\0') dopt.kind = config->device;
    if (config->device_bytes != 0) {
      dopt.capacity_bytes = config->device_bytes;
      dopt.capacity_knob = "memweave_config.device_bytes";
    }
    if (config->pool_bytes != 0) {
      hopt.pool_bytes = config->pool_bytes;
      hopt.pool_knob = "memweave_config.pool_bytes";  // what the heap's errors name
    }
    if (config->pool_fraction != 0.0) {
      if (!(config->pool_fraction > 0.0 && config->pool_fraction <= 1.0)) {
        throw invalid_argument(
            "memweave_config.pool_fraction = " + std::to_string(config->pool_fraction) +
            " is not in (0, 1]; use e.g. 0.9, or 0 for MEMWEAVE_POOL_FRACTION");
      }
      hopt.pool_fraction = config->pool_fraction;
      // The fraction sizes the pool: its field is the remedy.
      if (hopt.pool_bytes == 0) hopt.pool_knob = "memweave_config.pool_fraction";
    }
    if (config->block_bytes != 0) {
      // At most 1 GiB, as MEMWEAVE_BLOCK_BYTES: a larger block passed here, and the pool then
      // failed asking for at least one block (8 EiB) by MEMWEAVE_POOL_BYTES.
      if (!valid_block_bytes(config->block_bytes) || config->block_bytes > (std::size_t{1} << 30)) {
        throw invalid_argument(
            "memweave_config.block_bytes = " + std::to_string(config->block_bytes) +
            " is not a power of two from 256 to 1 GiB; use e.g. 1024, or 0 "
            "for MEMWEAVE_BLOCK_BYTES");
      }
      hopt.block_bytes = config->block_bytes;
    }
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
    // A pool sized by a field: growth's remedy is a field too.
    if (!hopt.pool_knob.empty() || config->grow_bytes != 0) {
      hopt.grow_knob = "memweave_config.grow_bytes";
    }
    if (config->trace_path != nullptr && *config->trace_path != '\0') {
      hopt.trace_path = config->trace_path;
      hopt.trace_knob = "memweave_config.trace_path";
    }
    host_bytes = config->host_pool_bytes;
    // Checked here, not at the first memweaveHostMalloc, and named as the caller set it.
    if (host_bytes != 0 && host_bytes < pinned_host_pool::min_bytes) {
      throw invalid_argument("memweave_config.host_pool_bytes = " + std::to_string(host_bytes) +
                             " is below the pinned host pool's minimum of " +
                             format_bytes(pinned_host_pool::min_bytes) +
                             "; ask for more, or 0 for MEMWEAVE_HOST_POOL_BYTES");
    }
  }
  // Read now so that a bad MEMWEAVE_HOST_POOL_BYTES is reported at initialization.
  if (host_bytes == 0) host_bytes = pinned_host_pool::bytes_from_environment();
  // A drop-in cudaMalloc must hand out GPU memory: `auto` means cuda here, never the
  // simulated host device (which a GPU program would take for device memory). The host
  // and null devices are used only when named.
  if (dopt.kind == "auto") dopt.kind = "cuda";

  auto ctx = std::make_unique<context>();
  ctx->device_settings = dopt;
  ctx->trace_path = hopt.trace_path;
  ctx->trace_knob = hopt.trace_knob;
  hopt.trace_path.clear();  // each pool traces to its own file (trace_path_of)
  hopt.trace_knob.clear();
  ctx->heap_settings = hopt;
  ctx->host_pool_bytes = host_bytes;
  if (config != nullptr && config->host_pool_bytes != 0) {
    ctx->host_pool_knob = "memweave_config.host_pool_bytes";
  }
  ctx->rt = make_runtime(kind_of(dopt.kind));
  return ctx;
}

// Makes the pool of `ordinal` (pools_mutex held by the caller). Throws.
pool* make_pool_locked(context& ctx, int ordinal) {
  auto p = std::make_unique<pool>();
  p->ordinal = ordinal;
  device_options dopt = ctx.device_settings;
  dopt.cuda_ordinal = ordinal;
  p->dev = make_device(dopt);
  heap_options hopt = ctx.heap_settings;
  unsigned generation = 0;
  if (!ctx.trace_path.empty()) {
    generation = ctx.traced_pools[static_cast<std::size_t>(ordinal)];
    hopt.trace_path = trace_path_of(ctx.trace_path, ordinal, generation);
    hopt.trace_knob = ctx.trace_knob;
  }
  p->heap = std::make_unique<device_heap>(*p->dev, hopt);
  if (!ctx.trace_path.empty()) {
    ++ctx.traced_pools[static_cast<std::size_t>(ordinal)];
    if (generation != 0) {
      log(log_level::info, "memweave: device " + std::to_string(ordinal) +
                               "'s pool was released (cudaDeviceReset, "
                               "memweaveReleaseDevicePool); the new pool's heap trace goes to '" +
                               hopt.trace_path + "', the earlier one's stays in '" +
                               trace_path_of(ctx.trace_path, ordinal, generation - 1) + "'");
    }
  }
  p->ordered = std::make_unique<stream_ordered_heap>(*p->heap);
  pool* raw = p.get();
  ctx.owned_pools.push_back(std::move(p));
  ctx.pools[static_cast<std::size_t>(ordinal)].store(raw, std::memory_order_release);
  return raw;
}

std::string describe(context& c) {
  std::lock_guard<std::mutex> lock(c.pools_mutex);
  std::string pools;
  for (const auto& p : c.owned_pools) {
    pools += (pools.empty() ? "" : ", ") + std::string(to_string(p->dev->kind())) + ":" +
             std::to_string(p->ordinal) + " " + format_bytes(p->heap->stats().bytes_reserved);
  }
  return c.device_settings.kind + " device, pools: " + (pools.empty() ? "none yet" : pools);
}

// An allocation from the current device's pool, for `stream` when `stream_ordered`; fills
// *ptr or fails with the numbers. Caller holds a busy_scope.
memweave_status allocate(const char* what_call, void** ptr, std::size_t bytes, CUstream_st* stream,
                         bool stream_ordered) {
  if (ptr == nullptr) {
    return fail(MEMWEAVE_ERROR_INVALID_VALUE,
                std::string(what_call) +
                    ": ptr is NULL; pass the address of a void* to receive the allocation");
  }
  *ptr = nullptr;
  if (bytes == 0) return MEMWEAVE_SUCCESS;  // as cudaMalloc: NULL and success
  int rc = MEMWEAVE_SUCCESS;
  context* c = ensure(&rc);
  if (c == nullptr) return rc;
  // As cudaMallocAsync: from the pool of the stream's device, which the free then finds.
  int ordinal = -1;
  if (stream_ordered) {
    try {
      // Under capture the allocation would be a node of the graph, made each time the graph
      // runs: a block of the pool handed out now would be written by every launch of it,
      // after memweave gave it to someone else. Asked first: cudaStreamGetDevice on a
      // capturing stream invalidates its capture (CUDA 13 on an H200), which the runtime's
      // own allocation the interposer then forwards to would fail with.
      if (c->rt->capturing(stream, -1)) {
        return fail(MEMWEAVE_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                    std::string(what_call) + ": stream " + pointer_text(stream) +
                        " is being captured into a CUDA graph, which owns what is allocated "
                        "in it; memweave's pool cannot serve that (the interposer passes the "
                        "call to the CUDA runtime): allocate before the capture");
      }
      ordinal = c->rt->stream_device(stream, -1);
    } catch (...) {
      return fail_from_current_exception(what_call);
    }
  }
  pool* p = get_pool(*c, ordinal, what_call, &rc);
  if (p == nullptr) return rc;
  // A synchronous allocation may be used on any stream: it never takes a block still
  // pending on one (no_reuse_stream), only blocks every stream is done with.
  const std::uintptr_t key =
      stream_ordered ? c->rt->stream_key(stream, p->ordinal) : stream_ordered_heap::no_reuse_stream;
  void* out = p->ordered->try_allocate(bytes, key);
  if (out == nullptr) {
    try {
      return fail(MEMWEAVE_ERROR_MEMORY_ALLOCATION, std::string(what_call) + ": device " +
                                                        std::to_string(p->ordinal) + ": " +
                                                        p->ordered->describe_failure(bytes));
    } catch (...) {
      return fail(MEMWEAVE_ERROR_MEMORY_ALLOCATION, "");
    }
  }
  *ptr = out;
  return MEMWEAVE_SUCCESS;
}

// Why `p` cannot be freed, or "" when it is a live allocation of `pl`.
std::string why_not_live(const pool* pl, const void* p) {
  if (pl == nullptr) {
    return "not an allocation of the memweave pool of any device (from cudaMalloc, or host "
           "memory?); nothing changed";
  }
  if (pl->ordered->is_pending(p)) {
    return "freed already (a stream-ordered free of it is still pending); nothing changed";
  }
  if (pl->heap->allocation_size(p) == 0) {
    return "inside the pool but not the start of a live allocation (freed already, or an "
           "interior pointer); nothing changed";
  }
  return "";
}

// The calling thread's current device (0 on the simulated ones), or -1 when the runtime
// cannot say or it is past the devices memweave manages.
int current_ordinal(context& c) noexcept {
  try {
    const int d = c.device_settings.kind == "cuda" ? c.rt->current_device() : 0;
    return d >= 0 && d < k_max_devices ? d : -1;
  } catch (...) {
    return -1;
  }
}

// The pool of the calling thread's current device if it was made already, else nullptr.
pool* existing_current_pool(context& c) noexcept {
  const int d = current_ordinal(c);
  return d < 0 ? nullptr : c.pools[static_cast<std::size_t>(d)].load(std::memory_order_acquire);
}

}  // namespace

// Frees `ptr`: with `stream` ordered (stream_ordered; a default-stream handle meaning
// `default_device`'s, -1: the current device's) or after the device is idle.
int release(const char* what_call, void* ptr, CUstream_st* stream, bool stream_ordered,
            int default_device) noexcept {
  if (ptr == nullptr) return MEMWEAVE_SUCCESS;
  busy_scope busy;
  try {
    if (g_forked.load(std::memory_order_relaxed)) return fork_refusal(what_call);
    context* c = current();
    if (c == nullptr) {
      return fail(MEMWEAVE_ERROR_INVALID_DEVICE_POINTER,
                  std::string(what_call) + "(" + pointer_text(ptr) +
                      "): memweave is not initialized, so this is not one of its allocations");
    }
    pool* pl = owner_of(*c, ptr);
    const std::string why = why_not_live(pl, ptr);
    if (!why.empty()) {
      // The heap counts and logs the invalid free without being asked to free it: between the
      // look above and that call another thread may have been handed the block, which a
      // deallocate would then free under it. A pending block is live in the heap, so it is
      // only reported here.
      pool* counter = pl != nullptr ? pl : existing_current_pool(*c);
      if (counter != nullptr && !counter->ordered->is_pending(ptr)) {
        counter->heap->count_invalid_free(ptr);
      }
      return fail(MEMWEAVE_ERROR_INVALID_DEVICE_POINTER,
                  std::string(what_call) + "(" + pointer_text(ptr) + "): " + why);
    }
    // The device PyTorch passes is the block's, whose default stream a NULL stream means;
    // another is the caller's mistake, and ordering the free on that device's default stream
    // would hand the block out while the block's own still uses it: the block's is taken
    // (a simulated device has one pool, and the index means nothing there).
    if (c->device_settings.kind == "cuda" && default_device >= 0 && default_device != pl->ordinal) {
      log(log_level::warn, std::string(what_call) + "(" + pointer_text(ptr) + "): device " +
                               std::to_string(default_device) + " named, but the block is device " +
                               std::to_string(pl->ordinal) + "'s; freed as device " +
                               std::to_string(pl->ordinal) + "'s");
      default_device = pl->ordinal;
    }
    // Under capture the free would be a node of the graph, run whenever the graph is: the
    // block would go back to the pool now while the graph still uses it.
    if (stream_ordered && c->rt->capturing(stream, default_device)) {
      return fail(MEMWEAVE_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                  std::string(what_call) + "(" + pointer_text(ptr) + "): stream " +
                      pointer_text(stream) +
                      " is being captured into a CUDA graph; memweave cannot free a block of "
                      "its pool whenever the graph runs; nothing changed: free it outside the "
                      "capture");
    }
    std::unique_ptr<memweave::event> done;
    std::uintptr_t key = stream_ordered_heap::no_reuse_stream;
    int rc = MEMWEAVE_SUCCESS;
    if (stream_ordered) {
      try {
        const int device = c->rt->stream_device(stream, default_device);
        done = c->rt->record(stream, device);
        key = c->rt->stream_key(stream, device);
      } catch (const std::exception& e) {
        // No event on that stream: the block waits for the stream itself (below, the block's
        // device too), so that nothing the stream still runs can see it handed out again.
        log(log_level::warn, std::string(what_call) + ": " + e.what() +
                                 "; waiting for the stream and the device before reusing "
                                 "the block");
        done.reset();
        try {
          c->rt->synchronize_stream(stream, default_device);
        } catch (...) {
          // A failed stream (a sticky error) runs nothing more; the caller learns of it.
          rc = fail_from_current_exception(what_call);
        }
      }
    }
    if (!stream_ordered || (done == nullptr && key == stream_ordered_heap::no_reuse_stream)) {
      try {
        c->rt->synchronize_device(pl->ordinal, *pl->dev);
      } catch (const device_error& e) {
        // A stream capture refused the wait (cudaFree is as refused there): work may still
        // use the block, so nothing changes.
        if (e.runtime_code() == MEMWEAVE_ERROR_STREAM_CAPTURE_UNSUPPORTED) {
          return fail(MEMWEAVE_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                      std::string(what_call) + "(" + pointer_text(ptr) + "): " + e.what() +
                          ": a stream is being captured into a CUDA graph, which forbids "
                          "waiting for the device; nothing changed: free it after the capture");
        }
        // The device failed (a sticky error): its work is over, so the block is free; the
        // caller still learns of the failure, as from cudaFree.
        rc = fail_from_current_exception(what_call);
      } catch (...) {
        rc = fail_from_current_exception(what_call);
      }
    }
    std::string reason;
    if (pl->ordered->deallocate(ptr, key, std::move(done), &reason) != memweave::status::success) {
      return fail(MEMWEAVE_ERROR_INVALID_DEVICE_POINTER,
                  std::string(what_call) + "(" + pointer_text(ptr) + "): " + reason);
    }
    return rc;
  } catch (...) {
    return fail_from_current_exception(what_call);
  }
}

context::~context() {
  for (std::size_t d = 0; d < hosts.size(); ++d) {
    host_ptrs[d].store(nullptr, std::memory_order_release);
    hosts[d].reset();
  }
  for (auto it = owned_pools.rbegin(); it != owned_pools.rend(); ++it) {
    pools[static_cast<std::size_t>((*it)->ordinal)].store(nullptr, std::memory_order_release);
    (*it)->ordered.reset();  // waits for pending frees
    (*it)->heap.reset();
    (*it)->dev.reset();
  }
  owned_pools.clear();
  rt.reset();
}

busy_scope::busy_scope() noexcept {
  ++t_busy;
}

busy_scope::~busy_scope() {
  --t_busy;
}

context* current() noexcept {
  if (g_forked.load(std::memory_order_relaxed)) return nullptr;
  return g_context.load(std::memory_order_acquire);
}

int fail(int rc, const std::string& message) noexcept {
  try {
    if (!t_last_error_gone) t_last_error.text = message;
  } catch (...) {
    t_last_error.text.clear();  // no memory for the text: the code still says what happened
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
  } catch (const device_error& e) {
    // The runtime's own code where it gave one (a wait after a failed kernel: the caller
    // tells cudaErrorIllegalAddress or cudaErrorCudartUnloading from the rest by it).
    return fail(e.runtime_code() != 0 ? e.runtime_code() : unknown_rc, prefix + e.what());
  } catch (const std::exception& e) {
    return fail(unknown_rc, prefix + e.what());
  } catch (...) {
    return fail(unknown_rc, prefix + "unknown exception");
  }
}

context* ensure(int* rc) noexcept {
  if (g_forked.load(std::memory_order_relaxed)) {
    *rc = fork_refusal("memweave");
    return nullptr;
  }
  if (context* c = current()) return c;
  busy_scope busy;
  try {
    const init_lock lock;
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

std::string trace_path_of(const std::string& path, int ordinal, unsigned generation) {
  std::string p = ordinal == 0 ? path : path + ".device" + std::to_string(ordinal);
  if (generation != 0) p += ".reset" + std::to_string(generation);
  return p;
}

pool* get_pool(context& ctx, int ordinal, const char* what_call, int* rc, int arena_rc) noexcept {
  busy_scope busy;
  const bool asked = ordinal != -1;  // a device index the caller gave (PyTorch's)
  try {
    const bool cuda = ctx.device_settings.kind == "cuda";
    if (!cuda) {
      ordinal = 0;  // one simulated device: the device index means nothing there
    } else if (!asked) {
      ordinal = ctx.rt->current_device();
    }
    // A device index the runtime does not list; asked for its count only when no pool can be
    // found for it (PyTorch names the device on every allocation).
    const auto listed = [&] { return !cuda || !asked || ordinal < ctx.rt->device_count(); };
    const auto not_listed = [&]() -> pool* {
      *rc = fail(MEMWEAVE_ERROR_INVALID_VALUE,
                 std::string(what_call) + ": device " + std::to_string(ordinal) +
                     " is not a device of this process: the CUDA runtime lists " +
                     std::to_string(ctx.rt->device_count()) +
                     " (ordinals from 0; -1 is the current device)");
      return nullptr;
    };
    if (cuda && asked && ordinal < 0) return not_listed();
    if (ordinal >= k_max_devices && !listed()) return not_listed();
    if (ordinal < 0 || ordinal >= k_max_devices) {
      *rc =
          fail(MEMWEAVE_ERROR_INVALID_VALUE,
               std::string(what_call) + ": device " + std::to_string(ordinal) + " is outside the " +
                   std::to_string(k_max_devices) + " devices memweave can manage");
      return nullptr;
    }
    if (pool* p = ctx.pools[static_cast<std::size_t>(ordinal)].load(std::memory_order_acquire)) {
      return p;
    }
    if (!listed()) return not_listed();
    std::lock_guard<std::mutex> lock(ctx.pools_mutex);
    if (pool* p = ctx.pools[static_cast<std::size_t>(ordinal)].load(std::memory_order_acquire)) {
      return p;
    }
    try {
      return make_pool_locked(ctx, ordinal);
    } catch (const out_of_memory& e) {
      // The arena cannot be taken: memweave cannot serve this device (not a pool exhausted).
      *rc = fail(arena_rc, std::string(what_call) + ": making the pool of device " +
                               std::to_string(ordinal) + ": " + e.what());
      return nullptr;
    }
  } catch (...) {
    *rc = fail_from_current_exception(
        (std::string(what_call) + ": making the pool of " +
         (asked ? "device " + std::to_string(ordinal) : std::string("the current device")))
            .c_str(),
        MEMWEAVE_ERROR_INITIALIZATION_ERROR);
    return nullptr;
  }
}

pool* owner_of(context& ctx, const void* p) noexcept {
  const pool_reader reading(ctx);  // the pools of other devices may be released meanwhile
  for (auto& slot : ctx.pools) {
    pool* pl = slot.load(std::memory_order_acquire);
    if (pl != nullptr && pl->heap->owns(p)) return pl;
  }
  return nullptr;
}

int make_host_pool(context& ctx, int* rc) noexcept {
  busy_scope busy;
  try {
    pool* dev_pool = get_pool(ctx, -1, "memweaveHostMalloc", rc);
    if (dev_pool == nullptr) return -1;
    const auto d = static_cast<std::size_t>(dev_pool->ordinal);
    if (ctx.host_ptrs[d].load(std::memory_order_acquire) != nullptr) return dev_pool->ordinal;
    std::lock_guard<std::mutex> lock(ctx.host_mutex);
    if (!ctx.hosts[d]) {
      ctx.hosts[d] = std::make_unique<pinned_host_pool>(*dev_pool->dev, ctx.host_pool_bytes);
      ctx.host_ptrs[d].store(ctx.hosts[d].get(), std::memory_order_release);
    }
    return dev_pool->ordinal;
  } catch (...) {
    // device_error here means jemalloc could not be loaded: the pool cannot start.
    std::string what = "memweave: making the pinned host pool";
    try {
      what += " of " + format_bytes(ctx.host_pool_bytes) +
              " (memweave_config.host_pool_bytes, else MEMWEAVE_HOST_POOL_BYTES)";
    } catch (...) {
    }
    *rc = fail_from_current_exception(what.c_str(), MEMWEAVE_ERROR_INITIALIZATION_ERROR);
    return -1;
  }
}

pinned_host_pool* host_owner_of(context& ctx, const void* p) noexcept {
  for (auto& slot : ctx.host_ptrs) {
    pinned_host_pool* h = slot.load(std::memory_order_acquire);
    if (h != nullptr && h->owns(p)) return h;
  }
  return nullptr;
}

}  // namespace memweave::capi

using memweave::capi::busy_scope;
using memweave::capi::context;
using memweave::capi::fail;
using memweave::capi::fail_from_current_exception;
using memweave::capi::pointer_text;

extern "C" {

int memweave_internal_busy(void) {
  return memweave::capi::t_busy;
}

memweave_status memweaveInit(const memweave_config* config) {
  using namespace memweave::capi;
  if (g_forked.load(std::memory_order_relaxed)) return fork_refusal("memweaveInit");
  busy_scope busy;
  try {
    const init_lock lock;
    if (context* c = current()) {
      return fail(MEMWEAVE_ERROR_INITIALIZATION_ERROR,
                  "memweaveInit: memweave is already initialized (" + describe(*c) +
                      "), explicitly or by an earlier memweaveMalloc; call memweaveFinalize() "
                      "first to initialize again with another configuration");
    }
    std::unique_ptr<context> c = make_context(config);
    // The current device's pool now, so that a bad device or arena is reported here.
    int rc = MEMWEAVE_SUCCESS;
    if (get_pool(*c, -1, "memweaveInit", &rc, MEMWEAVE_ERROR_MEMORY_ALLOCATION) == nullptr) {
      return rc;
    }
    g_context.store(c.release(), std::memory_order_release);
    return MEMWEAVE_SUCCESS;
  } catch (...) {
    return fail_from_current_exception("memweaveInit", MEMWEAVE_ERROR_INITIALIZATION_ERROR);
  }
}

memweave_status memweaveFinalize(void) {
  using namespace memweave::capi;
  // The pools are the parent's: a child has nothing of them to release, and it reads as not
  // initialized (memweaveIsInitialized), which finalizing may follow unconditionally.
  if (g_forked.load(std::memory_order_relaxed)) return MEMWEAVE_SUCCESS;
  busy_scope busy;
  try {
    const init_lock lock;
    context* c = g_context.exchange(nullptr, std::memory_order_acq_rel);
    if (c == nullptr) return MEMWEAVE_SUCCESS;
    for (const auto& p : c->owned_pools) {
      p->ordered->drain();
      const memweave::heap_stats s = p->heap->stats();
      if (s.live_allocations != 0) {
        memweave::log(memweave::log_level::warn,
                      "memweaveFinalize: device " + std::to_string(p->ordinal) + ": " +
                          std::to_string(s.live_allocations) + " allocations (" +
                          memweave::format_bytes(s.bytes_in_use) +
                          ") were still live; their pointers are now invalid");
      }
    }
    delete c;  // host pool, pools, runtime; destructors never throw
    return MEMWEAVE_SUCCESS;
  } catch (...) {
    return fail_from_current_exception("memweaveFinalize");
  }
}

int memweaveIsInitialized(void) {
  return memweave::capi::current() != nullptr ? 1 : 0;
}

memweave_status memweaveMalloc(void** ptr, std::size_t bytes) {
  busy_scope busy;
  return memweave::capi::allocate("memweaveMalloc", ptr, bytes, nullptr, false);
}

memweave_status memweaveMallocAsync(void** ptr, std::size_t bytes, struct CUstream_st* stream) {
  busy_scope busy;
  return memweave::capi::allocate("memweaveMallocAsync", ptr, bytes, stream, true);
}

memweave_status memweaveFree(void* ptr) {
  return memweave::capi::release("memweaveFree", ptr, nullptr, false, -1);
}

memweave_status memweaveFreeAsync(void* ptr, struct CUstream_st* stream) {
  return memweave::capi::release("memweaveFreeAsync", ptr, stream, true, -1);
}

memweave_status memweaveRetireStream(struct CUstream_st* stream) {
  using namespace memweave::capi;
  if (g_forked.load(std::memory_order_relaxed)) return fork_refusal("memweaveRetireStream");
  context* c = current();
  // A default-stream handle names a device's own stream, which is never destroyed.
  if (c == nullptr || c->rt->is_default_stream(stream)) return MEMWEAVE_SUCCESS;
  busy_scope busy;
  const pool_reader reading(*c);  // other devices' pools may be released meanwhile
  for (std::size_t d = 0; d < c->pools.size(); ++d) {
    pool* p = c->pools[d].load(std::memory_order_acquire);
    if (p == nullptr) continue;
    const std::size_t blocks = p->ordered->retire_stream(c->rt->stream_key(stream, p->ordinal));
    if (blocks != 0 && memweave::log_enabled(memweave::log_level::debug)) {
      memweave::log(memweave::log_level::debug,
                    "memweaveRetireStream(" + pointer_text(stream) + "): device " +
                        std::to_string(p->ordinal) + ": " + std::to_string(blocks) +
                        " block(s) freed on it now wait for their events");
    }
  }
  return MEMWEAVE_SUCCESS;
}

memweave_status memweaveReleaseDevicePool(void) {
  using namespace memweave::capi;
  if (g_forked.load(std::memory_order_relaxed)) return fork_refusal("memweaveReleaseDevicePool");
  context* c = current();
  if (c == nullptr) return MEMWEAVE_SUCCESS;
  busy_scope busy;
  try {
    // One release at a time: a pool released by another thread waits, as it is destroyed,
    // on the events of its pending blocks, which may be this device's (two threads resetting
    // two devices at once: this reset went ahead, and that wait ran on destroyed events;
    // session 44's hostile run).
    std::lock_guard releasing(c->release_mutex);
    const int ordinal = current_ordinal(*c);
    if (ordinal < 0) return MEMWEAVE_SUCCESS;
    std::unique_ptr<pool> released;
    {
      std::lock_guard lock(c->pools_mutex);
      if (pool* p = c->pools[static_cast<std::size_t>(ordinal)].load(std::memory_order_acquire)) {
        // Out of the table first: no lookup finds it from here on, and the next allocation on
        // the device makes a new pool.
        c->pools[static_cast<std::size_t>(ordinal)].store(nullptr, std::memory_order_release);
        const auto it = std::find_if(c->owned_pools.begin(), c->owned_pools.end(),
                                     [p](const std::unique_ptr<pool>& o) { return o.get() == p; });
        released = std::move(*it);
        c->owned_pools.erase(it);
      }
    }
    // The device's pinned host pool allocates through its pool's device, and the reset frees
    // its region too (page-locked memory of the device's context): it goes first, and the
    // next memweaveHostMalloc on the device makes a new one (a pointer of the old one is as
    // dead as cudaHostAlloc's after a reset). Other devices' host pools stay.
    std::unique_ptr<memweave::pinned_host_pool> host;
    {
      std::lock_guard lock(c->host_mutex);
      const auto d = static_cast<std::size_t>(ordinal);
      c->host_ptrs[d].store(nullptr, std::memory_order_release);
      host = std::move(c->hosts[d]);
    }
    // Threads using other devices may have loaded the two (owner_of, the host pool's calls)
    // just before they were unpublished above: destroyed only once those are done.
    wait_for_pool_readers(*c);
    host.reset();
    // Destroyed here, outside the lock, in its members' order (capi_context.hpp): the pending
    // frees' events waited for (they die with the device's context), the arena freed while
    // the runtime still knows it, then the device.
    released.reset();
    // A block of another device's pool freed on one of this device's streams waits on an
    // event of this device, which the reset destroys: every other pool's pending blocks are
    // waited for first, those another thread is returning too (settle), their events going
    // back to the spare ones dropped below (a reset is rare; knowing which events are this
    // device's would cost every free). Done where this device has no pool as well: the
    // events are another pool's.
    {
      const pool_reader reading(*c);
      for (auto& slot : c->pools) {
        pool* other = slot.load(std::memory_order_acquire);
        if (other != nullptr) other->ordered->settle();
      }
    }
    // The events kept for the device's frees die with its context too: dropped now, not
    // recorded after the reset.
    c->rt->forget_device(ordinal);
    return MEMWEAVE_SUCCESS;
  } catch (...) {
    return fail_from_current_exception("memweaveReleaseDevicePool");
  }
}

int memweaveOwns(const void* ptr) {
  context* c = memweave::capi::current();
  return c != nullptr && memweave::capi::owner_of(*c, ptr) != nullptr ? 1 : 0;
}

memweave_status memweaveMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  if (free_bytes == nullptr && total_bytes == nullptr) {
    return fail(MEMWEAVE_ERROR_INVALID_VALUE,
                "memweaveMemGetInfo: both out-pointers are NULL; pass at least one");
  }
  busy_scope busy;
  int rc = MEMWEAVE_SUCCESS;
  context* c = memweave::capi::ensure(&rc);
  if (c == nullptr) return rc;
  memweave::capi::pool* p = memweave::capi::get_pool(*c, -1, "memweaveMemGetInfo", &rc);
  if (p == nullptr) return rc;
  p->ordered->reclaim();
  const memweave::heap_stats s = p->heap->stats();
  if (free_bytes != nullptr) *free_bytes = s.free_bytes;
  if (total_bytes != nullptr) *total_bytes = s.bytes_reserved;
  return MEMWEAVE_SUCCESS;
}

memweave_status memweaveGetStats(memweave_stats* stats) {
  if (stats == nullptr) {
    return fail(MEMWEAVE_ERROR_INVALID_VALUE, "memweaveGetStats: stats is NULL");
  }
  busy_scope busy;
  int rc = MEMWEAVE_SUCCESS;
  context* c = memweave::capi::ensure(&rc);
  if (c == nullptr) return rc;
  memweave::capi::pool* p = memweave::capi::get_pool(*c, -1, "memweaveGetStats", &rc);
  if (p == nullptr) return rc;
  const memweave::heap_stats s = p->heap->stats();
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
  const memweave::capi::pool_reader reading(*c);  // the host pool may be released meanwhile
  if (memweave::pinned_host_pool* h =
          c->host_ptrs[static_cast<std::size_t>(p->ordinal)].load(std::memory_order_acquire)) {
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
  busy_scope busy;
  int rc = MEMWEAVE_SUCCESS;
  context* c = memweave::capi::ensure(&rc);
  if (c == nullptr) return rc;
  memweave::capi::pool* p = memweave::capi::get_pool(*c, -1, "memweaveResetPeak", &rc);
  if (p == nullptr) return rc;
  p->heap->reset_peak();
  const memweave::capi::pool_reader reading(*c);  // the host pool may be released meanwhile
  if (memweave::pinned_host_pool* h =
          c->host_ptrs[static_cast<std::size_t>(p->ordinal)].load(std::memory_order_acquire)) {
    h->reset_peak();
  }
  return MEMWEAVE_SUCCESS;
}

memweave_status memweaveTraceStart(const char* path) {
  if (path == nullptr || *path == '\0') {
    return fail(MEMWEAVE_ERROR_INVALID_VALUE,
                "memweaveTraceStart: path is NULL or empty; pass the file to write");
  }
  busy_scope busy;
  int rc = MEMWEAVE_SUCCESS;
  context* c = memweave::capi::ensure(&rc);
  if (c == nullptr) return rc;
  if (memweave::capi::get_pool(*c, -1, "memweaveTraceStart", &rc) == nullptr) return rc;
  try {
    // Every pool, each to its own file (trace_path_of), and the pools made while it runs.
    std::lock_guard<std::mutex> lock(c->pools_mutex);
    const std::string knob = "memweaveTraceStart's path";
    c->traced_pools = {};
    for (const auto& p : c->owned_pools) {
      p->heap->start_trace(memweave::capi::trace_path_of(path, p->ordinal), knob);
      c->traced_pools[static_cast<std::size_t>(p->ordinal)] = 1;
    }
    c->trace_path = path;
    c->trace_knob = knob;
    return MEMWEAVE_SUCCESS;
  } catch (...) {
    return fail_from_current_exception("memweaveTraceStart");
  }
}

// A program that never calls memweaveTraceStop or memweaveFinalize (any program under the
// interposer) still gets its heap traces whole: at exit (or when the library is unloaded)
// every running trace is flushed and closed. Skipped if a pool is being made right then
// (its mutex taken): exit must not wait.
__attribute__((destructor)) static void memweave_flush_traces_at_exit() {
  memweave::capi::context* c = memweave::capi::current();
  if (c == nullptr || !c->pools_mutex.try_lock()) return;
  std::lock_guard<std::mutex> lock(c->pools_mutex, std::adopt_lock);
  for (const auto& p : c->owned_pools) p->heap->stop_trace();
}

memweave_status memweaveTraceStop(void) {
  if (context* c = memweave::capi::current()) {
    std::lock_guard<std::mutex> lock(c->pools_mutex);
    for (const auto& p : c->owned_pools) p->heap->stop_trace();
    c->trace_path.clear();
    c->traced_pools = {};
  }
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
  busy_scope busy;
  int rc = MEMWEAVE_SUCCESS;
  context* c = memweave::capi::ensure(&rc);
  if (c == nullptr) return rc;
  const int ordinal = memweave::capi::make_host_pool(*c, &rc);
  if (ordinal < 0) return rc;
  // Made above, outside the reader (making it may take the locks a release holds); taken
  // again inside, since a release (cudaDeviceReset of its device) may destroy it meanwhile.
  const memweave::capi::pool_reader reading(*c);
  memweave::pinned_host_pool* h =
      c->host_ptrs[static_cast<std::size_t>(ordinal)].load(std::memory_order_acquire);
  if (h == nullptr) {
    return fail(MEMWEAVE_ERROR_MEMORY_ALLOCATION,
                "memweaveHostMalloc: the pinned host pool was released while this call made "
                "it (cudaDeviceReset or memweaveReleaseDevicePool of its device on another "
                "thread); call again");
  }
  void* p = h->allocate(bytes);
  if (p == nullptr) {
    try {
      return fail(MEMWEAVE_ERROR_MEMORY_ALLOCATION,
                  "memweaveHostMalloc: " + std::to_string(bytes) + " bytes (" +
                      memweave::format_bytes(bytes) +
                      ") do not fit in the current device's pinned host pool: " +
                      memweave::format_bytes(h->bytes_in_use()) + " of " +
                      memweave::format_bytes(h->capacity()) +
                      " in use, the largest allocation it can give now " +
                      memweave::format_bytes(h->largest_allocation()) +
                      " (one allocation takes at most about 7/8 of an empty pool: jemalloc's "
                      "size classes); free host memory or raise " +
                      (c->host_pool_knob.empty() ? std::string("MEMWEAVE_HOST_POOL_BYTES")
                                                 : c->host_pool_knob));
    } catch (...) {
      return fail(MEMWEAVE_ERROR_MEMORY_ALLOCATION, "");
    }
  }
  *ptr = p;
  return MEMWEAVE_SUCCESS;
}

memweave_status memweaveHostFree(void* ptr) {
  if (ptr == nullptr) return MEMWEAVE_SUCCESS;
  using namespace memweave::capi;
  // In a forked child current() is null, which would read as "not a live allocation".
  if (g_forked.load(std::memory_order_relaxed)) return fork_refusal("memweaveHostFree");
  try {
    context* c = memweave::capi::current();
    // Any device's host pool (a pointer may be freed with another device current, as
    // cudaFreeHost's may); a release of its device (cudaDeviceReset) may be destroying it
    // meanwhile.
    std::optional<pool_reader> reading;
    if (c != nullptr) reading.emplace(*c);
    memweave::pinned_host_pool* h = c != nullptr ? host_owner_of(*c, ptr) : nullptr;
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
    case MEMWEAVE_ERROR_STREAM_CAPTURE_UNSUPPORTED:
      return "operation not supported on a stream being captured";
    case MEMWEAVE_ERROR_UNKNOWN:
      return "unknown error";
    default:
      return "unrecognized error code";
  }
}

const char* memweaveGetLastErrorMessage(void) {
  if (memweave::capi::t_last_error_gone) return "";
  return memweave::capi::t_last_error.text.c_str();
}

const char* memweaveGetVersion(void) {
  return MEMWEAVE_VERSION_STRING;
}

}  // extern "C"
