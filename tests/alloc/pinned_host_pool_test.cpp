// pinned_host_pool: a jemalloc arena over one pinned region, on a test-double device that
// hands out plain (deliberately dirty) memory as "pinned" and records what it gave.
#include "memweave/alloc/pinned_host_pool.hpp"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "memweave/core/config.hpp"
#include "memweave/device/device.hpp"
#include "support/static_tls_reexec.hpp"

MEMWEAVE_REEXEC_WITH_STATIC_TLS();

extern char** environ;

namespace memweave {
namespace {

// A device with pinned memory only. The memory is filled with 0xA5 so that the pool's
// hooks must clear whatever jemalloc asks to be zeroed.
class pinned_only_device final : public device {
 public:
  device_kind kind() const noexcept override { return device_kind::host; }
  std::string name() const override { return "test double (pinned memory only)"; }
  void* allocate(std::size_t) override { throw device_error("test double: no device memory"); }
  void deallocate(void*, std::size_t) noexcept override {}
  void* allocate_pinned(std::size_t bytes) override {
    if (bytes > limit_bytes) throw out_of_memory("test double: pinned limit", bytes, 0, 0);
    void* p = ::operator new (bytes, std::align_val_t{4096});
    std::memset(p, 0xA5, bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    ++pinned_allocations;
    last_pinned = p;
    last_pinned_bytes = bytes;
    return p;
  }
  void deallocate_pinned(void* p, std::size_t bytes) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++pinned_frees;
    last_freed = p;
    last_freed_bytes = bytes;
    ::operator delete (p, std::align_val_t{4096});
  }
  memory_info memory() const override { return {}; }
  stream& get_stream(stream_role) override { throw device_error("test double: no streams"); }
  std::unique_ptr<event> make_event(const event_options&) override {
    throw device_error("test double: no events");
  }
  void synchronize() override {}

  std::size_t limit_bytes = std::size_t{1} << 30;
  int pinned_allocations = 0;
  int pinned_frees = 0;
  void* last_pinned = nullptr;
  std::size_t last_pinned_bytes = 0;
  void* last_freed = nullptr;
  std::size_t last_freed_bytes = 0;

 private:
  std::mutex mutex_;
};

constexpr std::size_t k_mib = std::size_t{1} << 20;

class pinned_host_pool_test : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!pinned_host_pool::runtime_available(&why)) GTEST_SKIP() << why;
  }
  pinned_only_device dev_;
};

void fill(void* p, std::size_t n, std::uint8_t seed) {
  auto* b = static_cast<std::uint8_t*>(p);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>(seed + i * 31);
}

bool check(const void* p, std::size_t n, std::uint8_t seed) {
  const auto* b = static_cast<const std::uint8_t*>(p);
  for (std::size_t i = 0; i < n; ++i) {
    if (b[i] != static_cast<std::uint8_t>(seed + i * 31)) return false;
  }
  return true;
}

TEST_F(pinned_host_pool_test, reserves_one_region_and_gives_it_back) {
  {
    pinned_host_pool pool(dev_, 32 * k_mib);
    EXPECT_EQ(pool.capacity(), 32 * k_mib);
    EXPECT_EQ(dev_.pinned_allocations, 1);
    EXPECT_EQ(dev_.last_pinned_bytes, 32 * k_mib);
    void* p = pool.allocate(1000);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(pool.owns(p));
    EXPECT_EQ(pool.deallocate(p), status::success);
    EXPECT_EQ(dev_.pinned_frees, 0);
    EXPECT_EQ(&pool.get_device(), &dev_);
  }
  EXPECT_EQ(dev_.pinned_allocations, 1);
  EXPECT_EQ(dev_.pinned_frees, 1);
  EXPECT_EQ(dev_.last_freed, dev_.last_pinned);
  EXPECT_EQ(dev_.last_freed_bytes, 32 * k_mib);
}

