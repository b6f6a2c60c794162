// Several threads allocate and free concurrently, write a pattern into every block they
// get and verify it before freeing (so two threads never share memory), while another
// thread reads statistics and a trace is being written; then the final invariants.
#include <gtest/gtest.h>

#include <unistd.h>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "alloc/test_device.hpp"
#include "memweave/alloc/device_heap.hpp"
#include "memweave/alloc/trace.hpp"
#include "memweave/core/log.hpp"

namespace memweave {
namespace {

using test::test_device;

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;

struct held {
  std::uint64_t* p;
  std::size_t words;
  std::uint64_t tag;
};

void fill(const held& h) {
  for (std::size_t i = 0; i < h.words; ++i) h.p[i] = h.tag ^ i;
}

bool intact(const held& h) {
  for (std::size_t i = 0; i < h.words; ++i) {
    if (h.p[i] != (h.tag ^ i)) return false;
  }
  return true;
}

void run_stress(fit_policy fit, const std::string& trace_path, bool grow = false,
                int ops_per_thread = 10000) {
  constexpr int threads = 4;
  set_log_level(log_level::error);  // the threads try a few rejected frees
  test_device dev(64 * MiB);
  heap_options o;
  o.pool_bytes = grow ? 128 * KiB : 8 * MiB;  // growing: even one thread outgrows it
  o.grow_bytes = grow ? 256 * KiB : 0;
  o.block_bytes = 256;
  o.fit = fit;
  o.trace_path = trace_path;
  device_heap h(dev, o);

  std::atomic<bool> stop{false};
  std::atomic<int> corrupt{0}, bad_status{0}, bad_stats{0};
  std::atomic<std::uint64_t> allocated{0}, failed{0}, rejected{0};
  std::atomic<void*> recent{nullptr};  // a pointer some worker got lately
  std::thread watcher([&] {
    int local = 0;
    while (!stop.load()) {
      // Lock-free readers of the arena table, racing with growth.
      if (h.owns(&local) || h.offset_of(&local) != SIZE_MAX) ++bad_stats;
      if (void* p = recent.load(); p != nullptr && !h.owns(p)) ++bad_stats;
      const heap_stats s = h.stats();
      if (s.bytes_in_use + s.free_bytes != s.bytes_reserved || s.largest_free_run > s.free_bytes ||
          s.fragmentation < 0.0 || s.fragmentation > 1.0 || s.peak_bytes_in_use < s.bytes_in_use) {
        ++bad_stats;
      }
      (void)h.largest_free_run();
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(1000 + t);
      std::vector<held> mine;
      for (int op = 0; op < ops_per_thread; ++op) {
        const bool do_alloc = mine.empty() || (mine.size() < 64 && rng() % 100 < 55);
        if (do_alloc) {
          const std::size_t bytes = 8 + rng() % (16 * KiB);
          void* p = h.try_allocate(bytes, t);
          if (p == nullptr) {
            ++failed;
            continue;
          }
          ++allocated;
          recent.store(p);
          held x{static_cast<std::uint64_t*>(p), bytes / 8,
                 (static_cast<std::uint64_t>(t) << 56) ^ (static_cast<std::uint64_t>(op) << 20)};
          fill(x);
          mine.push_back(x);
        } else {
          const std::size_t i = rng() % mine.size();
          if (!intact(mine[i])) ++corrupt;
          if (op % 97 == 0) {  // an interior pointer: rejected, changes nothing
            if (mine[i].words > 1 &&
                h.deallocate(mine[i].p + 1, t) != status::invalid_device_pointer) {
              ++bad_status;
            }
            ++rejected;
          }
          if (h.deallocate(mine[i].p, t) != status::success) ++bad_status;
          mine[i] = mine.back();
          mine.pop_back();
        }
      }
      for (const held& x : mine) {
        if (!intact(x)) ++corrupt;
        if (h.deallocate(x.p, t) != status::success) ++bad_status;
      }
    });
  }
  for (auto& w : workers) w.join();
  stop = true;
  watcher.join();

  EXPECT_EQ(corrupt.load(), 0) << "a block was written by two owners";
  EXPECT_EQ(bad_status.load(), 0);
  EXPECT_EQ(bad_stats.load(), 0);
  h.check_invariants();
  const heap_stats s = h.stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.live_allocations, 0u);
  EXPECT_EQ(s.allocations, allocated.load());
  EXPECT_EQ(s.frees, allocated.load());
  EXPECT_EQ(s.failures, failed.load());
  EXPECT_EQ(s.free_runs, s.arenas);  // one free run per arena
  if (grow) {
    EXPECT_GT(s.arenas, 1u);
  } else {
    EXPECT_EQ(s.largest_free_run, s.bytes_reserved);
  }
  EXPECT_GT(allocated.load(), 0u);

  if (!trace_path.empty()) {
    h.stop_trace();
    const auto events = read_trace(trace_path);
    // Every successful allocation and free, in time order.
    EXPECT_EQ(events.size(), 2 * allocated.load());
    EXPECT_GT(events.size(), std::size_t{1} << 16)
        << "fewer events than one writer batch: the flush path was not exercised";
    for (std::size_t i = 1; i < events.size(); ++i) {
      ASSERT_GE(events[i].t_ns, events[i - 1].t_ns) << "line " << events[i].line;
    }
    // And consistent: a replay into a fresh heap reproduces the peak with no failure.
    test_device dev2(64 * MiB);
    o.trace_path.clear();
    device_heap h2(dev2, o);
    const replay_result r = replay_events(events, h2);
    EXPECT_EQ(r.failures, 0u);
    EXPECT_EQ(r.unmatched_frees, 0u);
    EXPECT_EQ(r.allocations, allocated.load());
    EXPECT_EQ(r.peak_bytes_in_use, s.peak_bytes_in_use);
    std::remove(trace_path.c_str());
  }
}

TEST(device_heap_stress_test, concurrent_best_fit_threads_never_share_memory) {
  run_stress(fit_policy::best, "");
}

TEST(device_heap_stress_test, concurrent_first_fit_threads_never_share_memory) {
  run_stress(fit_policy::first, "");
}

TEST(device_heap_stress_test, concurrent_threads_grow_the_heap_while_others_read_its_arenas) {
  run_stress(fit_policy::best, "", true);
}

TEST(device_heap_stress_test, concurrent_threads_with_a_trace_record_every_event_in_order) {
  // About 80k events: more than one batch of the writer, so flushes race with allocations.
  run_stress(fit_policy::best,
             ::testing::TempDir() + "memweave_stress_" + std::to_string(::getpid()) + ".trace",
             false, 20000);
}

}  // namespace
}  // namespace memweave
