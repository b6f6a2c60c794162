// Private to the cuda backend's engine parts (the kernel launcher, the fp16 codec): the
// device a stream belongs to, and a scope that makes it the calling thread's current device
// (kernels launched from this thread need it current; the cuda device does the same around
// each of its own calls).
#pragma once

#include <cuda_runtime_api.h>

#include "device/cuda/cuda_check.hpp"
#include "device/cuda/cuda_device.hpp"
#include "engine/runtime/kernel_launcher.hpp"

namespace memweave {

// Makes `ordinal` the calling thread's current device for the scope, then restores the
// previous one.
class current_device final : public launch_scope {
 public:
  explicit current_device(int ordinal) {
    MEMWEAVE_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != ordinal) {
      // cudaGetDevice says 0 on a thread that never chose a device: setting 0 back would
      // create a context on GPU 0. Restore only where a context was current.
      const bool had_context = cuda_backend::context_current();
      MEMWEAVE_CUDA_CHECK(cudaSetDevice(ordinal));
      restore_ = had_context;
    }
  }
  ~current_device() override {
    if (restore_ && cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
  }
  current_device(const current_device&) = delete;
  current_device& operator=(const current_device&) = delete;

 private:
  int previous_ = 0;
  bool restore_ = false;
};

// The device `stream` belongs to.
inline int stream_device(cudaStream_t stream) {
  int ordinal = 0;
#if CUDART_VERSION >= 12080
  MEMWEAVE_CUDA_CHECK(cudaStreamGetDevice(stream, &ordinal));
#else
  MEMWEAVE_CUDA_CHECK(cudaGetDevice(&ordinal));  // older runtimes: the current device
#endif
  return ordinal;
}

}  // namespace memweave
