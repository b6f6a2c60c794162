// PyTorch's pluggable-allocator entry points, used the way PyTorch uses them: this binary
// does not link memweave; it dlopen()s libmemweave.so and calls the two symbols through
// dlsym with the signatures of memweave_torch.h, on the host backend (named: the C API
// never falls back to it). Streams on a GPU are tested over the stand-in runtime
// (fake_cuda_test.cpp).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "memweave/memweave_torch.h"

namespace {

using torch_malloc_fn = decltype(&memweave_torch_malloc);
using torch_free_fn = decltype(&memweave_torch_free);
using get_stats_fn = decltype(&memweaveGetStats);
using finalize_fn = decltype(&memweaveFinalize);

class memweave_torch_entry_test : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("MEMWEAVE_DEVICE", "host", 1);
    ::setenv("MEMWEAVE_DEVICE_BYTES", "64M", 1);
    ::setenv("MEMWEAVE_POOL_BYTES", "16M", 1);
    ::unsetenv("MEMWEAVE_POOL_FRACTION");
    ::unsetenv("MEMWEAVE_TRACE");
    // Opened once and never closed, as PyTorch does.
    static void* const handle = ::dlopen(MEMWEAVE_CAPI_PATH, RTLD_NOW | RTLD_LOCAL);
    handle_ = handle;
    ASSERT_NE(handle_, nullptr) << ::dlerror();
    malloc_ = reinterpret_cast<torch_malloc_fn>(::dlsym(handle_, "memweave_torch_malloc"));
    free_ = reinterpret_cast<torch_free_fn>(::dlsym(handle_, "memweave_torch_free"));
    stats_ = reinterpret_cast<get_stats_fn>(::dlsym(handle_, "memweaveGetStats"));
    finalize_ = reinterpret_cast<finalize_fn>(::dlsym(handle_, "memweaveFinalize"));
    ASSERT_NE(malloc_, nullptr);
    ASSERT_NE(free_, nullptr);
    ASSERT_NE(stats_, nullptr);
    ASSERT_NE(finalize_, nullptr);
  }
  void TearDown() override {
    if (finalize_ != nullptr) {
      EXPECT_EQ(finalize_(), MEMWEAVE_SUCCESS);
    }
  }
  memweave_stats stats() {
    memweave_stats s{};
    EXPECT_EQ(stats_(&s), MEMWEAVE_SUCCESS);
    return s;
  }

  void* handle_ = nullptr;
  torch_malloc_fn malloc_ = nullptr;
  torch_free_fn free_ = nullptr;
  get_stats_fn stats_ = nullptr;
  finalize_fn finalize_ = nullptr;
};

TEST_F(memweave_torch_entry_test, malloc_and_free_go_through_the_pool) {
  CUstream_st* stream = nullptr;  // PyTorch passes the current stream; unused here
  void* p = malloc_(1 << 20, 0, stream);
  ASSERT_NE(p, nullptr);
  std::memset(p, 0x42, 1 << 20);
  memweave_stats s = stats();
  EXPECT_EQ(s.live_allocations, 1u);
  EXPECT_EQ(s.bytes_in_use, std::size_t{1} << 20);
  EXPECT_EQ(s.bytes_reserved, std::size_t{16} << 20);
  free_(p, 1 << 20, 0, stream);
  s = stats();
  EXPECT_EQ(s.live_allocations, 0u);
  EXPECT_EQ(s.frees, 1u);
}

TEST_F(memweave_torch_entry_test, exhaustion_throws_an_out_of_memory_error_and_frees_make_room) {
  std::vector<void*> live;
  for (int i = 0; i < 16; ++i) {
    void* p = malloc_(1 << 20, 0, nullptr);
    ASSERT_NE(p, nullptr) << i;
    live.push_back(p);
  }
  // Never NULL: PyTorch would store it unchecked and fail later with an illegal address.
  std::string what;
  try {
    void* p = malloc_(1 << 20, 0, nullptr);
    ADD_FAILURE() << "an exhausted pool returned " << p;
  } catch (const std::exception& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("CUDA out of memory"), std::string::npos) << what;
  EXPECT_NE(what.find("1048576 bytes"), std::string::npos) << what;
  EXPECT_NE(what.find("largest free run"), std::string::npos) << what;
  EXPECT_EQ(stats().failures, 1u);
  free_(live.back(), 1 << 20, 0, nullptr);
  live.pop_back();
  void* again = malloc_(1 << 20, 0, nullptr);
  EXPECT_NE(again, nullptr);
  live.push_back(again);
  for (void* p : live) free_(p, 1 << 20, 0, nullptr);
  EXPECT_EQ(stats().live_allocations, 0u);
}

TEST_F(memweave_torch_entry_test, bad_sizes_and_pointers_are_refused_without_harm) {
  EXPECT_EQ(malloc_(0, 0, nullptr), nullptr);
  EXPECT_EQ(malloc_(-5, 0, nullptr), nullptr);
  void* p = malloc_(4096, 0, nullptr);
  ASSERT_NE(p, nullptr);
  int x = 0;
  free_(&x, 4, 0, nullptr);                            // foreign: logged, ignored
  free_(static_cast<char*>(p) + 1024, 0, 0, nullptr);  // interior: logged, ignored
  free_(nullptr, 0, 0, nullptr);
  memweave_stats s = stats();
  EXPECT_EQ(s.invalid_frees, 2u);
  EXPECT_EQ(s.live_allocations, 1u);
  free_(p, 4096, 0, nullptr);
  free_(p, 4096, 0, nullptr);  // twice: logged, ignored
  s = stats();
  EXPECT_EQ(s.live_allocations, 0u);
  EXPECT_EQ(s.invalid_frees, 3u);
}

TEST_F(memweave_torch_entry_test, device_index_is_ignored_off_cuda) {
  void* p = malloc_(1000, 3, nullptr);
  ASSERT_NE(p, nullptr);
  free_(p, 1000, 3, nullptr);
}

}  // namespace
