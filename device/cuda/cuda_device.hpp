// The `cuda` backend (the CUDA runtime), built only when MEMWEAVE_HAVE_CUDA. Private to
// device/: device.cpp reaches it through these functions (capi/ asks context_current()).
#pragma once

#include <memory>
#include <string>

#include "memweave/device/device.hpp"

namespace memweave::cuda_backend {

/// The number of usable CUDA devices; 0 when cudaGetDeviceCount fails (no driver, no GPU),
/// with the reason in `*why` when `why` is not null. Never throws.
int device_count(std::string* why) noexcept;

/// Whether the calling thread has a CUDA context current (cuCtxGetCurrent, found through
/// cudaGetDriverEntryPointByVersion); true when that cannot be asked. A thread that never
/// used CUDA has none, and cudaGetDevice's answer (0) there is a default, not a choice.
bool context_current() noexcept;

/// Makes GPU `ordinal`'s primary context current on the calling thread (retained and pushed:
/// cuDevicePrimaryCtxRetain, cuCtxPushCurrent), until pop_primary_context(ordinal) pops it
/// and releases it. Unlike cudaSetDevice it leaves no trace: the thread's context (or none)
/// and current device are as before once popped. False (nothing done) when the driver's entry
/// points cannot be had or the context cannot be made current.
bool push_primary_context(int ordinal) noexcept;
void pop_primary_context(int ordinal) noexcept;

/// A device on GPU `ordinal` (checked against device_count). Throws no_device_error when
/// the ordinal does not exist, device_error when the runtime fails.
std::unique_ptr<device> make_cuda_device(int ordinal);

}  // namespace memweave::cuda_backend
