// The C API (memweave.h) on the host backend: the round trip, every bad input, the
// lifecycle rules (lazy init, double init, finalize), traces and the pinned host pool.
// The library is one process-wide instance, so every case starts and ends finalized.
#include "memweave/memweave.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "memweave/alloc/trace.hpp"
#include "support/static_tls_reexec.hpp"

MEMWEAVE_REEXEC_WITH_STATIC_TLS();

namespace {

constexpr std::size_t k_mib = std::size_t{1} << 20;

std::string last_error() {
  return memweaveGetLastErrorMessage();
}

// Unsets every MEMWEAVE_* variable for the test's duration and restores them after, so that
// the caller's environment cannot change what a case sees.
class scoped_clean_environment {
 public:
  scoped_clean_environment() {
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "MEMWEAVE_", 9) == 0) saved_.emplace_back(*e);
    }
    for (const auto& kv : saved_) ::unsetenv(kv.substr(0, kv.find('=')).c_str());
  }
  ~scoped_clean_environment() {
    for (const auto& kv : saved_) {
      const auto eq = kv.find('=');
      ::setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
    }
  }

 private:
  std::vector<std::string> saved_;
};

class memweave_capi_test : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(memweaveFinalize(), MEMWEAVE_SUCCESS); }
  void TearDown() override {
    EXPECT_EQ(memweaveFinalize(), MEMWEAVE_SUCCESS);
    EXPECT_EQ(memweaveIsInitialized(), 0);
  }

  // Host backend, 16 MiB pool of 1 KiB blocks in a 64 MiB simulated device.
  static memweave_config host_config(std::size_t pool_bytes = 16 * k_mib) {
    memweave_config c = MEMWEAVE_CONFIG_INIT;
    c.device = "host";
    c.device_bytes = 64 * k_mib;
    c.pool_bytes = pool_bytes;
    c.block_bytes = 1024;
    c.host_pool_bytes = 16 * k_mib;
    return c;
  }

  static memweave_stats stats() {
    memweave_stats s{};
    EXPECT_EQ(memweaveGetStats(&s), MEMWEAVE_SUCCESS) << last_error();
    return s;
  }

  scoped_clean_environment env_;
};

TEST_F(memweave_capi_test, init_malloc_free_round_trip_on_the_host_backend) {
  const memweave_config c = host_config();
  ASSERT_EQ(memweaveInit(&c), MEMWEAVE_SUCCESS) << last_error();
  EXPECT_EQ(memweaveIsInitialized(), 1);
  void* p = nullptr;
  ASSERT_EQ(memweaveMalloc(&p, 1000), MEMWEAVE_SUCCESS) << last_error();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(memweaveOwns(p), 1);
  std::memset(p, 0x5A, 1000);  // host backend memory is host-addressable
  EXPECT_EQ(static_cast<unsigned char*>(p)[999], 0x5A);
  memweave_stats s = stats();
  EXPECT_EQ(s.live_allocations, 1u);
  EXPECT_EQ(s.bytes_in_use, 1024u);  // one block
  EXPECT_EQ(s.allocations, 1u);
  EXPECT_EQ(s.bytes_reserved, 16 * k_mib);
  EXPECT_EQ(s.arenas, 1u);
  ASSERT_EQ(memweaveFree(p), MEMWEAVE_SUCCESS) << last_error();
  s = stats();
  EXPECT_EQ(s.live_allocations, 0u);
  EXPECT_EQ(s.frees, 1u);
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.peak_bytes_in_use, 1024u);
  EXPECT_EQ(memweaveResetPeak(), MEMWEAVE_SUCCESS);
  EXPECT_EQ(stats().peak_bytes_in_use, 0u);
}

TEST_F(memweave_capi_test, many_allocations_are_distinct_and_keep_their_data) {
  const memweave_config c = host_config();
  ASSERT_EQ(memweaveInit(&c), MEMWEAVE_SUCCESS) << last_error();
  std::vector<std::pair<unsigned char*, std::size_t>> live;
  for (std::size_t i = 0; i < 200; ++i) {
    void* p = nullptr;
    const std::size_t n = 1 + (i * 977) % 40000;
    ASSERT_EQ(memweaveMalloc(&p, n), MEMWEAVE_SUCCESS) << n << ": " << last_error();
    std::memset(p, static_cast<int>(i), n);
    live.emplace_back(static_cast<unsigned char*>(p), n);
  }
  for (std::size_t i = 0; i < live.size(); ++i) {
    auto [p, n] = live[i];
    EXPECT_EQ(p[0], static_cast<unsigned char>(i));
    EXPECT_EQ(p[n - 1], static_cast<unsigned char>(i));
    ASSERT_EQ(memweaveFree(p), MEMWEAVE_SUCCESS);
  }
  EXPECT_EQ(stats().live_allocations, 0u);
}

TEST_F(memweave_capi_test, mem_get_info_reports_the_pools_view) {
  const memweave_config c = host_config();
  ASSERT_EQ(memweaveInit(&c), MEMWEAVE_SUCCESS) << last_error();
  std::size_t free_bytes = 0, total = 0;
  ASSERT_EQ(memweaveMemGetInfo(&free_bytes, &total), MEMWEAVE_SUCCESS);
  EXPECT_EQ(total, 16 * k_mib);  // the pool, not the 64 MiB device
  EXPECT_EQ(free_bytes, total);
  void* p = nullptr;
  ASSERT_EQ(memweaveMalloc(&p, 3 * k_mib), MEMWEAVE_SUCCESS);
  ASSERT_EQ(memweaveMemGetInfo(&free_bytes, &total), MEMWEAVE_SUCCESS);
  EXPECT_EQ(free_bytes, 13 * k_mib);
  std::size_t only_total = 0;
  EXPECT_EQ(memweaveMemGetInfo(nullptr, &only_total), MEMWEAVE_SUCCESS);
  EXPECT_EQ(only_total, 16 * k_mib);
  EXPECT_EQ(memweaveFree(p), MEMWEAVE_SUCCESS);
}