TEST_F(pinned_host_pool_test, many_sizes_come_from_the_region_and_keep_their_data) {
  pinned_host_pool pool(dev_, 64 * k_mib);
  const std::size_t sizes[] = {
      1,     7,     8,         16,     24,    100,       255,           4096,     4097,
      12345, 16384, 65536 + 3, 100000, k_mib, k_mib + 1, 3 * k_mib + 5, 8 * k_mib};
  std::vector<std::pair<void*, std::size_t>> live;
  std::uint8_t seed = 1;
  for (int round = 0; round < 3; ++round) {
    for (std::size_t n : sizes) {
      void* p = pool.allocate(n);
      ASSERT_NE(p, nullptr) << n << " bytes";
      EXPECT_TRUE(pool.owns(p)) << n << " bytes";
      EXPECT_TRUE(pool.owns(static_cast<char*>(p) + n - 1)) << n << " bytes";
      EXPECT_GE(pool.allocation_size(p), n);
      fill(p, n, seed++);
      live.emplace_back(p, n);
    }
  }
  seed = 1;
  for (auto [p, n] : live) EXPECT_TRUE(check(p, n, seed++)) << n << " bytes corrupted";
  // Overlap check: sorted by address, each ends before the next starts.
  std::vector<std::pair<std::uintptr_t, std::size_t>> sorted;
  for (auto [p, n] : live) sorted.emplace_back(reinterpret_cast<std::uintptr_t>(p), n);
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 1; i < sorted.size(); ++i) {
    EXPECT_LE(sorted[i - 1].first + sorted[i - 1].second, sorted[i].first);
  }
  for (auto [p, n] : live) EXPECT_EQ(pool.deallocate(p), status::success);
  EXPECT_EQ(pool.bytes_in_use(), 0u);
  EXPECT_EQ(pool.stats().live_allocations, 0u);
}

TEST_F(pinned_host_pool_test, alignment_is_honoured) {
  pinned_host_pool pool(dev_, 64 * k_mib);
  for (std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{9}}) {
    void* small = pool.allocate(n);  // jemalloc alone would align 1..8 bytes to 8 only
    ASSERT_NE(small, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(small) % alignof(std::max_align_t), 0u) << n;
    EXPECT_EQ(pool.deallocate(small), status::success);
  }
  for (std::size_t align = 1; align <= 4 * k_mib; align *= 2) {
    std::vector<void*> round;
    for (std::size_t n : {std::size_t{1}, std::size_t{100}, std::size_t{5000}, 2 * k_mib}) {
      void* p = pool.allocate(n, align);
      ASSERT_NE(p, nullptr) << n << " bytes at " << align;
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % align, 0u) << n << " bytes at " << align;
      EXPECT_TRUE(pool.owns(p));
      fill(p, n, 5);
      round.push_back(p);
    }
    for (void* p : round) EXPECT_EQ(pool.deallocate(p), status::success);
  }
}

TEST_F(pinned_host_pool_test, bad_requests_return_nullptr_and_count_as_failures) {
  pinned_host_pool pool(dev_, 16 * k_mib);
  EXPECT_EQ(pool.allocate(0), nullptr);
  EXPECT_EQ(pool.allocate(64, 3), nullptr);       // not a power of two
  EXPECT_EQ(pool.allocate(64, 48), nullptr);      // not a power of two
  EXPECT_EQ(pool.allocate(17 * k_mib), nullptr);  // larger than the region
  EXPECT_EQ(pool.allocate(SIZE_MAX), nullptr);
  EXPECT_EQ(pool.stats().failures, 5u);
  EXPECT_EQ(pool.stats().allocations, 0u);
  EXPECT_EQ(pool.bytes_in_use(), 0u);
}

