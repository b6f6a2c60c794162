// A TEST-ONLY stand-in for the CUDA runtime library (libcudart.so.<major>, same soname and
// symbol version), so that memweave's cuda backend, C API, PyTorch entry points and
// interposer run, unchanged, on a machine without a GPU. Put its directory first in
// LD_LIBRARY_PATH and every libcudart user in the process binds to it.
//
// What it simulates, over the host backend's streams and events (device/host):
// - FAKE_CUDART_DEVICES devices (default 1; 0 = no device), each of the capacity given by
//   FAKE_CUDART_BYTES ("256M" or a comma-separated list per device, default 256 MiB).
//   Device memory is host memory (aligned_alloc), so "kernels" are host functions
//   (cudaLaunchHostFunc) that read and write it.
// - Each stream is a host_stream (a worker thread); the NULL/legacy/per-thread handles are
//   one default stream per device (it does not synchronize with other streams, unlike the
//   real legacy stream). Events are host_events.
// - The current device per thread, and contexts: a thread has one current after
//   cudaSetDevice, or after a call that needs a device made without one (device 0, as the
//   runtime does). fake_cudart_contexts(d) says whether any thread ever had a context on d;
//   cuCtxGetCurrent (through cudaGetDriverEntryPointByVersion) answers per thread, and the
//   primary context's retain/release and cuCtxPushCurrent/PopCurrent keep a per-thread stack.
// - cudaFree and cudaDeviceSynchronize wait for every stream of the device, as the runtime.
// - A link for timed copies: events measure the time the host-to-device and device-to-host
//   copies enqueued between them would take at FAKE_CUDART_H2D_GBPS / FAKE_CUDART_D2H_GBPS
//   (default 25 each); the copies themselves run at memcpy speed. GPU attributes are an
//   H100 SXM's. FAKE_CUDART_HOST_ALLOC_FAILS=1 makes cudaHostAlloc fail.
// - Stream capture as a state of a created stream (cudaStreamBeginCapture, EndCapture,
//   IsCapturing): no graph is built (EndCapture gives NULL), the work still runs. As the
//   real runtime does (CUDA 13 on an H200, session 41), cudaStreamGetDevice on a capturing
//   stream invalidates the capture: EndCapture then fails. The capture modes: while a
//   capture begun in cudaStreamCaptureModeGlobal is on (in any thread), or a non-relaxed one
//   of the calling thread, a thread whose own mode
//   (cudaThreadExchangeStreamCaptureMode) is not Relaxed may not query or wait for an event:
//   the call fails with cudaErrorStreamCaptureUnsupported and invalidates those captures
//   (cudaEventQuery during PyTorch's global-mode capture on the H200, session 41). Waiting for
//   the device while any of its streams is captured, in any mode, fails the same way.
// Only the calls memweave and its tests make are here. Thread-safe (one mutex for the
// tables; stream work runs on the streams' threads).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "device/host/host_device.hpp"