TEST_F(memweave_capi_test, malloc_before_init_initializes_from_the_environment) {
  ::setenv("MEMWEAVE_DEVICE", "host", 1);
  ::setenv("MEMWEAVE_DEVICE_BYTES", "64M", 1);
  ::setenv("MEMWEAVE_POOL_BYTES", "8M", 1);
  ::setenv("MEMWEAVE_BLOCK_BYTES", "4096", 1);
  EXPECT_EQ(memweaveIsInitialized(), 0);
  void* p = nullptr;
  ASSERT_EQ(memweaveMalloc(&p, 100), MEMWEAVE_SUCCESS) << last_error();
  EXPECT_EQ(memweaveIsInitialized(), 1);
  const memweave_stats s = stats();
  EXPECT_EQ(s.bytes_reserved, 8 * k_mib);
  EXPECT_EQ(s.bytes_in_use, 4096u);
  EXPECT_EQ(memweaveFree(p), MEMWEAVE_SUCCESS);
}

TEST_F(memweave_capi_test, a_bad_environment_fails_lazy_initialization_with_its_name) {
  ::setenv("MEMWEAVE_DEVICE", "host", 1);
  ::setenv("MEMWEAVE_POOL_FRACTION", "1.5", 1);
  void* p = reinterpret_cast<void*>(0x1);
  const int rc = memweaveMalloc(&p, 100);
  EXPECT_EQ(rc, MEMWEAVE_ERROR_INVALID_VALUE);
  EXPECT_EQ(p, nullptr);
  EXPECT_NE(last_error().find("MEMWEAVE_POOL_FRACTION"), std::string::npos) << last_error();
  EXPECT_EQ(memweaveIsInitialized(), 0);
}

// Every MEMWEAVE_* value is checked as the command line checks it, not only the ones the
// C API reads: MEMWEAVE_LOG=DEBUG was silently taken as warn.
TEST_F(memweave_capi_test, a_malformed_variable_the_pool_does_not_read_is_refused_too) {
  ::setenv("MEMWEAVE_DEVICE", "host", 1);
  ::setenv("MEMWEAVE_LOG", "DEBUG", 1);
  EXPECT_EQ(memweaveInit(nullptr), MEMWEAVE_ERROR_INVALID_VALUE);
  EXPECT_NE(last_error().find("MEMWEAVE_LOG"), std::string::npos) << last_error();
  EXPECT_NE(last_error().find("DEBUG"), std::string::npos) << last_error();
  EXPECT_EQ(memweaveIsInitialized(), 0);
  ::unsetenv("MEMWEAVE_LOG");
}

TEST_F(memweave_capi_test, zero_bytes_gives_null_and_success) {
  void* p = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(memweaveMalloc(&p, 0), MEMWEAVE_SUCCESS);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(memweaveFree(nullptr), MEMWEAVE_SUCCESS);
  EXPECT_EQ(memweaveHostFree(nullptr), MEMWEAVE_SUCCESS);
}

TEST_F(memweave_capi_test, null_out_pointers_are_invalid_values_with_a_message) {
  EXPECT_EQ(memweaveMalloc(nullptr, 10), MEMWEAVE_ERROR_INVALID_VALUE);
  EXPECT_NE(last_error().find("NULL"), std::string::npos) << last_error();
  EXPECT_EQ(memweaveHostMalloc(nullptr, 10), MEMWEAVE_ERROR_INVALID_VALUE);
  EXPECT_EQ(memweaveMemGetInfo(nullptr, nullptr), MEMWEAVE_ERROR_INVALID_VALUE);
  EXPECT_EQ(memweaveGetStats(nullptr), MEMWEAVE_ERROR_INVALID_VALUE);
  EXPECT_EQ(memweaveTraceStart(nullptr), MEMWEAVE_ERROR_INVALID_VALUE);
  EXPECT_EQ(memweaveTraceStart(""), MEMWEAVE_ERROR_INVALID_VALUE);
  EXPECT_EQ(memweaveIsInitialized(), 0) << "a bad argument must not initialize";
}

TEST_F(memweave_capi_test, free_of_a_foreign_pointer_is_rejected_and_changes_nothing) {
  const memweave_config c = host_config();
  ASSERT_EQ(memweaveInit(&c), MEMWEAVE_SUCCESS) << last_error();
  void* p = nullptr;
  ASSERT_EQ(memweaveMalloc(&p, 5000), MEMWEAVE_SUCCESS);
  const memweave_stats before = stats();
  auto host = std::make_unique<char[]>(64);
  EXPECT_EQ(memweaveFree(host.get()), MEMWEAVE_ERROR_INVALID_DEVICE_POINTER);
  EXPECT_NE(last_error().find("not an allocation of the memweave pool"), std::string::npos)
      << last_error();
  const memweave_stats after = stats();
  EXPECT_EQ(after.live_allocations, before.live_allocations);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.frees, before.frees);
  EXPECT_EQ(after.invalid_frees, before.invalid_frees + 1);
  EXPECT_EQ(memweaveFree(p), MEMWEAVE_SUCCESS);
}