TEST_F(pinned_host_pool_test, exhaustion_returns_nullptr_then_memory_is_usable_after_frees) {
  pinned_host_pool pool(dev_, 32 * k_mib);
  std::vector<void*> live;
  for (;;) {
    void* p = pool.allocate(k_mib);
    if (p == nullptr) break;
    ASSERT_TRUE(pool.owns(p));
    live.push_back(p);
    ASSERT_LT(live.size(), 64u) << "a 32 MiB region served more than 64 MiB";
  }
  const std::size_t first = live.size();
  EXPECT_GE(first, 16u) << "a 32 MiB region served only " << first << " x 1 MiB";
  EXPECT_LE(pool.bytes_in_use(), pool.capacity());
  EXPECT_GE(pool.stats().failures, 1u);
  for (void* p : live) fill(p, k_mib, 7);
  for (void* p : live) EXPECT_EQ(pool.deallocate(p), status::success);
  live.clear();
  EXPECT_EQ(pool.bytes_in_use(), 0u);

  // The freed extents are reused: as many again, then one large block over the merged space.
  for (std::size_t i = 0; i < first; ++i) {
    void* p = pool.allocate(k_mib);
    ASSERT_NE(p, nullptr) << "allocation " << i << " of " << first << " after the frees";
    live.push_back(p);
  }
  for (void* p : live) EXPECT_EQ(pool.deallocate(p), status::success);
  void* big = pool.allocate(first / 2 * k_mib);
  ASSERT_NE(big, nullptr) << "freed 1 MiB extents were not merged for a " << first / 2
                          << " MiB request";
  fill(big, first / 2 * k_mib, 3);
  EXPECT_TRUE(check(big, first / 2 * k_mib, 3));
  EXPECT_EQ(pool.deallocate(big), status::success);
}

TEST_F(pinned_host_pool_test, one_allocation_can_span_most_of_the_region) {
  pinned_host_pool pool(dev_, 64 * k_mib);
  void* big = pool.allocate(48 * k_mib);
  ASSERT_NE(big, nullptr) << "48 MiB out of a fresh 64 MiB region";
  fill(big, 48 * k_mib, 1);
  EXPECT_TRUE(check(big, 48 * k_mib, 1));
  EXPECT_EQ(pool.deallocate(big), status::success);
  // Again after the region was cut into small pieces and freed.
  std::vector<void*> small;
  for (int i = 0; i < 2000; ++i) small.push_back(pool.allocate(1000 + (i % 7) * 3000));
  for (void* p : small) EXPECT_EQ(pool.deallocate(p), status::success);
  big = pool.allocate(48 * k_mib);
  ASSERT_NE(big, nullptr) << "48 MiB after small allocations came and went";
  EXPECT_EQ(pool.deallocate(big), status::success);
}

// What a failure's message names as the largest allocation the pool can give is exactly
// that: it can be had, and one byte more cannot (empty, and with half the region live).
TEST_F(pinned_host_pool_test, largest_allocation_is_what_one_allocation_can_take_now) {
  pinned_host_pool pool(dev_, 16 * k_mib);
  const std::size_t empty = pool.largest_allocation();
  EXPECT_GE(empty, 12 * k_mib) << "a fresh region serves most of itself as one block";
  EXPECT_LT(empty, 16 * k_mib);
  EXPECT_EQ(pool.allocate(empty + 1), nullptr);
  void* p = pool.allocate(empty);
  ASSERT_NE(p, nullptr);
  EXPECT_LE(pool.largest_allocation(), 16 * k_mib - empty) << "only the rest beside it";
  EXPECT_EQ(pool.deallocate(p), status::success);
  void* half = pool.allocate(8 * k_mib);
  ASSERT_NE(half, nullptr);
  const std::size_t rest = pool.largest_allocation();
  EXPECT_GT(rest, 0u);
  EXPECT_LE(rest, 8 * k_mib);
  EXPECT_EQ(pool.allocate(rest + 1), nullptr);
  void* q = pool.allocate(rest);
  EXPECT_NE(q, nullptr);
  EXPECT_EQ(pool.deallocate(q), status::success);
  EXPECT_EQ(pool.deallocate(half), status::success);
  EXPECT_EQ(pool.stats().live_allocations, 0u) << "probing leaves nothing allocated";
}

TEST_F(pinned_host_pool_test, exhaustion_by_small_allocations_recovers_too) {
  pinned_host_pool pool(dev_, 16 * k_mib);
  std::vector<void*> live;
  for (;;) {
    void* p = pool.allocate(3000);
    if (p == nullptr) break;
    live.push_back(p);
    ASSERT_LT(live.size(), 16 * k_mib / 3000) << "more than the region served";
  }
  const std::size_t first = live.size();
  EXPECT_GE(first, 16 * k_mib / 3000 / 2);
  for (void* p : live) EXPECT_EQ(pool.deallocate(p), status::success);
  live.clear();
  for (std::size_t i = 0; i < first; ++i) {
    void* p = pool.allocate(3000);
    ASSERT_NE(p, nullptr) << "allocation " << i << " of " << first << " after the frees";
    live.push_back(p);
  }
  for (void* p : live) EXPECT_EQ(pool.deallocate(p), status::success);
}

