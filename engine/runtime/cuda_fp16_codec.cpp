// The cuda fp16 codec (see cuda_fp16_codec.hpp and memweave/swap/fp16_codec.hpp).
//
// Encode: chunk by chunk, a kernel converts the fp32 device tensor into the fp16 staging
// buffer (the tensor stays intact: a failed offload leaves it resident) and takes the round
// trip's largest relative error into a device word, and a copy moves the staging bytes to the
// host copy; after the last chunk the word comes back through pinned memory and a host
// function stores it into the offload's max_error.
// Decode: chunk by chunk, a copy brings the fp16 host bytes into the other staging buffer and
// a kernel expands them into the fp32 device tensor. Not in place, as the host codec does
// from the last element down: a kernel's threads run in no order, and one would overwrite
// fp16 values that another has not read yet.
// In stream order a chunk's kernel (copy) starts only once the copy (kernel) before it is
// done with the buffer, so one buffer per direction serves every transfer: each direction
// always runs on its one copy stream. The conversion kernels give fp16.hpp's bits, so a
// compressed swap brings back the same values as on `host`.
//
// Memory outside the heap's budget, like cuDNN's and cuBLAS's handles: 4 MiB of device
// memory and a pinned word, taken at the first compressed offload (an out_of_memory then
// fails that offload, which the transfer engine undoes) or before, by reserve (the executor's
// staging codec, whose copies run inside a step), and given back with the codec.
// Thread-compatible: the transfer engine calls encode and decode under its lock. Kernels are
// enqueued with the stream's device current.
#include "engine/runtime/cuda_fp16_codec.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

#include "device/cuda/cuda_check.hpp"
#include "engine/kernels/cuda/custom_kernels.hpp"
#include "engine/runtime/cuda_current_device.hpp"
#include "memweave/core/error.hpp"

namespace memweave {
namespace {

namespace cuda_detail = kernels::cuda::detail;

// 1 Mi values a chunk: 2 MiB of fp16 staging per direction; the conversion of a chunk runs
// at device-memory speed, a hundredth of its copy's time over the host link.
constexpr std::size_t k_codec_chunk = std::size_t{1} << 20;

class cuda_fp16_codec final : public fp16_codec {
 public:
  explicit cuda_fp16_codec(device& dev) : dev_(dev) {}
  ~cuda_fp16_codec() override {
    // The transfer engine waits for its copies (and so for this codec's work) before it
    // destroys the codec.
    dev_.deallocate(encode_staging_, k_codec_chunk * sizeof(std::uint16_t));
    dev_.deallocate(decode_staging_, k_codec_chunk * sizeof(std::uint16_t));
    dev_.deallocate(error_word_, sizeof(unsigned));
    dev_.deallocate_pinned(error_host_, sizeof(unsigned));
  }
  cuda_fp16_codec(const cuda_fp16_codec&) = delete;
  cuda_fp16_codec& operator=(const cuda_fp16_codec&) = delete;

  void encode(stream& s, void* host_dst, const void* device_src, std::size_t count,
              std::atomic<double>& max_error) override {
    take_memory();
    const auto cs = static_cast<cudaStream_t>(s.native_handle());
    const current_device scope(stream_device(cs));
    MEMWEAVE_CUDA_CHECK(cudaMemsetAsync(error_word_, 0, sizeof(unsigned), cs));
    const auto* src = static_cast<const float*>(device_src);
    auto* dst = static_cast<unsigned char*>(host_dst);
    for (std::size_t at = 0; at < count; at += k_codec_chunk) {
      const std::size_t n = std::min(k_codec_chunk, count - at);
      cuda_detail::launch_fp16_encode(cs, static_cast<std::int64_t>(n), src + at, encode_staging_,
                                      error_word_);
      s.copy_async(dst + 2 * at, encode_staging_, 2 * n, copy_kind::device_to_host);
    }
    MEMWEAVE_CUDA_CHECK(
        cudaMemcpyAsync(error_host_, error_word_, sizeof(unsigned), cudaMemcpyDeviceToHost, cs));
    // The word is read once the copy above ran (a host function runs in stream order), and
    // the next encode's copy into it comes after this function (the same stream).
    s.launch([word = error_host_, &max_error] {
      unsigned bits = 0;
      std::memcpy(&bits, word, sizeof bits);
      max_error.store(std::bit_cast<float>(bits), std::memory_order_relaxed);
    });
  }

  void decode(stream& s, void* device_dst, const void* host_src, std::size_t count) override {
    take_memory();
    const auto cs = static_cast<cudaStream_t>(s.native_handle());
    const current_device scope(stream_device(cs));
    const auto* src = static_cast<const unsigned char*>(host_src);
    auto* dst = static_cast<float*>(device_dst);
    for (std::size_t at = 0; at < count; at += k_codec_chunk) {
      const std::size_t n = std::min(k_codec_chunk, count - at);
      s.copy_async(decode_staging_, src + 2 * at, 2 * n, copy_kind::host_to_device);
      cuda_detail::launch_fp16_decode(cs, static_cast<std::int64_t>(n), decode_staging_, dst + at);
    }
  }

  void reserve() override { take_memory(); }

 private:
  // Everything at once, before anything is enqueued: a failure leaves nothing half done.
  void take_memory() {
    if (error_host_ != nullptr) return;
    constexpr std::size_t staging = k_codec_chunk * sizeof(std::uint16_t);
    if (encode_staging_ == nullptr) {
      encode_staging_ = static_cast<std::uint16_t*>(dev_.allocate(staging));
    }
    if (decode_staging_ == nullptr) {
      decode_staging_ = static_cast<std::uint16_t*>(dev_.allocate(staging));
    }
    if (error_word_ == nullptr)
      error_word_ = static_cast<unsigned*>(dev_.allocate(sizeof(unsigned)));
    error_host_ = static_cast<unsigned*>(dev_.allocate_pinned(sizeof(unsigned)));
  }

  device& dev_;
  std::uint16_t* encode_staging_ = nullptr;  // written and read only on the d2h stream
  std::uint16_t* decode_staging_ = nullptr;  // written and read only on the h2d stream
  unsigned* error_word_ = nullptr;           // device: the encode's largest error, as bits
  unsigned* error_host_ = nullptr;           // pinned: that word, read by a host function
};

}  // namespace

std::unique_ptr<fp16_codec> make_cuda_fp16_codec(device& dev) {
  if (dev.kind() != device_kind::cuda) {
    throw invalid_argument("make_cuda_fp16_codec: device " + dev.name() +
                           " is not a cuda device; use make_host_fp16_codec");
  }
  return std::make_unique<cuda_fp16_codec>(dev);
}

}  // namespace memweave