namespace {

using memweave::copy_kind;
using memweave::stream_role;
using memweave::host_backend::host_event;
using memweave::host_backend::host_stream;

struct fake_stream {
  int device = 0;
  host_stream s{stream_role::compute, nullptr};  // no simulated link: copies at memcpy speed
  // The milliseconds the copies enqueued so far would take over the simulated link
  // (FAKE_CUDART_H2D_GBPS, FAKE_CUDART_D2H_GBPS): what events recorded here measure.
  // Guarded by state::mu.
  double copy_ms = 0;
  // Between cudaStreamBeginCapture and cudaStreamEndCapture (guarded by state::mu). Only
  // whether a capture is on, and whether it was invalidated, is simulated: no graph is
  // built, work still runs.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaStreamCaptureMode capture_mode = cudaStreamCaptureModeRelaxed;
  std::thread::id capturing_thread;
};

struct fake_event {
  int device = 0;
  host_event e;
  double copy_ms = 0;  // its stream's copy_ms when recorded (guarded by state::mu)
};

struct allocation {
  int device = 0;
  std::size_t bytes = 0;
  bool host = false;  // cudaHostAlloc
};

constexpr int k_max_devices = 8;

struct state {
  std::mutex mu;  // guards every member below
  int devices = 1;
  std::vector<std::size_t> capacity;
  std::vector<std::size_t> used;
  std::map<std::uintptr_t, allocation> allocations;  // by start address
  std::set<fake_stream*> streams;
  std::vector<std::unique_ptr<fake_stream>> default_streams;  // by device, made on use
  std::atomic<bool> context[k_max_devices] = {};
  double h2d_bytes_per_ms = 25e6;  // FAKE_CUDART_H2D_GBPS, default 25
  double d2h_bytes_per_ms = 25e6;  // FAKE_CUDART_D2H_GBPS, default 25
  bool host_alloc_fails = false;   // FAKE_CUDART_HOST_ALLOC_FAILS=1: no page-locked memory
  std::atomic<long> copies{0};     // cudaMemcpyAsync calls
  std::atomic<long> events[k_max_devices] = {};  // live events by device
  std::atomic<int> fail_next_sync{0};            // fake_cudart_fail_next_sync's code, 0: none