TEST_F(memweave_capi_test, double_free_is_rejected_and_changes_nothing) {
  const memweave_config c = host_config();
  ASSERT_EQ(memweaveInit(&c), MEMWEAVE_SUCCESS) << last_error();
  void* p = nullptr;
  void* q = nullptr;
  ASSERT_EQ(memweaveMalloc(&p, 5000), MEMWEAVE_SUCCESS);
  ASSERT_EQ(memweaveMalloc(&q, 5000), MEMWEAVE_SUCCESS);
  ASSERT_EQ(memweaveFree(p), MEMWEAVE_SUCCESS);
  const memweave_stats before = stats();
  EXPECT_EQ(memweaveFree(p), MEMWEAVE_ERROR_INVALID_DEVICE_POINTER);
  EXPECT_NE(last_error().find("freed already"), std::string::npos) << last_error();
  const memweave_stats after = stats();
  EXPECT_EQ(after.live_allocations, 1u);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.frees, before.frees);
  EXPECT_EQ(memweaveFree(q), MEMWEAVE_SUCCESS);
}

TEST_F(memweave_capi_test, interior_pointer_is_rejected_and_changes_nothing) {
  const memweave_config c = host_config();
  ASSERT_EQ(memweaveInit(&c), MEMWEAVE_SUCCESS) << last_error();
  void* p = nullptr;
  ASSERT_EQ(memweaveMalloc(&p, 8192), MEMWEAVE_SUCCESS);
  const memweave_stats before = stats();
  EXPECT_EQ(memweaveFree(static_cast<char*>(p) + 1024), MEMWEAVE_ERROR_INVALID_DEVICE_POINTER);
  EXPECT_NE(last_error().find("interior"), std::string::npos) << last_error();
  EXPECT_EQ(memweaveFree(static_cast<char*>(p) + 1), MEMWEAVE_ERROR_INVALID_DEVICE_POINTER);
  const memweave_stats after = stats();
  EXPECT_EQ(after.live_allocations, before.live_allocations);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.invalid_frees, before.invalid_frees + 2);
  EXPECT_EQ(memweaveFree(p), MEMWEAVE_SUCCESS) << "the allocation was damaged";
}

TEST_F(memweave_capi_test, free_before_init_is_an_invalid_pointer) {
  int x = 0;
  EXPECT_EQ(memweaveFree(&x), MEMWEAVE_ERROR_INVALID_DEVICE_POINTER);
  EXPECT_NE(last_error().find("not initialized"), std::string::npos) << last_error();
  EXPECT_EQ(memweaveOwns(&x), 0);
  EXPECT_EQ(memweaveIsInitialized(), 0);
}

TEST_F(memweave_capi_test, allocation_too_large_names_request_free_bytes_and_largest_run) {
  const memweave_config c = host_config();
  ASSERT_EQ(memweaveInit(&c), MEMWEAVE_SUCCESS) << last_error();
  void* a = nullptr;
  ASSERT_EQ(memweaveMalloc(&a, 5 * k_mib), MEMWEAVE_SUCCESS);
  const memweave_stats before = stats();
  const std::size_t request = 12345678;  // > the 11 MiB free
  void* p = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(memweaveMalloc(&p, request), MEMWEAVE_ERROR_MEMORY_ALLOCATION);
  EXPECT_EQ(p, nullptr);
  const std::string m = last_error();
  EXPECT_NE(m.find(std::to_string(request)), std::string::npos) << m;
  EXPECT_NE(m.find("free"), std::string::npos) << m;
  EXPECT_NE(m.find("largest free run"), std::string::npos) << m;
  EXPECT_NE(m.find(std::to_string(before.free_bytes)), std::string::npos)
      << "no free byte count " << before.free_bytes << " in: " << m;
  // The remedies are the fields the caller set: the pool's size, and growth, which is off.
  EXPECT_NE(m.find("raise memweave_config.pool_bytes, or set memweave_config.grow_bytes"),
            std::string::npos)
      << m;
  const memweave_stats after = stats();
  EXPECT_EQ(after.failures, before.failures + 1);
  EXPECT_EQ(after.live_allocations, before.live_allocations);
  EXPECT_EQ(memweaveFree(a), MEMWEAVE_SUCCESS);
}

TEST_F(memweave_capi_test, exhausted_pool_recovers_after_frees) {
  const memweave_config c = host_config();
  ASSERT_EQ(memweaveInit(&c), MEMWEAVE_SUCCESS) << last_error();
  std::vector<void*> live;
  for (;;) {
    void* p = nullptr;
    const int rc = memweaveMalloc(&p, k_mib);
    if (rc != MEMWEAVE_SUCCESS) {
      EXPECT_EQ(rc, MEMWEAVE_ERROR_MEMORY_ALLOCATION);
      break;
    }
    live.push_back(p);
    ASSERT_LE(live.size(), 16u);
  }
  EXPECT_EQ(live.size(), 16u);
  for (void* p : live) EXPECT_EQ(memweaveFree(p), MEMWEAVE_SUCCESS);
  void* all = nullptr;
  EXPECT_EQ(memweaveMalloc(&all, 16 * k_mib), MEMWEAVE_SUCCESS) << last_error();
  EXPECT_EQ(memweaveFree(all), MEMWEAVE_SUCCESS);
}

TEST_F(memweave_capi_test, trace_round_trip_records_allocations_and_frees) {
  const memweave_config c = host_config();
  ASSERT_EQ(memweaveInit(&c), MEMWEAVE_SUCCESS) << last_error();
  const std::string path =
      ::testing::TempDir() + "memweave_capi_trace_" + std::to_string(::getpid()) + ".txt";
  ASSERT_EQ(memweaveTraceStart(path.c_str()), MEMWEAVE_SUCCESS) << last_error();
  void* p = nullptr;
  ASSERT_EQ(memweaveMalloc(&p, 3000), MEMWEAVE_SUCCESS);
  ASSERT_EQ(memweaveFree(p), MEMWEAVE_SUCCESS);
  EXPECT_EQ(memweaveTraceStop(), MEMWEAVE_SUCCESS);
  EXPECT_EQ(memweaveTraceStop(), MEMWEAVE_SUCCESS);  // none running: still fine
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != '#') lines.push_back(line);
  }
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find(" a 0 3000 "), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find(" f 0 3000 "), std::string::npos) << lines[1];
  std::remove(path.c_str());
}

