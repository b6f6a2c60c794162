// How a compressed swap crosses the link: an fp32 tensor in device memory leaves as fp16 in
// host memory (half the bytes), and comes back expanded into fp32 device memory. The
// conversions run in stream order on the copy streams, so a compressed copy is one more
// piece of work on the device-to-host or host-to-device stream and overlaps compute as a
// plain copy does.
//
// The transfer engine takes a codec in its options; swap/ builds the one for devices whose
// memory the host may address (`host`) or never touches (`null`). The `cuda` codec converts
// with device kernels through staging buffers; it belongs with the CUDA kernels (swap/ does
// not depend on engine/): engine/runtime/cuda_fp16_codec.cpp, which the executor gives its
// transfer engine on `cuda`. Without a codec, a compressed offload on `cuda` is an
// invalid_argument naming MEMWEAVE_SCHEDULE_COMPRESS.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>

#include "memweave/device/device.hpp"

namespace memweave {

/// Moves fp32 tensors over the link as fp16. Called with the engine's copy streams only.
class fp16_codec {
 public:
  virtual ~fp16_codec() = default;
  /// Enqueues on `s` (the device-to-host stream): host_dst holds fp16(device_src[i]) for the
  /// `count` fp32 values once the work ran; the link carries 2 * count bytes; device_src is
  /// left unchanged (a failed offload leaves the tensor resident and intact). The work also
  /// stores into `max_error` the largest relative round-trip error of the values (see
  /// fp16_encode), which must stay valid until the work has run.
  virtual void encode(stream& s, void* host_dst, const void* device_src, std::size_t count,
                      std::atomic<double>& max_error) = 0;
  /// Enqueues on `s` (the host-to-device stream): device_dst (4 * count bytes) holds
  /// fp32(host_src[i]) once the work ran; the link carries 2 * count bytes.
  virtual void decode(stream& s, void* device_dst, const void* host_src, std::size_t count) = 0;
  /// Takes now whatever memory the codec's work needs (none on `host` and `null`), so that no
  /// encode or decode fails for memory later, half through a step. Throws out_of_memory.
  virtual void reserve() {}
};

/// The codec for `host` (conversions on the copy streams' worker threads) and `null`
/// (nothing runs; the copies cost half the bytes). invalid_argument for another device.
std::unique_ptr<fp16_codec> make_host_fp16_codec(device& dev);

}  // namespace memweave