  state() {
    if (const char* d = std::getenv("FAKE_CUDART_DEVICES")) devices = std::atoi(d);
    if (devices < 0) devices = 0;
    if (devices > k_max_devices) devices = k_max_devices;
    if (const char* r = std::getenv("FAKE_CUDART_H2D_GBPS")) h2d_bytes_per_ms = std::atof(r) * 1e6;
    if (const char* r = std::getenv("FAKE_CUDART_D2H_GBPS")) d2h_bytes_per_ms = std::atof(r) * 1e6;
    if (const char* f = std::getenv("FAKE_CUDART_HOST_ALLOC_FAILS")) {
      host_alloc_fails = std::strcmp(f, "1") == 0;
    }
    std::vector<std::size_t> sizes;
    if (const char* b = std::getenv("FAKE_CUDART_BYTES")) {
      std::string text = b;
      std::size_t pos = 0;
      while (pos <= text.size()) {
        const std::size_t comma = text.find(',', pos);
        const std::string item =
            text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        char* end = nullptr;
        std::size_t v = std::strtoull(item.c_str(), &end, 10);
        if (end != nullptr && (*end == 'M' || *end == 'm')) v <<= 20;
        if (end != nullptr && (*end == 'G' || *end == 'g')) v <<= 30;
        sizes.push_back(v);
        if (comma == std::string::npos) break;
        pos = comma + 1;
      }
    }
    for (int d = 0; d < devices; ++d) {
      capacity.push_back(sizes.empty()                                ? std::size_t{256} << 20
                         : static_cast<std::size_t>(d) < sizes.size() ? sizes[d]
                                                                      : sizes.back());
      used.push_back(0);
      default_streams.push_back(nullptr);
    }
  }
};

state& g() {
  static state* s = new state();  // never destroyed: stream threads may outlive main
  return *s;
}

thread_local int t_device = -1;  // -1: never chosen (cudaGetDevice says 0)
thread_local bool t_context = false;
thread_local cudaError_t t_last = cudaSuccess;
thread_local cudaStreamCaptureMode t_capture_mode = cudaStreamCaptureModeGlobal;

cudaError_t fail(cudaError_t e) {
  t_last = e;
  return e;
}

// The device a call that needs one uses; makes its context current on this thread.
// cudaErrorNoDevice when there is none.
cudaError_t use_device(int* d) {
  state& s = g();
  if (s.devices == 0) return cudaErrorNoDevice;
  *d = t_device < 0 ? 0 : t_device;
  t_context = true;
  s.context[*d].store(true);
  return cudaSuccess;
}

fake_stream* stream_of(cudaStream_t stream, int device) {
  if (stream != nullptr && stream != cudaStreamLegacy && stream != cudaStreamPerThread) {
    return reinterpret_cast<fake_stream*>(stream);
  }
  state& s = g();
  std::lock_guard lock(s.mu);
  auto& d = s.default_streams[static_cast<std::size_t>(device)];
  if (!d) {
    d = std::make_unique<fake_stream>();
    d->device = device;
    s.streams.insert(d.get());
  }
  return d.get();
}

void synchronize_device(int device) {
  std::vector<fake_stream*> list;
  {
    state& s = g();
    std::lock_guard lock(s.mu);
    for (fake_stream* f : s.streams) {
      if (f->device == device) list.push_back(f);
    }
  }
  for (fake_stream* f : list) {
    try {
      f->s.synchronize();
    } catch (...) {
    }
  }
}

cudaError_t do_malloc(void** p, std::size_t bytes, bool host) {
  if (p == nullptr) return fail(cudaErrorInvalidValue);
  *p = nullptr;
  int d = 0;
  if (cudaError_t e = use_device(&d); e != cudaSuccess) return fail(e);
  if (bytes == 0) return cudaSuccess;
  state& s = g();
  // Rounded up to 256 bytes; a size within 255 of SIZE_MAX wrapped to 0 and was "served".
  if (bytes > SIZE_MAX - 255) return fail(cudaErrorMemoryAllocation);
  const std::size_t rounded = (bytes + 255) / 256 * 256;
  {
    std::lock_guard lock(s.mu);
    if (!host && rounded > s.capacity[d] - s.used[d]) return fail(cudaErrorMemoryAllocation);
    if (!host) s.used[d] += rounded;
  }
  void* mem = std::aligned_alloc(256, rounded);
  if (mem == nullptr) {
    std::lock_guard lock(s.mu);
    if (!host) s.used[d] -= rounded;
    return fail(cudaErrorMemoryAllocation);
  }
  std::lock_guard lock(s.mu);
  s.allocations[reinterpret_cast<std::uintptr_t>(mem)] = allocation{d, rounded, host};
  *p = mem;
  return cudaSuccess;
}

cudaError_t do_free(void* p, bool host) {
  state& s = g();
  allocation a;
  {
    std::lock_guard lock(s.mu);
    auto it = s.allocations.find(reinterpret_cast<std::uintptr_t>(p));
    if (it == s.allocations.end() || it->second.host != host) {
      return fail(host ? cudaErrorInvalidValue : cudaErrorInvalidDevicePointer);
    }
    a = it->second;
    s.allocations.erase(it);
    if (!host) s.used[a.device] -= a.bytes;
  }
  std::free(p);
  return cudaSuccess;
}

int fake_cu_ctx_get_current(void** ctx) {
  *ctx = t_context ? reinterpret_cast<void*>(static_cast<std::uintptr_t>(t_device + 2)) : nullptr;
  return 0;
}

// The driver's context stack, as far as the runtime's current device goes: a pushed primary
// context makes its device current (with a context) until popped, when the thread's device
// and context are as before. A device's primary context is the handle device + 2.
thread_local std::vector<std::pair<int, bool>> t_pushed;  // (t_device, t_context) before

int fake_cu_device_get(int* dev, int ordinal) {
  if (ordinal < 0 || ordinal >= g().devices) return 101;  // CUDA_ERROR_INVALID_DEVICE
  *dev = ordinal;
  return 0;
}

int fake_cu_primary_ctx_retain(void** ctx, int dev) {
  if (dev < 0 || dev >= g().devices) return 101;
  *ctx = reinterpret_cast<void*>(static_cast<std::uintptr_t>(dev + 2));
  g().context[dev].store(true);
  return 0;
}

int fake_cu_primary_ctx_release(int dev) {
  return dev < 0 || dev >= g().devices ? 101 : 0;
}

int fake_cu_ctx_push_current(void* ctx) {
  t_pushed.emplace_back(t_device, t_context);
  t_device = static_cast<int>(reinterpret_cast<std::uintptr_t>(ctx)) - 2;
  t_context = true;
  return 0;
}

int fake_cu_ctx_pop_current(void** ctx) {
  if (t_pushed.empty()) return 201;  // CUDA_ERROR_INVALID_CONTEXT
  if (ctx != nullptr) *ctx = reinterpret_cast<void*>(static_cast<std::uintptr_t>(t_device + 2));
  std::tie(t_device, t_context) = t_pushed.back();
  t_pushed.pop_back();
  return 0;
}

}  // namespace

