// The calling thread's stream-capture mode relaxed for a scope. A capture begun in
// cudaStreamCaptureModeGlobal (PyTorch's default), in any thread, forbids every thread in the
// default mode "potentially unsafe" calls (cudaMalloc, cudaHostAlloc, an event query or
// wait), and such a call fails and invalidates that capture (PyTorch's graph capture over
// memweave's entry points on an H200, session 41). The calls memweave's pools make are safe
// in a capture: a new arena is memory no graph node names, and the events queried or waited
// for were recorded outside any capture (a free in a capture is refused). PyTorch's own
// allocator relaxes the mode around its cudaMalloc the same way. Private to memweave.
#pragma once

#include <cuda_runtime_api.h>

namespace memweave::cuda_backend {

class relaxed_capture_mode {
 public:
  relaxed_capture_mode() noexcept {
    if (cudaThreadExchangeStreamCaptureMode(&mode_) != cudaSuccess) {
      (void)cudaGetLastError();
      exchanged_ = false;
    }
  }
  ~relaxed_capture_mode() {
    if (exchanged_ && cudaThreadExchangeStreamCaptureMode(&mode_) != cudaSuccess) {
      (void)cudaGetLastError();
    }
  }
  relaxed_capture_mode(const relaxed_capture_mode&) = delete;
  relaxed_capture_mode& operator=(const relaxed_capture_mode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;  // the thread's, while exchanged
  bool exchanged_ = true;
};

}  // namespace memweave::cuda_backend