TEST_F(memweave_capi_test, trace_to_an_unwritable_path_is_an_invalid_value) {
  const memweave_config c = host_config();
  ASSERT_EQ(memweaveInit(&c), MEMWEAVE_SUCCESS) << last_error();
  const char* path = "/nonexistent-memweave-dir/trace.txt";
  EXPECT_EQ(memweaveTraceStart(path), MEMWEAVE_ERROR_INVALID_VALUE);
  EXPECT_NE(last_error().find(path), std::string::npos) << last_error();
  void* p = nullptr;
  EXPECT_EQ(memweaveMalloc(&p, 10), MEMWEAVE_SUCCESS) << "the pool must keep working";
  EXPECT_EQ(memweaveFree(p), MEMWEAVE_SUCCESS);
}

TEST_F(memweave_capi_test, trace_path_in_the_config_starts_a_trace) {
  const std::string path =
      ::testing::TempDir() + "memweave_capi_config_trace_" + std::to_string(::getpid()) + ".txt";
  memweave_config c = host_config();
  c.trace_path = path.c_str();
  ASSERT_EQ(memweaveInit(&c), MEMWEAVE_SUCCESS) << last_error();
  void* p = nullptr;
  ASSERT_EQ(memweaveMalloc(&p, 10), MEMWEAVE_SUCCESS);
  ASSERT_EQ(memweaveFree(p), MEMWEAVE_SUCCESS);
  ASSERT_EQ(memweaveFinalize(), MEMWEAVE_SUCCESS);  // flushes the trace
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  int events = 0;
  for (std::string line; std::getline(in, line);) events += (!line.empty() && line[0] != '#');
  EXPECT_EQ(events, 2);
  std::remove(path.c_str());
}

// The pool made after a release (cudaDeviceReset under the interposer) traces to a file of
// its own: it truncated the trace so far, which was lost without a word (session 42's
// hostile run); a trace restarted on the file it writes reads whole too.
TEST_F(memweave_capi_test, a_pool_made_after_a_release_keeps_the_earlier_trace_whole) {
  const std::string path =
      ::testing::TempDir() + "memweave_capi_reset_trace_" + std::to_string(::getpid()) + ".txt";
  const std::string after = path + ".reset1";
  const auto events = [](const std::string& file) {
    std::ifstream in(file);
    EXPECT_TRUE(in) << file;
    int n = 0;
    for (std::string line; std::getline(in, line);) n += (!line.empty() && line[0] != '#');
    return n;
  };
  memweave_config c = host_config();
  c.trace_path = path.c_str();
  ASSERT_EQ(memweaveInit(&c), MEMWEAVE_SUCCESS) << last_error();
  for (int i = 0; i < 10; ++i) {
    void* p = nullptr;
    ASSERT_EQ(memweaveMalloc(&p, 1000 * (i + 1)), MEMWEAVE_SUCCESS);
    ASSERT_EQ(memweaveFree(p), MEMWEAVE_SUCCESS);
  }
  ASSERT_EQ(memweaveReleaseDevicePool(), MEMWEAVE_SUCCESS) << last_error();
  void* q = nullptr;
  ASSERT_EQ(memweaveMalloc(&q, 123), MEMWEAVE_SUCCESS) << last_error();
  ASSERT_EQ(memweaveFree(q), MEMWEAVE_SUCCESS);
  ASSERT_EQ(memweaveFinalize(), MEMWEAVE_SUCCESS);
  EXPECT_EQ(events(path), 20);
  EXPECT_EQ(events(after), 2);
  std::remove(after.c_str());

  // Restarted on its own file: the new trace alone, readable (replay checks the times).
  ASSERT_EQ(memweaveInit(&c), MEMWEAVE_SUCCESS) << last_error();
  for (int i = 0; i < 100; ++i) ASSERT_EQ(memweaveMalloc(&q, 1000 + i), MEMWEAVE_SUCCESS);
  ASSERT_EQ(memweaveTraceStart(path.c_str()), MEMWEAVE_SUCCESS) << last_error();
  ASSERT_EQ(memweaveFree(q), MEMWEAVE_SUCCESS);
  ASSERT_EQ(memweaveTraceStop(), MEMWEAVE_SUCCESS);
  EXPECT_EQ(events(path), 1);
  EXPECT_NO_THROW(memweave::read_trace(path));
  std::remove(path.c_str());
}

TEST_F(memweave_capi_test, init_twice_is_refused_and_keeps_the_running_instance) {
  const memweave_config first = host_config(16 * k_mib);
  ASSERT_EQ(memweaveInit(&first), MEMWEAVE_SUCCESS) << last_error();
  void* p = nullptr;
  ASSERT_EQ(memweaveMalloc(&p, 100), MEMWEAVE_SUCCESS);
  const memweave_config second = host_config(32 * k_mib);
  EXPECT_EQ(memweaveInit(&second), MEMWEAVE_ERROR_INITIALIZATION_ERROR);
  EXPECT_NE(last_error().find("already initialized"), std::string::npos) << last_error();
  EXPECT_NE(last_error().find("memweaveFinalize"), std::string::npos) << last_error();
  std::size_t total = 0;
  ASSERT_EQ(memweaveMemGetInfo(nullptr, &total), MEMWEAVE_SUCCESS);
  EXPECT_EQ(total, 16 * k_mib);
  EXPECT_EQ(memweaveFree(p), MEMWEAVE_SUCCESS) << "the first instance's pointer is still good";
  // Finalize, then the new configuration is accepted.
  ASSERT_EQ(memweaveFinalize(), MEMWEAVE_SUCCESS);
  ASSERT_EQ(memweaveInit(&second), MEMWEAVE_SUCCESS) << last_error();
  ASSERT_EQ(memweaveMemGetInfo(nullptr, &total), MEMWEAVE_SUCCESS);
  EXPECT_EQ(total, 32 * k_mib);
}