// Whether a capture forbids this thread a potentially unsafe call (see the top): a thread in
// the Global mode by its own non-relaxed capture or any thread's global one, in ThreadLocal
// by its own non-relaxed capture, in Relaxed by none. If so, those captures are invalidated
// and the call is to fail with cudaErrorStreamCaptureUnsupported.
static bool unsafe_call_refused() {
  if (t_capture_mode == cudaStreamCaptureModeRelaxed) return false;
  std::lock_guard lock(g().mu);
  bool refused = false;
  for (fake_stream* f : g().streams) {
    if (f->capture != cudaStreamCaptureStatusActive) continue;
    const bool own = f->capturing_thread == std::this_thread::get_id() &&
                     f->capture_mode != cudaStreamCaptureModeRelaxed;
    const bool global = t_capture_mode == cudaStreamCaptureModeGlobal &&
                        f->capture_mode == cudaStreamCaptureModeGlobal;
    if (own || global) {
      f->capture = cudaStreamCaptureStatusInvalidated;
      refused = true;
    }
  }
  return refused;
}

// Waiting for a whole device while any of its streams is being captured is invalid in every
// mode (the wait would take in the captured work): those captures are invalidated and the
// call is to fail with cudaErrorStreamCaptureUnsupported.
static bool device_wait_refused(int device) {
  std::lock_guard lock(g().mu);
  bool refused = false;
  for (fake_stream* f : g().streams) {
    if (f->device != device || f->capture != cudaStreamCaptureStatusActive) continue;
    f->capture = cudaStreamCaptureStatusInvalidated;
    refused = true;
  }
  return refused;
}

extern "C" {

// ---- test hooks (not CUDA) ----

/// 1 when some thread ever had a context current on `device`.
int fake_cudart_contexts(int device) {
  if (device < 0 || device >= k_max_devices) return 0;
  return g().context[device].load() ? 1 : 0;
}

/// How many cudaMemcpyAsync calls were made.
long fake_cudart_copies() {
  return g().copies.load();
}

/// The bytes of live cudaHostAlloc allocations.
std::size_t fake_cudart_host_bytes() {
  state& s = g();
  std::lock_guard lock(s.mu);
  std::size_t bytes = 0;
  for (const auto& [start, a] : s.allocations) bytes += a.host ? a.bytes : 0;
  return bytes;
}

/// The next cudaDeviceSynchronize returns `code` (a failed kernel's, as the runtime reports it
/// at the next synchronization).
void fake_cudart_fail_next_sync(int code) {
  g().fail_next_sync.store(code);
}

/// How many events of `device` exist (created, not destroyed).
long fake_cudart_events(int device) {
  if (device < 0 || device >= k_max_devices) return 0;
  return g().events[device].load();
}

/// The device whose memory holds `p` (inside an allocation), or -1.
int fake_cudart_device_of(const void* p) {
  state& s = g();
  std::lock_guard lock(s.mu);
  const auto key = reinterpret_cast<std::uintptr_t>(p);
  auto it = s.allocations.upper_bound(key);
  if (it == s.allocations.begin()) return -1;
  --it;
  if (key >= it->first + it->second.bytes || it->second.host) return -1;
  return it->second.device;
}

// ---- the runtime ----

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return fail(cudaErrorInvalidValue);
  *count = g().devices;
  return g().devices == 0 ? fail(cudaErrorNoDevice) : cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return fail(cudaErrorInvalidValue);
  if (g().devices == 0) return fail(cudaErrorNoDevice);
  *device = t_device < 0 ? 0 : t_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= g().devices) return fail(cudaErrorInvalidDevice);
  t_device = device;
  t_context = true;
  g().context[device].store(true);
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr || device < 0 || device >= g().devices) return fail(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "fake GPU %d", device);
  prop->totalGlobalMem = g().capacity[static_cast<std::size_t>(device)];
  return cudaSuccess;
}

