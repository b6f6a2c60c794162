// PyTorch's pluggable-allocator entry points (memweave_torch.h) over the C API's context.
//
// Every allocation is for PyTorch's stream and every free is stream-ordered on the stream
// PyTorch passes (the one the block was allocated for): the block is reused at once by
// later allocations for that stream, and by other streams once an event recorded at the
// free has completed. The pool is the one of the device PyTorch names.
//
// CUDA graphs (torch.cuda.graph): an allocation during the capture is a block of the pool,
// which the graph's replays then use; a free during the capture keeps the block allocated
// (memweave_torch_free). The runtime calls the pool makes meanwhile (queries of earlier
// frees' events, a new arena) run in the relaxed capture mode, which PyTorch's global-mode
// capture would otherwise refuse, invalidating the capture. Not covered: a tensor made in
// the capture and freed after it (a graph output the program drops) goes back to the pool
// while the graph may still replay into it; keep a graph's outputs alive as long as the
// graph, as PyTorch's documentation of static outputs asks.
//
// Errors: the signatures carry none. A failed free is logged and ignored. A failed
// allocation THROWS a std::runtime_error ("memweave: CUDA out of memory. ..." with the
// request, free bytes, largest free run and fragmentation; "memweave: cannot serve device
// D: ..." where no pool can serve it, a bad setting or device index): PyTorch calls this function
// from C++ through a std::function and stores what it returns unchecked, so a NULL would
// surface later as an illegal-address error that kills the CUDA context; an exception
// propagates like the CUDA caching allocator's own out-of-memory error and reaches Python
// as a RuntimeError. This is the one place where memweave throws across its C boundary.
// Thread-safe as the C API is.
#include "memweave/memweave_torch.h"

#include <atomic>
#include <stdexcept>
#include <string>

#include "capi/capi_context.hpp"
#include "memweave/core/log.hpp"

namespace {

// `out_of_memory`: the pool is full; else memweave cannot serve the device at all (a bad
// setting, a device index the runtime does not list, an arena that cannot be had), which
// is not an out-of-memory and is not called one.
[[noreturn]] void throw_failure(const std::string& why, bool out_of_memory, int rc) {
  std::string m = std::string("memweave: ") + (out_of_memory ? "CUDA out of memory. " : "") + why;
  memweave::log(memweave::log_level::error, m);
  memweave::capi::fail(rc, m);
  throw std::runtime_error(m);
}

}  // namespace

extern "C" {

void* memweave_torch_malloc(ssize_t size, int device, struct CUstream_st* stream) {
  using namespace memweave;
  if (size <= 0) return nullptr;  // PyTorch never asks for 0 bytes through this path
  const auto bytes = static_cast<std::size_t>(size);
  std::string why;
  {
    capi::busy_scope busy;
    int rc = MEMWEAVE_SUCCESS;
    capi::context* c = capi::ensure(&rc);
    capi::pool* p =
        c != nullptr ? capi::get_pool(*c, device, "memweave_torch_malloc", &rc) : nullptr;
    if (p != nullptr) {
      // Waits for pending cross-stream frees and retries before giving up.
      void* out = p->ordered->try_allocate(bytes, c->rt->stream_key(stream, p->ordinal));
      if (out != nullptr) return out;
      try {
        why = "Tried to allocate " + std::to_string(bytes) + " bytes on device " +
              std::to_string(p->ordinal) + ": " + p->ordered->describe_failure(bytes);
      } catch (...) {
        why = "Tried to allocate " + std::to_string(bytes) + " bytes";
      }
    } else {
      throw_failure(std::string("cannot serve device ") + std::to_string(device) + ": " +
                        memweaveGetLastErrorMessage(),
                    rc == MEMWEAVE_ERROR_MEMORY_ALLOCATION, rc);
    }
  }
  throw_failure(why, true, MEMWEAVE_ERROR_MEMORY_ALLOCATION);
}

void memweave_torch_free(void* ptr, ssize_t /*size*/, int device, struct CUstream_st* stream) {
  using namespace memweave;
  if (ptr == nullptr) return;
  // PyTorch frees on the block's stream without making the block's device current: its
  // default stream (NULL) is `device`'s, not the current device's. The free logs nothing:
  // it returns the reason, logged here.
  const int rc = capi::release("memweave_torch_free", ptr, stream, true, device);
  if (rc == MEMWEAVE_ERROR_STREAM_CAPTURE_UNSUPPORTED) {
    // A tensor that dies inside a CUDA graph's capture: every replay of the graph still
    // writes its block, and these entry points are not told when the graph goes (memweave
    // provides none of the pluggable allocator's pool hooks), so the block stays allocated
    // for the life of the process (PyTorch's own allocator keeps it in the graph's private
    // pool until the graph is released). Said once: a capture may free many, and each
    // capture keeps its own.
    static std::atomic<bool> told{false};
    if (!told.exchange(true)) {
      log(log_level::warn,
          "memweave_torch_free: tensors freed during a CUDA graph capture keep their memory "
          "for the rest of the process (the graph's replays still use it and memweave is not "
          "told when the graph is destroyed; each capture keeps its own): " +
              std::string(memweaveGetLastErrorMessage()));
    }
  } else if (rc != MEMWEAVE_SUCCESS) {
    log(log_level::error,
        std::string("memweave_torch_free: ") + memweaveGetLastErrorMessage() + "; ignored");
  }
}

}  // extern "C"