TEST_F(memweave_capi_test, init_after_lazy_initialization_is_refused) {
  ::setenv("MEMWEAVE_DEVICE", "host", 1);
  ::setenv("MEMWEAVE_DEVICE_BYTES", "64M", 1);
  ::setenv("MEMWEAVE_POOL_BYTES", "8M", 1);
  void* p = nullptr;
  ASSERT_EQ(memweaveMalloc(&p, 100), MEMWEAVE_SUCCESS) << last_error();
  const memweave_config c = host_config();
  EXPECT_EQ(memweaveInit(&c), MEMWEAVE_ERROR_INITIALIZATION_ERROR);
  EXPECT_EQ(memweaveFree(p), MEMWEAVE_SUCCESS);
}

TEST_F(memweave_capi_test, finalize_without_init_is_a_successful_no_op) {
  EXPECT_EQ(memweaveFinalize(), MEMWEAVE_SUCCESS);
  EXPECT_EQ(memweaveFinalize(), MEMWEAVE_SUCCESS);
  EXPECT_EQ(memweaveIsInitialized(), 0);
}

TEST_F(memweave_capi_test, finalize_with_live_allocations_releases_them) {
  const memweave_config c = host_config();
  ASSERT_EQ(memweaveInit(&c), MEMWEAVE_SUCCESS) << last_error();
  void* p = nullptr;
  ASSERT_EQ(memweaveMalloc(&p, 4096), MEMWEAVE_SUCCESS);
  EXPECT_EQ(memweaveFinalize(), MEMWEAVE_SUCCESS);
  EXPECT_EQ(memweaveIsInitialized(), 0);
  EXPECT_EQ(memweaveOwns(p), 0);
  EXPECT_EQ(memweaveFree(p), MEMWEAVE_ERROR_INVALID_DEVICE_POINTER);
  // A new instance starts from nothing.
  ASSERT_EQ(memweaveInit(&c), MEMWEAVE_SUCCESS) << last_error();
  EXPECT_EQ(stats().live_allocations, 0u);
}

// What cudaDeviceReset needs first: the device's pool given back (its allocations invalid,
// as the reset makes them), the next allocation from a new pool; a no-op without one.
TEST_F(memweave_capi_test, a_released_device_pool_is_made_again_on_the_next_allocation) {
  EXPECT_EQ(memweaveReleaseDevicePool(), MEMWEAVE_SUCCESS);  // before initialization
  const memweave_config c = host_config();
  ASSERT_EQ(memweaveInit(&c), MEMWEAVE_SUCCESS) << last_error();
  EXPECT_EQ(memweaveReleaseDevicePool(), MEMWEAVE_SUCCESS);  // no pool made yet
  void* p = nullptr;
  ASSERT_EQ(memweaveMalloc(&p, 4096), MEMWEAVE_SUCCESS);
  void* q = nullptr;
  ASSERT_EQ(memweaveMallocAsync(&q, 4096, nullptr), MEMWEAVE_SUCCESS);
  ASSERT_EQ(memweaveFreeAsync(q, nullptr), MEMWEAVE_SUCCESS);  // pending at the release
  EXPECT_EQ(memweaveReleaseDevicePool(), MEMWEAVE_SUCCESS) << last_error();
  EXPECT_EQ(memweaveOwns(p), 0);
  EXPECT_EQ(memweaveFree(p), MEMWEAVE_ERROR_INVALID_DEVICE_POINTER);
  void* r = nullptr;
  ASSERT_EQ(memweaveMalloc(&r, 4096), MEMWEAVE_SUCCESS) << last_error();
  EXPECT_EQ(memweaveOwns(r), 1);
  EXPECT_EQ(stats().live_allocations, 1u);  // the new pool's only one
  EXPECT_EQ(memweaveFree(r), MEMWEAVE_SUCCESS);
}