TEST_F(pinned_host_pool_test, bytes_in_use_is_the_sum_of_usable_sizes_and_peak_follows) {
  pinned_host_pool pool(dev_, 32 * k_mib);
  void* a = pool.allocate(100);
  void* b = pool.allocate(5000);
  void* c = pool.allocate(2 * k_mib);
  ASSERT_TRUE(a && b && c);
  const std::size_t sum =
      pool.allocation_size(a) + pool.allocation_size(b) + pool.allocation_size(c);
  EXPECT_GE(sum, 100 + 5000 + 2 * k_mib);
  EXPECT_EQ(pool.bytes_in_use(), sum);
  EXPECT_EQ(pool.peak_bytes_in_use(), sum);
  const std::size_t size_c = pool.allocation_size(c);
  EXPECT_EQ(pool.deallocate(c), status::success);
  EXPECT_EQ(pool.bytes_in_use(), sum - size_c);
  EXPECT_EQ(pool.allocation_size(c), 0u);
  EXPECT_EQ(pool.peak_bytes_in_use(), sum);
  pool.reset_peak();
  EXPECT_EQ(pool.peak_bytes_in_use(), pool.bytes_in_use());
  const pinned_host_stats s = pool.stats();
  EXPECT_EQ(s.allocations, 3u);
  EXPECT_EQ(s.frees, 1u);
  EXPECT_EQ(s.live_allocations, 2u);
  EXPECT_EQ(s.capacity, 32 * k_mib);
  EXPECT_EQ(pool.deallocate(a), status::success);
  EXPECT_EQ(pool.deallocate(b), status::success);
  EXPECT_EQ(pool.bytes_in_use(), 0u);
}

TEST_F(pinned_host_pool_test, free_of_foreign_interior_or_freed_pointer_is_rejected) {
  pinned_host_pool pool(dev_, 16 * k_mib);
  void* p = pool.allocate(4096);
  ASSERT_NE(p, nullptr);
  fill(p, 4096, 9);
  const pinned_host_stats before = pool.stats();
  int on_stack = 0;
  std::unique_ptr<char[]> on_heap(new char[64]);
  EXPECT_EQ(pool.deallocate(&on_stack), status::invalid_device_pointer);
  EXPECT_EQ(pool.deallocate(on_heap.get()), status::invalid_device_pointer);
  EXPECT_EQ(pool.deallocate(static_cast<char*>(p) + 16), status::invalid_device_pointer);
  EXPECT_EQ(pool.deallocate(nullptr), status::success);
  const pinned_host_stats after = pool.stats();
  EXPECT_EQ(after.invalid_frees, before.invalid_frees + 3);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.live_allocations, before.live_allocations);
  EXPECT_EQ(after.frees, before.frees);
  EXPECT_TRUE(check(p, 4096, 9));
  EXPECT_FALSE(pool.owns(&on_stack));
  EXPECT_TRUE(pool.owns(static_cast<char*>(p) + 16));
  EXPECT_EQ(pool.deallocate(p), status::success);
  EXPECT_EQ(pool.deallocate(p), status::invalid_device_pointer);  // freed twice
  EXPECT_EQ(pool.stats().invalid_frees, before.invalid_frees + 4);
  EXPECT_EQ(pool.stats().frees, 1u);
}

TEST_F(pinned_host_pool_test, two_pools_keep_their_pointers_apart) {
  pinned_only_device other;
  pinned_host_pool a(dev_, 16 * k_mib);
  pinned_host_pool b(other, 16 * k_mib);
  void* pa = a.allocate(1000);
  void* pb = b.allocate(1000);
  ASSERT_TRUE(pa && pb);
  EXPECT_TRUE(a.owns(pa));
  EXPECT_FALSE(a.owns(pb));
  EXPECT_TRUE(b.owns(pb));
  EXPECT_EQ(a.deallocate(pb), status::invalid_device_pointer);
  EXPECT_EQ(b.deallocate(pa), status::invalid_device_pointer);
  EXPECT_EQ(a.deallocate(pa), status::success);
  EXPECT_EQ(b.deallocate(pb), status::success);
}

