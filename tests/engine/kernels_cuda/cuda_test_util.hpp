// Helpers of the cuda kernel tests: a fixture that skips without a CUDA device and otherwise
// owns a stream and a cuda_kernel_context on it, device buffers that copy to and from host
// vectors, seeded random data, and element-wise comparisons that name the first mismatch.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/kernels/cuda/cuda_kernels.hpp"
#include "engine/kernels/host/host_kernels.hpp"
#include "memweave/device/device.hpp"
#include "support/gpu_or_skip.hpp"
#include "tests/engine/kernels/kernel_test_util.hpp"

namespace memweave::kernels::cuda::test {

/// Throws std::runtime_error naming the call when a runtime call fails (test set-up only).
inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorString(e));
  }
}

/// A device array of floats (cudaMalloc), filled from and read back to host vectors with
/// copies that wait for the whole device.
class device_buffer {
 public:
  explicit device_buffer(std::size_t count) : count_(count) {
    check(cudaMalloc(&data_, std::max<std::size_t>(count, 1) * sizeof(float)), "cudaMalloc");
  }
  explicit device_buffer(const std::vector<float>& v) : device_buffer(v.size()) { write(v); }
  ~device_buffer() { (void)cudaFree(data_); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  float* get() const noexcept { return static_cast<float*>(data_); }
  std::size_t size() const noexcept { return count_; }
  /// Waits for the whole device (a kernel on any stream may still read the buffer), copies,
  /// and waits again (a pageable copy may return before its DMA ends, and the kernels'
  /// non-blocking stream does not wait for the legacy stream).
  void write(const std::vector<float>& v) {
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check(cudaMemcpy(data_, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice),
          "cudaMemcpy H2D");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  std::vector<float> read() const {
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    std::vector<float> v(count_);
    check(cudaMemcpy(v.data(), data_, count_ * sizeof(float), cudaMemcpyDeviceToHost),
          "cudaMemcpy D2H");
    return v;
  }

 private:
  void* data_ = nullptr;
  std::size_t count_ = 0;
};

/// The host tensors of one step and their device mirrors: a test builds the step_io of
/// either from h() or d().
struct step_tensors {
  std::vector<std::vector<float>> host;
  std::vector<std::unique_ptr<device_buffer>> device;

  std::size_t add(std::vector<float> v) {
    device.push_back(std::make_unique<device_buffer>(v));
    host.push_back(std::move(v));
    return host.size() - 1;
  }
  float* h(std::size_t i) { return host[i].data(); }
  float* d(std::size_t i) { return device[i]->get(); }
};

/// Raw device bytes (a workspace); null for 0 bytes.
class device_bytes {
 public:
  explicit device_bytes(std::size_t bytes) : bytes_(bytes) {
    if (bytes > 0) check(cudaMalloc(&data_, bytes), "cudaMalloc");
  }
  ~device_bytes() { (void)cudaFree(data_); }
  device_bytes(const device_bytes&) = delete;
  device_bytes& operator=(const device_bytes&) = delete;
  void* get() const noexcept { return data_; }
  std::size_t size() const noexcept { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// The host kernel tests' seeded generators (tests/engine/kernels/kernel_test_util.hpp).
using host::test::random_vector;

/// Distinct values spaced by `gap`, in random order (no ties for max pooling): the host
/// tests' distinct_vector with a finer default gap.
inline std::vector<float> distinct_vector(std::size_t count, std::uint32_t seed,
                                          float gap = 0.01f) {
  return host::test::distinct_vector(count, seed, gap);
}

inline std::size_t count_of(const shape4& s) {
  return static_cast<std::size_t>(s.count());
}

/// Expects |got - ref| <= atol + rtol * |ref| element by element (NaN never passes); names
/// the first mismatch and how many there are.
inline void expect_near(const std::vector<float>& ref, const std::vector<float>& got, double atol,
                        double rtol, const std::string& what) {
  ASSERT_EQ(ref.size(), got.size()) << what;
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(got[i]) - ref[i]);
    if (!(diff <= atol + rtol * std::fabs(static_cast<double>(ref[i])))) {
      if (bad++ == 0) first = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << ref.size() << " elements differ; first at "
                     << first << ": host " << ref[first] << ", cuda " << got[first] << " (atol "
                     << atol << ", rtol " << rtol << ")";
}

/// Expects the same bits element by element.
inline void expect_bitwise(const std::vector<float>& ref, const std::vector<float>& got,
                           const std::string& what) {
  ASSERT_EQ(ref.size(), got.size()) << what;
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (std::memcmp(&ref[i], &got[i], sizeof(float)) != 0 && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << ref.size()
                     << " elements differ in their bits; first at " << first << ": host "
                     << ref[first] << ", cuda " << got[first];
}

/// Skips without a CUDA device; otherwise a stream (non-blocking, as the device's compute
/// stream) with a cuda_kernel_context on it, and a one-thread host context for reference.
class cuda_test : public ::testing::Test {
 protected:
  void SetUp() override {
    MEMWEAVE_GPU_OR_SKIP("the cuda kernels run only on a GPU");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    ctx_ = std::make_unique<cuda_kernel_context>(stream_);
  }
  void TearDown() override {
    if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
    ctx_.reset();
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }

  cuda_kernel_context& ctx() { return *ctx_; }
  static const host::kernel_context& host_ctx() {
    static const host::kernel_context c(1);
    return c;
  }
  /// Waits for the context's stream, then reads `b` back.
  std::vector<float> read(const device_buffer& b) {
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    return b.read();
  }

  cudaStream_t stream_ = nullptr;
  std::unique_ptr<cuda_kernel_context> ctx_;
};

}  // namespace memweave::kernels::cuda::test