// What cost_model's "auto" reads (device/cuda/cuda_throughput.cpp): an H100 SXM's attributes.
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (value == nullptr) return fail(cudaErrorInvalidValue);
  if (device < 0 || device >= g().devices) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor:
      *value = 9;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = 0;
      break;
    case cudaDevAttrMultiProcessorCount:
      *value = 132;
      break;
    case cudaDevAttrClockRate:
      *value = 1980000;
      break;
    case cudaDevAttrMemoryClockRate:
      *value = 2619000;
      break;
    case cudaDevAttrGlobalMemoryBusWidth:
      *value = 5120;
      break;
    default:
      return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr,
                                             unsigned int /*cudaVersion*/,
                                             unsigned long long /*flags*/,
                                             cudaDriverEntryPointQueryResult* status) {
  if (symbol == nullptr || funcPtr == nullptr) return fail(cudaErrorInvalidValue);
  static const std::pair<const char*, void*> entries[] = {
      {"cuCtxGetCurrent", reinterpret_cast<void*>(&fake_cu_ctx_get_current)},
      {"cuDeviceGet", reinterpret_cast<void*>(&fake_cu_device_get)},
      {"cuDevicePrimaryCtxRetain", reinterpret_cast<void*>(&fake_cu_primary_ctx_retain)},
      {"cuDevicePrimaryCtxRelease", reinterpret_cast<void*>(&fake_cu_primary_ctx_release)},
      {"cuCtxPushCurrent", reinterpret_cast<void*>(&fake_cu_ctx_push_current)},
      {"cuCtxPopCurrent", reinterpret_cast<void*>(&fake_cu_ctx_pop_current)},
  };
  for (const auto& [name, f] : entries) {
    if (std::strcmp(symbol, name) == 0) {
      *funcPtr = f;
      if (status != nullptr) *status = cudaDriverEntryPointSuccess;
      return cudaSuccess;
    }
  }
  *funcPtr = nullptr;
  if (status != nullptr) *status = cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  const cudaError_t e = t_last;
  t_last = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) {
  return t_last;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevicePointer:
      return "cudaErrorInvalidDevicePointer";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    default:
      return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  return cudaGetErrorName(error);  // the fake's text is its name
}

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  return do_malloc(devPtr, size, false);
}

cudaError_t cudaFree(void* devPtr) {
  int d = 0;
  if (cudaError_t e = use_device(&d); e != cudaSuccess) return fail(e);
  if (devPtr == nullptr) return cudaSuccess;  // creates the context, as the runtime
  const int owner = fake_cudart_device_of(devPtr);
  if (owner < 0) return fail(cudaErrorInvalidValue);  // as CUDA 13 documents
  synchronize_device(owner);
  return do_free(devPtr, false);
}

cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t /*stream*/) {
  return do_malloc(devPtr, size, false);
}

cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t stream) {
  if (devPtr == nullptr) return cudaSuccess;
  const int owner = fake_cudart_device_of(devPtr);
  if (owner < 0) return fail(cudaErrorInvalidValue);  // as CUDA 13 documents
  stream_of(stream, owner)->s.launch([devPtr] { (void)do_free(devPtr, false); }, 0.0);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int /*flags*/) {
  if (g().host_alloc_fails) {
    if (pHost != nullptr) *pHost = nullptr;
    return fail(cudaErrorMemoryAllocation);
  }
  return do_malloc(pHost, size, true);
}

cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  return do_free(ptr, true);
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  int d = 0;
  if (cudaError_t e = use_device(&d); e != cudaSuccess) return fail(e);
  if (free == nullptr || total == nullptr) return fail(cudaErrorInvalidValue);
  state& s = g();
  std::lock_guard lock(s.mu);
  *total = s.capacity[d];
  *free = s.capacity[d] - s.used[d];
  return cudaSuccess;
}

// As the runtime: the device's work finished, then every allocation on it freed (its
// streams are kept: the tests create none they use after a reset).
cudaError_t cudaDeviceReset(void) {
  int d = 0;
  if (cudaError_t e = use_device(&d); e != cudaSuccess) return fail(e);
  synchronize_device(d);
  std::vector<void*> freed;
  {
    state& s = g();
    std::lock_guard lock(s.mu);
    // Page-locked memory belongs to the context current when it was made, and dies with it
    // as device memory does.
    for (auto it = s.allocations.begin(); it != s.allocations.end();) {
      if (it->second.device == d) {
        freed.push_back(reinterpret_cast<void*>(it->first));
        it = s.allocations.erase(it);
      } else {
        ++it;
      }
    }
    s.used[static_cast<std::size_t>(d)] = 0;
  }
  for (void* p : freed) std::free(p);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  int d = 0;
  if (cudaError_t e = use_device(&d); e != cudaSuccess) return fail(e);
  if (device_wait_refused(d)) return fail(cudaErrorStreamCaptureUnsupported);
  synchronize_device(d);
  if (const int code = g().fail_next_sync.exchange(0); code != 0) {
    return fail(static_cast<cudaError_t>(code));
  }
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int /*flags*/) {
  if (pStream == nullptr) return fail(cudaErrorInvalidValue);
  int d = 0;
  if (cudaError_t e = use_device(&d); e != cudaSuccess) return fail(e);
  auto f = std::make_unique<fake_stream>();
  f->device = d;
  {
    std::lock_guard lock(g().mu);
    g().streams.insert(f.get());
  }
  *pStream = reinterpret_cast<cudaStream_t>(f.release());
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* pStream) {
  return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr) return fail(cudaErrorInvalidValue);
  auto* f = reinterpret_cast<fake_stream*>(stream);
  {
    std::lock_guard lock(g().mu);
    g().streams.erase(f);
  }
  delete f;  // runs what is queued first
  return cudaSuccess;
}