TEST_F(pinned_host_pool_test, pools_can_be_made_and_destroyed_repeatedly) {
  for (int i = 0; i < 20; ++i) {
    pinned_host_pool pool(dev_, 16 * k_mib);
    void* p = pool.allocate(k_mib);
    ASSERT_NE(p, nullptr) << "round " << i;
    fill(p, k_mib, static_cast<std::uint8_t>(i));
    if (i % 2 == 0) {  // odd rounds leave it to the destructor
      EXPECT_EQ(pool.deallocate(p), status::success);
    }
  }
  EXPECT_EQ(dev_.pinned_allocations, 20);
  EXPECT_EQ(dev_.pinned_frees, 20);
}

TEST_F(pinned_host_pool_test, too_small_a_region_is_rejected_with_the_minimum) {
  try {
    pinned_host_pool pool(dev_, k_mib);
    FAIL() << "a 1 MiB pool was accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("minimum"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("MEMWEAVE_HOST_POOL_BYTES"), std::string::npos);
  }
  EXPECT_EQ(dev_.pinned_allocations, 0);
}

TEST_F(pinned_host_pool_test, device_that_cannot_pin_reports_out_of_memory) {
  dev_.limit_bytes = 8 * k_mib;
  EXPECT_THROW(pinned_host_pool(dev_, 16 * k_mib), out_of_memory);
  EXPECT_EQ(dev_.pinned_allocations, 0);
}

// The option table's range for MEMWEAVE_HOST_POOL_BYTES (and --host-pool) is the pool's
// minimum, so a too-small pool is rejected naming the knob the user gave.
TEST(pinned_host_pool_range, option_table_minimum_is_the_pools) {
  EXPECT_EQ(find_option("MEMWEAVE_HOST_POOL_BYTES")->range.min,
            static_cast<double>(pinned_host_pool::min_bytes));
}

TEST_F(pinned_host_pool_test, zero_bytes_reads_the_environment) {
  const char* old = std::getenv("MEMWEAVE_HOST_POOL_BYTES");
  const std::string saved = old != nullptr ? old : "";
  ::setenv("MEMWEAVE_HOST_POOL_BYTES", "24M", 1);
  {
    pinned_host_pool pool(dev_);
    EXPECT_EQ(pool.capacity(), 24 * k_mib);
  }
  ::setenv("MEMWEAVE_HOST_POOL_BYTES", "lots", 1);
  EXPECT_THROW(pinned_host_pool(dev_, 0), invalid_argument);
  if (old != nullptr) {
    ::setenv("MEMWEAVE_HOST_POOL_BYTES", saved.c_str(), 1);
  } else {
    ::unsetenv("MEMWEAVE_HOST_POOL_BYTES");
  }
}

// An embedded library must not change its host's malloc: jemalloc is loaded RTLD_LOCAL and
// stays out of the global symbol scope.
TEST_F(pinned_host_pool_test, host_program_keeps_its_own_malloc) {
  pinned_host_pool pool(dev_, 16 * k_mib);
  void* from_pool = pool.allocate(100);
  ASSERT_NE(from_pool, nullptr);
  for (const char* name : {"malloc", "free", "calloc", "realloc", "_Znwm", "_ZdlPv"}) {
    void* sym = ::dlsym(RTLD_DEFAULT, name);
    ASSERT_NE(sym, nullptr) << name;
    Dl_info info{};
    ASSERT_NE(::dladdr(sym, &info), 0) << name;
    const std::string lib = info.dli_fname != nullptr ? info.dli_fname : "";
    EXPECT_EQ(lib.find("jemalloc"), std::string::npos) << name << " resolves to " << lib;
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    if (std::string(name) == "malloc" || std::string(name) == "free") {
      EXPECT_NE(lib.find("libc.so"), std::string::npos) << name << " resolves to " << lib;
    }
#endif
  }
  EXPECT_EQ(::dlsym(RTLD_DEFAULT, "mallocx"), nullptr) << "jemalloc leaked into global scope";
  void* from_malloc = std::malloc(100);
  ASSERT_NE(from_malloc, nullptr);
  EXPECT_FALSE(pool.owns(from_malloc));
  std::free(from_malloc);
  EXPECT_EQ(pool.deallocate(from_pool), status::success);
}

