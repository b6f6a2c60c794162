// The fp16 codec where device memory is host memory (`host`) or never touched (`null`).
//
// Encode: the device tensor must stay intact (a failed offload leaves it resident; a caller
// may keep its device copy), so it is not converted in place. Chunk by chunk, a launch on
// the device-to-host stream converts into a staging buffer and a copy moves the staging
// bytes to the host copy (throttled like any link copy); the stream is in order, so the next
// chunk's conversion starts only once the copy has read the staging buffer, and one buffer
// serves every offload.
// Decode: the fp16 bytes are copied into the first half of the device buffer, then expanded
// in place from the last element down (safe: see fp16_decode), so no staging is needed.
//
// On `null` the launches do not run and the copies only advance the clock by half the bytes.
// Thread-compatible: the engine calls encode from one thread at a time (under its lock).
#include <vector>

#include "memweave/core/error.hpp"
#include "memweave/swap/fp16.hpp"
#include "memweave/swap/fp16_codec.hpp"

namespace memweave {
namespace {

// 256 Ki values a chunk: a 512 KiB staging buffer, large enough that the per-chunk launch
// costs nothing next to the copy, small enough to stay in cache.
constexpr std::size_t k_chunk = std::size_t{1} << 18;

class host_fp16_codec final : public fp16_codec {
 public:
  explicit host_fp16_codec(bool touches) : touches_(touches) {}

  void encode(stream& s, void* host_dst, const void* device_src, std::size_t count,
              std::atomic<double>& max_error) override {
    if (!touches_) {
      s.copy_async(host_dst, device_src, 2 * count, copy_kind::device_to_host);
      return;
    }
    if (staging_.empty()) staging_.resize(k_chunk);
    s.launch([&max_error] { max_error.store(0.0, std::memory_order_relaxed); });
    const auto* src = static_cast<const float*>(device_src);
    auto* dst = static_cast<unsigned char*>(host_dst);
    for (std::size_t at = 0; at < count; at += k_chunk) {
      const std::size_t n = std::min(k_chunk, count - at);
      s.launch([this, src = src + at, n, &max_error] {
        const double e = fp16_encode(staging_.data(), src, n);
        if (e > max_error.load(std::memory_order_relaxed)) {
          max_error.store(e, std::memory_order_relaxed);
        }
      });
      s.copy_async(dst + 2 * at, staging_.data(), 2 * n, copy_kind::device_to_host);
    }
  }

  void decode(stream& s, void* device_dst, const void* host_src, std::size_t count) override {
    s.copy_async(device_dst, host_src, 2 * count, copy_kind::host_to_device);
    if (!touches_) return;
    s.launch([device_dst, count] {
      fp16_decode(static_cast<float*>(device_dst), static_cast<const std::uint16_t*>(device_dst),
                  count);
    });
  }

 private:
  const bool touches_;
  // Written only by work on the device-to-host stream, in stream order. The stream's work
  // must have run before the codec goes: the engine waits for its copies before it is
  // destroyed, and owns the codec.
  std::vector<std::uint16_t> staging_;
};

}  // namespace

std::unique_ptr<fp16_codec> make_host_fp16_codec(device& dev) {
  if (dev.kind() == device_kind::cuda) {
    throw invalid_argument(
        "make_host_fp16_codec: the host fp16 codec converts with the host CPU, which cannot "
        "address cuda device memory; a cuda codec (a conversion kernel) is needed");
  }
  return std::make_unique<host_fp16_codec>(dev.touches_memory());
}

}  // namespace memweave