// Looking a pointer up (memweaveOwns, and every free: the device's pool is found by the
// pointer) scans the pools of all devices, so a thread using one device reads the pool a
// release of another (cudaDeviceReset there) destroys, and the host pool too, which goes with
// the pool it was made through. The release waits for such lookups (session 44's hostile
// run: a device-1 cudaFree read device 0's heap as the reset freed it, SIGSEGV). With one
// device here, lookups of pointers that are no pool's stand in for them: under TSan,
// without the wait, their reads race with the destruction.
TEST_F(memweave_capi_test, a_release_waits_for_the_lookups_of_other_threads) {
  const memweave_config c = host_config(4 * k_mib);
  ASSERT_EQ(memweaveInit(&c), MEMWEAVE_SUCCESS) << last_error();
  std::atomic<bool> started{false}, done{false};
  std::atomic<long> wrong{0};
  int foreign = 0;
  std::thread lookups([&] {
    started = true;
    while (!done.load()) {
      if (memweaveOwns(&foreign) != 0) wrong.fetch_add(1);
      if (memweaveHostFree(&foreign) != MEMWEAVE_ERROR_INVALID_DEVICE_POINTER) wrong.fetch_add(1);
    }
  });
  while (!started.load()) std::this_thread::yield();
  for (int i = 0; i < 50; ++i) {
    void* p = nullptr;
    void* h = nullptr;
    ASSERT_EQ(memweaveMalloc(&p, 4096), MEMWEAVE_SUCCESS) << last_error();
    ASSERT_EQ(memweaveHostMalloc(&h, 4096), MEMWEAVE_SUCCESS) << last_error();
    ASSERT_EQ(memweaveReleaseDevicePool(), MEMWEAVE_SUCCESS) << last_error();
  }
  done = true;
  lookups.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST_F(memweave_capi_test, bad_config_values_are_invalid_values_naming_the_field) {
  memweave_config c = host_config();
  c.fit = 7;
  EXPECT_EQ(memweaveInit(&c), MEMWEAVE_ERROR_INVALID_VALUE);
  EXPECT_NE(last_error().find("fit"), std::string::npos) << last_error();
  c = host_config();
  c.pool_fraction = 1.5;
  c.pool_bytes = 0;
  EXPECT_EQ(memweaveInit(&c), MEMWEAVE_ERROR_INVALID_VALUE);
  EXPECT_NE(last_error().find("pool_fraction"), std::string::npos) << last_error();
  c = host_config();
  c.device = "gpu";
  EXPECT_EQ(memweaveInit(&c), MEMWEAVE_ERROR_INVALID_VALUE);
  EXPECT_NE(last_error().find("gpu"), std::string::npos) << last_error();
  c = host_config();
  c.block_bytes = 1000;  // not a power of two
  EXPECT_EQ(memweaveInit(&c), MEMWEAVE_ERROR_INVALID_VALUE);
  EXPECT_NE(last_error().find("memweave_config.block_bytes = 1000"), std::string::npos)
      << last_error();
  c.block_bytes = std::size_t{1} << 40;  // a power of two, beyond MEMWEAVE_BLOCK_BYTES's 1 GiB
  EXPECT_EQ(memweaveInit(&c), MEMWEAVE_ERROR_INVALID_VALUE);
  EXPECT_NE(last_error().find("memweave_config.block_bytes = 1099511627776 is not a power of two "
                              "from 256 to 1 GiB"),
            std::string::npos)
      << last_error();
  // Checked at initialization, not at the first memweaveHostMalloc, and named as set.
  c = host_config();
  c.host_pool_bytes = 1;
  EXPECT_EQ(memweaveInit(&c), MEMWEAVE_ERROR_INVALID_VALUE);
  EXPECT_NE(last_error().find("memweave_config.host_pool_bytes = 1 "), std::string::npos)
      << last_error();
  // A fraction as given (std::to_string printed 0.000000).
  c = host_config();
  c.pool_bytes = 0;
  c.pool_fraction = 1e-300;
  EXPECT_EQ(memweaveInit(&c), MEMWEAVE_ERROR_INVALID_VALUE);
  EXPECT_NE(last_error().find("1e-300"), std::string::npos) << last_error();
  EXPECT_EQ(memweaveIsInitialized(), 0);
}

// A pool sized by memweave_config.pool_fraction: that field is the remedy, not the variables
// it overrides.
TEST_F(memweave_capi_test, a_pool_sized_by_its_fraction_names_that_field) {
  memweave_config c = host_config(0);
  c.pool_fraction = 0.25;  // of the device's 64 MiB
  ASSERT_EQ(memweaveInit(&c), MEMWEAVE_SUCCESS) << last_error();
  void* p = nullptr;
  EXPECT_EQ(memweaveMalloc(&p, 32 * k_mib), MEMWEAVE_ERROR_MEMORY_ALLOCATION);
  const std::string m = last_error();
  EXPECT_NE(m.find("raise memweave_config.pool_fraction, or set memweave_config.grow_bytes"),
            std::string::npos)
      << m;
  EXPECT_EQ(m.find("MEMWEAVE_POOL_FRACTION"), std::string::npos) << m;
}

TEST_F(memweave_capi_test, pool_larger_than_the_device_is_an_allocation_error) {
  memweave_config c = host_config(128 * k_mib);  // the device has 64 MiB
  EXPECT_EQ(memweaveInit(&c), MEMWEAVE_ERROR_MEMORY_ALLOCATION);
  // The field the caller set, not the environment variable.
  EXPECT_NE(last_error().find("memweave_config.pool_bytes"), std::string::npos) << last_error();
  // The device's size was set by a field too (session 42's hostile run: the message named
  // MEMWEAVE_DEVICE_BYTES, which this caller never set).
  EXPECT_NE(last_error().find("raise memweave_config.device_bytes"), std::string::npos)
      << last_error();
  EXPECT_EQ(last_error().find("MEMWEAVE_DEVICE_BYTES"), std::string::npos) << last_error();
  EXPECT_EQ(memweaveIsInitialized(), 0);
}

// grow_bytes near SIZE_MAX wrapped when rounded to blocks: the pool grew by the request
// alone. No arena that large can be had, so the pool does not grow.
TEST_F(memweave_capi_test, a_growth_step_too_large_to_take_does_not_grow_the_pool) {
  memweave_config c = host_config(8 * k_mib);
  c.grow_bytes = SIZE_MAX;
  ASSERT_EQ(memweaveInit(&c), MEMWEAVE_SUCCESS) << last_error();
  void* p = nullptr;
  EXPECT_EQ(memweaveMalloc(&p, 16 * k_mib), MEMWEAVE_ERROR_MEMORY_ALLOCATION);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(stats().arenas, 1u);
}

TEST_F(memweave_capi_test, cuda_without_a_gpu_is_no_device) {
  memweave_config c = host_config();
  c.device = "cuda";
  const int rc = memweaveInit(&c);
  if (rc == MEMWEAVE_SUCCESS) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(rc, MEMWEAVE_ERROR_NO_DEVICE) << last_error();
  EXPECT_FALSE(last_error().empty());
}

TEST_F(memweave_capi_test, auto_never_falls_back_to_the_simulated_device) {
  // A drop-in cudaMalloc must not hand a GPU program host memory: `auto` is cuda here.
  memweave_config c = host_config();
  c.device = "auto";
  const int rc = memweaveInit(&c);
  if (rc == MEMWEAVE_SUCCESS) GTEST_SKIP() << "a CUDA device is present: auto is cuda";
  EXPECT_EQ(rc, MEMWEAVE_ERROR_NO_DEVICE) << last_error();
  EXPECT_NE(last_error().find("MEMWEAVE_DEVICE=host"), std::string::npos) << last_error();
  void* p = nullptr;
  EXPECT_EQ(memweaveMalloc(&p, 1000), MEMWEAVE_ERROR_NO_DEVICE) << "lazily, from the default";
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(memweaveIsInitialized(), 1) << "initialized, with no pool: every call says why";
}

TEST_F(memweave_capi_test, stream_ordered_malloc_and_free_round_trip) {
  const memweave_config c = host_config();
  ASSERT_EQ(memweaveInit(&c), MEMWEAVE_SUCCESS) << last_error();
  auto* stream = reinterpret_cast<CUstream_st*>(0x1234);  // opaque to the host backend
  void* p = nullptr;
  ASSERT_EQ(memweaveMallocAsync(&p, 4000, stream), MEMWEAVE_SUCCESS) << last_error();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(memweaveOwns(p), 1);
  ASSERT_EQ(memweaveFreeAsync(p, stream), MEMWEAVE_SUCCESS) << last_error();
  // The host device has no streams a caller can enqueue on: the free is complete at once.
  EXPECT_EQ(stats().live_allocations, 0u);
  EXPECT_EQ(memweaveFreeAsync(p, stream), MEMWEAVE_ERROR_INVALID_DEVICE_POINTER);
  int x = 0;
  EXPECT_EQ(memweaveFreeAsync(&x, stream), MEMWEAVE_ERROR_INVALID_DEVICE_POINTER);
  EXPECT_NE(last_error().find("not an allocation of the memweave pool"), std::string::npos);
  EXPECT_EQ(memweaveMallocAsync(nullptr, 10, stream), MEMWEAVE_ERROR_INVALID_VALUE);
  EXPECT_EQ(memweaveFreeAsync(nullptr, stream), MEMWEAVE_SUCCESS);
}

TEST_F(memweave_capi_test, pool_fraction_sizes_the_pool_from_free_device_memory) {
  memweave_config c = host_config(0);
  c.pool_fraction = 0.5;
  ASSERT_EQ(memweaveInit(&c), MEMWEAVE_SUCCESS) << last_error();
  std::size_t total = 0;
  ASSERT_EQ(memweaveMemGetInfo(nullptr, &total), MEMWEAVE_SUCCESS);
  EXPECT_EQ(total, 32 * k_mib);
}

TEST_F(memweave_capi_test, first_fit_is_selectable) {
  memweave_config c = host_config();
  c.fit = MEMWEAVE_FIT_FIRST;
  ASSERT_EQ(memweaveInit(&c), MEMWEAVE_SUCCESS) << last_error();
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_EQ(memweaveMalloc(&a, 1024), MEMWEAVE_SUCCESS);
  ASSERT_EQ(memweaveMalloc(&b, 1024), MEMWEAVE_SUCCESS);
  EXPECT_EQ(memweaveFree(a), MEMWEAVE_SUCCESS);
  EXPECT_EQ(memweaveFree(b), MEMWEAVE_SUCCESS);
}

TEST_F(memweave_capi_test, error_strings_name_every_code) {
  for (int rc : {MEMWEAVE_SUCCESS, MEMWEAVE_ERROR_INVALID_VALUE, MEMWEAVE_ERROR_MEMORY_ALLOCATION,
                 MEMWEAVE_ERROR_INITIALIZATION_ERROR, MEMWEAVE_ERROR_INVALID_DEVICE_POINTER,
                 MEMWEAVE_ERROR_NO_DEVICE, MEMWEAVE_ERROR_NOT_SUPPORTED, MEMWEAVE_ERROR_UNKNOWN}) {
    const char* s = memweaveGetErrorString(rc);
    ASSERT_NE(s, nullptr);
    EXPECT_STRNE(s, "unrecognized error code") << rc;
  }
  EXPECT_STREQ(memweaveGetErrorString(17), "invalid device pointer");
  EXPECT_STREQ(memweaveGetErrorString(12345), "unrecognized error code");
  EXPECT_STREQ(memweaveGetVersion(), "0.1.0");
}

TEST_F(memweave_capi_test, last_error_message_belongs_to_its_thread) {
  EXPECT_EQ(memweaveMalloc(nullptr, 1), MEMWEAVE_ERROR_INVALID_VALUE);
  ASSERT_FALSE(last_error().empty());
  std::string other = "unset";
  std::thread([&] { other = memweaveGetLastErrorMessage(); }).join();
  EXPECT_EQ(other, "");
}

TEST_F(memweave_capi_test, host_malloc_round_trip_uses_the_pinned_pool) {
  const memweave_config c = host_config();
  ASSERT_EQ(memweaveInit(&c), MEMWEAVE_SUCCESS) << last_error();
  EXPECT_EQ(stats().host_capacity, 0u) << "the host pool is made on first use";
  void* h = nullptr;
  const int rc = memweaveHostMalloc(&h, 100000);
  if (rc == MEMWEAVE_ERROR_INITIALIZATION_ERROR) GTEST_SKIP() << last_error();
  ASSERT_EQ(rc, MEMWEAVE_SUCCESS) << last_error();
  ASSERT_NE(h, nullptr);
  std::memset(h, 0x33, 100000);
  // jemalloc serves the pool from a private namespace: the process's malloc is untouched.
  EXPECT_EQ(::dlsym(RTLD_DEFAULT, "mallocx"), nullptr);
  Dl_info info{};
  ASSERT_NE(::dladdr(::dlsym(RTLD_DEFAULT, "malloc"), &info), 0);
  EXPECT_EQ(std::string(info.dli_fname).find("jemalloc"), std::string::npos) << info.dli_fname;
  memweave_stats s = stats();
  EXPECT_EQ(s.host_capacity, 16 * k_mib);
  EXPECT_GE(s.host_bytes_in_use, 100000u);
  EXPECT_EQ(s.host_live_allocations, 1u);
  EXPECT_EQ(s.live_allocations, 0u) << "host memory must not count as device memory";
  EXPECT_EQ(memweaveFree(h), MEMWEAVE_ERROR_INVALID_DEVICE_POINTER) << "not device memory";
  EXPECT_EQ(memweaveHostFree(h), MEMWEAVE_SUCCESS);
  EXPECT_EQ(memweaveHostFree(h), MEMWEAVE_ERROR_INVALID_DEVICE_POINTER);
  EXPECT_NE(last_error().find("pinned host pool"), std::string::npos) << last_error();
  int x = 0;
  EXPECT_EQ(memweaveHostFree(&x), MEMWEAVE_ERROR_INVALID_DEVICE_POINTER);
  s = stats();
  EXPECT_EQ(s.host_live_allocations, 0u);
  EXPECT_EQ(s.host_bytes_in_use, 0u);
  void* big = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(memweaveHostMalloc(&big, 64 * k_mib), MEMWEAVE_ERROR_MEMORY_ALLOCATION);
  EXPECT_EQ(big, nullptr);
  // The field that sized it, and what one allocation could take: 15 of an empty 16 MiB do
  // not fit (jemalloc's size classes), which said "0 B of 16.00 MiB in use" and no more.
  EXPECT_NE(last_error().find("memweave_config.host_pool_bytes"), std::string::npos)
      << last_error();
  EXPECT_EQ(memweaveHostMalloc(&big, 15 * k_mib), MEMWEAVE_ERROR_MEMORY_ALLOCATION);
  EXPECT_NE(last_error().find("the largest allocation it can give now"), std::string::npos)
      << last_error();
}

TEST_F(memweave_capi_test, host_free_before_any_host_malloc_is_an_invalid_pointer) {
  int x = 0;
  EXPECT_EQ(memweaveHostFree(&x), MEMWEAVE_ERROR_INVALID_DEVICE_POINTER);
  const memweave_config c = host_config();
  ASSERT_EQ(memweaveInit(&c), MEMWEAVE_SUCCESS) << last_error();
  EXPECT_EQ(memweaveHostFree(&x), MEMWEAVE_ERROR_INVALID_DEVICE_POINTER);
}

TEST_F(memweave_capi_test, concurrent_first_use_makes_one_instance_and_serves_every_thread) {
  ::setenv("MEMWEAVE_DEVICE", "host", 1);
  ::setenv("MEMWEAVE_DEVICE_BYTES", "64M", 1);
  ::setenv("MEMWEAVE_POOL_BYTES", "32M", 1);
  constexpr int k_threads = 8;
  constexpr int k_rounds = 300;
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<void*> mine;
      for (int r = 0; r < k_rounds; ++r) {
        void* p = nullptr;
        if (memweaveMalloc(&p, 1 + static_cast<std::size_t>((t * 131 + r * 17) % 20000)) !=
            MEMWEAVE_SUCCESS) {
          errors.fetch_add(1);
          continue;
        }
        static_cast<unsigned char*>(p)[0] = static_cast<unsigned char>(t);
        mine.push_back(p);
        if (mine.size() > 8) {
          if (static_cast<unsigned char*>(mine.front())[0] != t) errors.fetch_add(1);
          if (memweaveFree(mine.front()) != MEMWEAVE_SUCCESS) errors.fetch_add(1);
          mine.erase(mine.begin());
        }
      }
      for (void* p : mine) {
        if (memweaveFree(p) != MEMWEAVE_SUCCESS) errors.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  const memweave_stats s = stats();
  EXPECT_EQ(s.allocations, static_cast<std::uint64_t>(k_threads * k_rounds))
      << "allocations went to more than one instance";
  EXPECT_EQ(s.live_allocations, 0u);
  EXPECT_EQ(s.bytes_reserved, 32 * k_mib);
}

// A free found invalid must change nothing even where another thread is handed that block
// between the check and the count: the free used to be counted by asking the heap to free
// the pointer, which by then freed the other thread's live block (seen as more heap frees
// than frees that returned success).
TEST_F(memweave_capi_test, a_rejected_double_free_never_frees_another_threads_block) {
  // Every rejected free warns: quiet (read at the library's first message, and ctest runs
  // each test in a process of its own).
  ::setenv("MEMWEAVE_LOG", "error", 1);
  const memweave_config c = host_config(1 * k_mib);
  ASSERT_EQ(memweaveInit(&c), MEMWEAVE_SUCCESS) << last_error();
  void* stale = nullptr;
  ASSERT_EQ(memweaveMalloc(&stale, 1024), MEMWEAVE_SUCCESS);
  ASSERT_EQ(memweaveFree(stale), MEMWEAVE_SUCCESS);
  const memweave_stats before = stats();
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> succeeded{0};
  // A program with a double-free bug: it keeps freeing the block it freed already...
  std::thread stale_freer([&] {
    while (!stop.load()) {
      if (memweaveFree(stale) == MEMWEAVE_SUCCESS) succeeded.fetch_add(1);
    }
  });
  // ... while this thread is handed that same block again and again.
  constexpr int k_rounds = 20000;
  for (int i = 0; i < k_rounds; ++i) {
    void* p = nullptr;
    ASSERT_EQ(memweaveMalloc(&p, 1024), MEMWEAVE_SUCCESS) << last_error();
    if (memweaveFree(p) == MEMWEAVE_SUCCESS) succeeded.fetch_add(1);
  }
  stop.store(true);
  stale_freer.join();
  const memweave_stats after = stats();
  // Every block the heap freed was freed by a call that said so.
  EXPECT_EQ(after.frees - before.frees, succeeded.load());
  EXPECT_EQ(after.live_allocations, 0u);
}

}  // namespace