TEST_F(pinned_host_pool_test, concurrent_allocations_from_many_threads_stay_consistent) {
  pinned_host_pool pool(dev_, 64 * k_mib);
  constexpr int k_threads = 8;
  constexpr int k_rounds = 400;
  std::atomic<int> corrupt{0};
  std::atomic<int> outside{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t + 1));
      std::uniform_int_distribution<std::size_t> size(1, 64 * 1024);
      std::vector<std::pair<void*, std::size_t>> mine;
      for (int r = 0; r < k_rounds; ++r) {
        const std::size_t n = (r % 50 == 0) ? 512 * 1024 : size(rng);
        void* p = pool.allocate(n);
        if (p != nullptr) {
          if (!pool.owns(p)) outside.fetch_add(1);
          fill(p, n, static_cast<std::uint8_t>(t));
          mine.emplace_back(p, n);
        }
        if (mine.size() > 16 || (r % 7 == 0 && !mine.empty())) {
          auto [q, m] = mine.front();
          if (!check(q, m, static_cast<std::uint8_t>(t))) corrupt.fetch_add(1);
          if (pool.deallocate(q) != status::success) corrupt.fetch_add(1);
          mine.erase(mine.begin());
        }
      }
      for (auto [q, m] : mine) {
        if (!check(q, m, static_cast<std::uint8_t>(t))) corrupt.fetch_add(1);
        if (pool.deallocate(q) != status::success) corrupt.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(corrupt.load(), 0);
  EXPECT_EQ(outside.load(), 0);
  const pinned_host_stats s = pool.stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.live_allocations, 0u);
  EXPECT_EQ(s.allocations, s.frees);
  EXPECT_GT(s.allocations, 0u);
  EXPECT_LE(s.peak_bytes_in_use, s.capacity);
}

// Run in a child without the static TLS tunable (see below): the pool either works (jemalloc
// already fits) or says exactly what to do.
TEST(pinned_host_pool_child, DISABLED_without_static_tls_the_error_names_the_fix) {
  pinned_only_device dev;
  std::string why;
  if (pinned_host_pool::runtime_available(&why)) GTEST_SKIP() << "jemalloc loaded without it";
  try {
    pinned_host_pool pool(dev, 16 * k_mib);
    FAIL() << "the pool was made although jemalloc could not be loaded";
  } catch (const device_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("GLIBC_TUNABLES=glibc.rtld.optional_static_tls="), std::string::npos)
        << what;
    EXPECT_NE(what.find("libjemalloc"), std::string::npos) << what;
  }
  EXPECT_EQ(dev.pinned_allocations, 0);
}

TEST(pinned_host_pool_environment, without_static_tls_the_error_names_the_fix) {
  // Build the child's environment: this one, less GLIBC_TUNABLES, plus the no-re-exec flag.
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "GLIBC_TUNABLES=", 15) != 0) env.emplace_back(*e);
  }
  env.emplace_back("MEMWEAVE_NO_REEXEC=1");
  std::vector<char*> envp;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe";
  std::string filter =
      "--gtest_filter=pinned_host_pool_child.DISABLED_without_static_tls_the_error_names_the_fix";
  std::string disabled = "--gtest_also_run_disabled_tests";
  char* argv[] = {exe.data(), filter.data(), disabled.data(), nullptr};
  pid_t pid = 0;
  ASSERT_EQ(::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()), 0);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus)) << "child died: status " << wstatus;
  EXPECT_EQ(WEXITSTATUS(wstatus), 0) << "the child test failed (its output is above)";
}

}  // namespace
}  // namespace memweave
