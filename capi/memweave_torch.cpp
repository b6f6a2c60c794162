// PyTorch's pluggable-allocator entry points (memweave_torch.h) over the C API's context.
// Thread-safe as the C API is; nothing throws out of these functions, and since their
// signatures carry no error, every failure is logged once as it happens.
#include "memweave/memweave_torch.h"

#include <cstdio>
#include <string>

#include "capi/capi_context.hpp"
#include "memweave/core/log.hpp"

namespace {

std::string pointer_text(const void* p) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", p);
  return text;
}

}  // namespace

extern "C" {

void* memweave_torch_malloc(ssize_t size, int device, struct CUstream_st* /*stream*/) {
  using namespace memweave;
  if (size <= 0) return nullptr;
  try {
    int rc = MEMWEAVE_SUCCESS;
    capi::context* c = capi::ensure(&rc);
    if (c == nullptr) {
      log(log_level::error, std::string("memweave_torch_malloc: ") + memweaveGetLastErrorMessage());
      return nullptr;
    }
    if (c->dev->kind() == device_kind::cuda && device != c->device_settings.cuda_ordinal) {
      const std::string message =
          "memweave_torch_malloc: asked for CUDA device " + std::to_string(device) +
          " but memweave manages device " + std::to_string(c->device_settings.cuda_ordinal) +
          " (MEMWEAVE_CUDA_DEVICE); use one device per process with memweave";
      capi::fail(MEMWEAVE_ERROR_INVALID_VALUE, message);
      log(log_level::error, message);
      return nullptr;
    }
    // allocate() logs the failure with its numbers: PyTorch's own message cannot carry them.
    void* p = c->heap->allocate(static_cast<std::size_t>(size));
    if (p == nullptr) {
      capi::fail(
          MEMWEAVE_ERROR_MEMORY_ALLOCATION,
          "memweave_torch_malloc: " + c->heap->describe_failure(static_cast<std::size_t>(size)));
    }
    return p;
  } catch (...) {
    log(log_level::error, "memweave_torch_malloc: unexpected failure (out of host memory?)");
    return nullptr;
  }
}

void memweave_torch_free(void* ptr, ssize_t /*size*/, int /*device*/,
                         struct CUstream_st* /*stream*/) {
  using namespace memweave;
  if (ptr == nullptr) return;
  try {
    capi::context* c = capi::current();
    if (c == nullptr) {
      log(log_level::error, "memweave_torch_free(" + pointer_text(ptr) +
                                "): memweave is not initialized (memweaveFinalize while "
                                "PyTorch still held memory?); ignored");
      return;
    }
    // deallocate() logs why a pointer is rejected and changes nothing.
    if (c->heap->deallocate(ptr) != status::success) {
      capi::fail(MEMWEAVE_ERROR_INVALID_DEVICE_POINTER,
                 "memweave_torch_free(" + pointer_text(ptr) + "): not a live allocation");
    }
  } catch (...) {
    log(log_level::error, "memweave_torch_free: unexpected failure; ignored");
  }
}

}  // extern "C"