cudaError_t cudaStreamGetDevice(cudaStream_t stream, int* device) {
  if (device == nullptr) return fail(cudaErrorInvalidValue);
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    return use_device(device) == cudaSuccess ? cudaSuccess : fail(cudaErrorNoDevice);
  }
  std::lock_guard lock(g().mu);
  auto* f = reinterpret_cast<fake_stream*>(stream);
  if (f->capture == cudaStreamCaptureStatusActive) f->capture = cudaStreamCaptureStatusInvalidated;
  *device = f->device;
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  // The legacy stream cannot be captured (nor, here, the per-thread one).
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  std::lock_guard lock(g().mu);
  auto* f = reinterpret_cast<fake_stream*>(stream);
  if (f->capture != cudaStreamCaptureStatusNone) return fail(cudaErrorIllegalState);
  f->capture = cudaStreamCaptureStatusActive;
  f->capture_mode = mode;
  f->capturing_thread = std::this_thread::get_id();
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) {
  if (pGraph == nullptr) return fail(cudaErrorInvalidValue);
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    return fail(cudaErrorIllegalState);
  }
  std::lock_guard lock(g().mu);
  auto* f = reinterpret_cast<fake_stream*>(stream);
  const cudaStreamCaptureStatus was = f->capture;
  if (was == cudaStreamCaptureStatusNone) return fail(cudaErrorIllegalState);
  f->capture = cudaStreamCaptureStatusNone;
  *pGraph = nullptr;
  return was == cudaStreamCaptureStatusActive ? cudaSuccess
                                              : fail(cudaErrorStreamCaptureInvalidated);
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* pCaptureStatus) {
  if (pCaptureStatus == nullptr) return fail(cudaErrorInvalidValue);
  *pCaptureStatus = cudaStreamCaptureStatusNone;
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    return cudaSuccess;
  }
  std::lock_guard lock(g().mu);
  *pCaptureStatus = reinterpret_cast<fake_stream*>(stream)->capture;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  int d = 0;
  if (cudaError_t e = use_device(&d); e != cudaSuccess) return fail(e);
  try {
    stream_of(stream, d)->s.synchronize();
  } catch (...) {
    return fail(cudaErrorUnknown);
  }
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int /*flags*/) {
  int d = 0;
  if (cudaError_t e = use_device(&d); e != cudaSuccess) return fail(e);
  stream_of(stream, d)->s.wait(reinterpret_cast<fake_event*>(event)->e);
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  int d = 0;
  if (cudaError_t e = use_device(&d); e != cudaSuccess) return fail(e);
  stream_of(stream, d)->s.launch([fn, userData] { fn(userData); }, 0.0);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  int d = 0;
  if (cudaError_t e = use_device(&d); e != cudaSuccess) return fail(e);
  fake_stream* f = stream_of(stream, d);
  state& s = g();
  ++s.copies;
  if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToHost) {
    std::lock_guard lock(s.mu);
    f->copy_ms += static_cast<double>(count) /
                  (kind == cudaMemcpyHostToDevice ? s.h2d_bytes_per_ms : s.d2h_bytes_per_ms);
  }
  f->s.copy_async(dst, src, count, copy_kind::host_to_host);
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int /*flags*/) {
  if (event == nullptr) return fail(cudaErrorInvalidValue);
  int d = 0;
  if (cudaError_t e = use_device(&d); e != cudaSuccess) return fail(e);
  auto* f = new fake_event();
  f->device = d;
  ++g().events[d];
  *event = reinterpret_cast<cudaEvent_t>(f);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  auto* f = reinterpret_cast<fake_event*>(event);
  if (f != nullptr) --g().events[f->device];
  delete f;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  auto* f = reinterpret_cast<fake_event*>(event);
  if (f == nullptr) return fail(cudaErrorInvalidValue);
  fake_stream* s = stream_of(stream, f->device);
  if (s->device != f->device) return fail(cudaErrorInvalidResourceHandle);
  {
    std::lock_guard lock(g().mu);
    f->copy_ms = s->copy_ms;
  }
  s->s.record(f->e);
  return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (mode == nullptr) return fail(cudaErrorInvalidValue);
  std::swap(*mode, t_capture_mode);
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (unsafe_call_refused()) return fail(cudaErrorStreamCaptureUnsupported);
  try {
    return reinterpret_cast<fake_event*>(event)->e.query() ? cudaSuccess : fail(cudaErrorNotReady);
  } catch (...) {
    return fail(cudaErrorUnknown);
  }
}

// Host events keep no time of their own: between two events, the time the host-to-device
// and device-to-host copies enqueued between them would take on the simulated link (what a
// timed copy measures), never below the runtime's resolution of about half a microsecond.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr || start == nullptr || end == nullptr) return fail(cudaErrorInvalidValue);
  std::lock_guard lock(g().mu);
  const double elapsed =
      reinterpret_cast<fake_event*>(end)->copy_ms - reinterpret_cast<fake_event*>(start)->copy_ms;
  *ms = static_cast<float>(std::max(elapsed, 0.0005));
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (unsafe_call_refused()) return fail(cudaErrorStreamCaptureUnsupported);
  try {
    reinterpret_cast<fake_event*>(event)->e.synchronize();
  } catch (...) {
    return fail(cudaErrorUnknown);
  }
  return cudaSuccess;
}

}  // extern "C"
