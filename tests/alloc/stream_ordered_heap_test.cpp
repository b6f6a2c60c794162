// stream_ordered_heap: reuse at once on the freeing stream, elsewhere only after the free's
// event completed (or was waited for), over the heap's test device and a hand-driven event.
#include "memweave/alloc/stream_ordered_heap.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/alloc/test_device.hpp"

namespace memweave {
namespace {

/// An event the test completes by hand; synchronize() blocks until then.
struct manual_state {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  void complete() {
    std::lock_guard lock(mu);
    done = true;
    cv.notify_all();
  }
};

class manual_event final : public event {
 public:
  explicit manual_event(std::shared_ptr<manual_state> s) : s_(std::move(s)) {}
  bool query() override {
    std::lock_guard lock(s_->mu);
    return s_->done;
  }
  void synchronize() override {
    std::unique_lock lock(s_->mu);
    s_->cv.wait(lock, [&] { return s_->done; });
  }

 private:
  std::shared_ptr<manual_state> s_;
};

/// An event whose runtime refuses to say whether its work is done (a CUDA graph capture
/// forbids the query and the wait).
class refusing_event final : public event {
 public:
  bool query() override { return false; }
  void synchronize() override { throw wait_refused("the wait is refused (a capture)", 900); }
};

constexpr std::size_t k_mib = std::size_t{1} << 20;
constexpr std::uintptr_t s1 = 0x100, s2 = 0x200;

class stream_ordered_heap_test : public ::testing::Test {
 protected:
  heap_options options(std::size_t pool) {
    heap_options o;
    o.pool_bytes = pool;
    return o;
  }
  // The whole pool in four blocks of 1 MiB freed on s1, pending on one event the test
  // completes.
  std::shared_ptr<manual_state> fill_with_pending_frees() {
    std::vector<void*> blocks;
    for (int i = 0; i < 4; ++i) blocks.push_back(ordered_.try_allocate(k_mib, s1));
    auto st = std::make_shared<manual_state>();
    for (void* p : blocks) {
      EXPECT_NE(p, nullptr);
      EXPECT_EQ(ordered_.deallocate(p, s1, std::make_unique<manual_event>(st)), status::success);
    }
    return st;
  }
  test::test_device dev_{64 * k_mib};
  device_heap heap_{dev_, options(4 * k_mib)};
  stream_ordered_heap ordered_{heap_};
};

TEST_F(stream_ordered_heap_test, a_block_freed_on_a_stream_is_reused_at_once_on_it) {
  void* a = ordered_.try_allocate(k_mib, s1);
  ASSERT_NE(a, nullptr);
  auto st = std::make_shared<manual_state>();
  ASSERT_EQ(ordered_.deallocate(a, s1, std::make_unique<manual_event>(st)), status::success);
  EXPECT_TRUE(ordered_.is_pending(a));
  EXPECT_EQ(ordered_.try_allocate(k_mib, s1), a) << "same stream: no need to wait";
  EXPECT_FALSE(ordered_.is_pending(a));
  EXPECT_EQ(heap_.stats().live_allocations, 1u);
}

TEST_F(stream_ordered_heap_test, another_stream_gets_the_block_only_after_the_event_completed) {
  void* a = ordered_.try_allocate(k_mib, s1);
  auto st = std::make_shared<manual_state>();
  ASSERT_EQ(ordered_.deallocate(a, s1, std::make_unique<manual_event>(st)), status::success);
  void* b = ordered_.try_allocate(k_mib, s2);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(b, a);
  EXPECT_EQ(ordered_.pending().bytes, k_mib);
  st->complete();
  EXPECT_EQ(ordered_.reclaim(), k_mib);
  EXPECT_EQ(ordered_.pending().blocks, 0u);
  EXPECT_EQ(heap_.allocation_size(a), 0u) << "back in the heap";
  ASSERT_EQ(ordered_.deallocate(b, s2, nullptr), status::success);
  heap_.check_invariants();
}

// A destroyed stream's queued work still runs, and a stream made later may get its handle:
// once retired, the blocks freed on it wait for their events, whoever asks.
TEST_F(stream_ordered_heap_test, a_retired_streams_blocks_wait_for_their_events) {
  void* a = ordered_.try_allocate(k_mib, s1);
  void* b = ordered_.try_allocate(k_mib, s1);
  auto st = std::make_shared<manual_state>();
  ASSERT_EQ(ordered_.deallocate(a, s1, std::make_unique<manual_event>(st)), status::success);
  ASSERT_EQ(ordered_.deallocate(b, s1, std::make_unique<manual_event>(st)), status::success);
  ordered_.retire_stream(s1);
  void* c = ordered_.try_allocate(k_mib, s1);  // the handle again: another stream now
  ASSERT_NE(c, nullptr);
  EXPECT_NE(c, a);
  EXPECT_NE(c, b);
  EXPECT_TRUE(ordered_.is_pending(a));
  EXPECT_EQ(ordered_.pending().streams, 1u);
  EXPECT_EQ(ordered_.reclaim(), 0u);
  st->complete();
  EXPECT_EQ(ordered_.reclaim(), 2 * k_mib);
  EXPECT_EQ(ordered_.pending().blocks, 0u);
  ordered_.retire_stream(s2);  // nothing pending there: nothing to do
  ASSERT_EQ(ordered_.deallocate(c, s1, nullptr), status::success);
  EXPECT_EQ(heap_.stats().live_allocations, 0u);
  heap_.check_invariants();
}

TEST_F(stream_ordered_heap_test, reclaim_follows_each_streams_order_and_skips_blocks_taken_back) {
  void* a = ordered_.try_allocate(k_mib, s1);
  void* b = ordered_.try_allocate(k_mib, s1);
  void* c = ordered_.try_allocate(k_mib / 2, s1);
  auto first = std::make_shared<manual_state>();
  auto second = std::make_shared<manual_state>();
  second->complete();
  ASSERT_EQ(ordered_.deallocate(a, s1, std::make_unique<manual_event>(first)), status::success);
  ASSERT_EQ(ordered_.deallocate(b, s1, std::make_unique<manual_event>(second)), status::success);
  // A stream's events complete in order: b's cannot be seen before a's.
  EXPECT_EQ(ordered_.reclaim(), 0u);
  first->complete();
  EXPECT_EQ(ordered_.reclaim(), 2 * k_mib);
  // A block the stream took back leaves a stale entry that reclaim passes over.
  auto third = std::make_shared<manual_state>();
  ASSERT_EQ(ordered_.deallocate(c, s1, std::make_unique<manual_event>(third)), status::success);
  EXPECT_EQ(ordered_.try_allocate(k_mib / 2, s1), c);
  auto fourth = std::make_shared<manual_state>();
  fourth->complete();
  ASSERT_EQ(ordered_.deallocate(c, s1, std::make_unique<manual_event>(fourth)), status::success);
  EXPECT_EQ(ordered_.reclaim(), k_mib / 2);
  EXPECT_EQ(ordered_.pending().blocks, 0u);
  EXPECT_EQ(heap_.stats().live_allocations, 0u);
  heap_.check_invariants();
}

TEST_F(stream_ordered_heap_test, a_full_pool_waits_for_pending_frees_before_failing) {
  const auto st = fill_with_pending_frees();
  EXPECT_EQ(ordered_.try_allocate(2 * k_mib, s2, /*wait=*/false), nullptr);
  std::thread completer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    st->complete();
  });
  void* big = ordered_.try_allocate(2 * k_mib, s2);
  completer.join();
  ASSERT_NE(big, nullptr) << "the pending frees were not waited for";
  EXPECT_EQ(ordered_.pending().blocks, 0u);
  EXPECT_EQ(ordered_.try_allocate(4 * k_mib, s2), nullptr) << "nothing pending: fails at once";
  EXPECT_NE(ordered_.describe_failure(4 * k_mib).find("largest free run"), std::string::npos);
  ASSERT_EQ(ordered_.deallocate(big, s2, nullptr), status::success);
}

// A pending free whose wait the runtime refuses (a capture) is not known to be done: rather
// than hand out a block its stream may still use, the heap keeps it out of use.
TEST_F(stream_ordered_heap_test, a_block_whose_wait_is_refused_is_never_handed_out) {
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(ordered_.try_allocate(k_mib, s1));
  for (void* p : blocks) {
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(ordered_.deallocate(p, s1, std::make_unique<refusing_event>()), status::success);
  }
  EXPECT_EQ(ordered_.try_allocate(k_mib, s2), nullptr)
      << "a block whose free may still be running was handed to another stream";
  EXPECT_EQ(ordered_.pending().blocks, 0u);
  EXPECT_EQ(heap_.stats().bytes_in_use, 4 * k_mib) << "the blocks are kept, not freed";
  heap_.check_invariants();
}

// Two threads short of memory at once: the second finds nothing pending (the first's drain
// took every block out to wait for its event) and waits for those blocks to come back rather
// than failing for memory that was on its way (it got nullptr: a spurious out-of-memory).
TEST_F(stream_ordered_heap_test, an_allocation_waits_for_blocks_another_threads_drain_returns) {
  const auto st = fill_with_pending_frees();
  void* first = nullptr;
  std::thread draining([&] { first = ordered_.try_allocate(2 * k_mib, s2); });
  // The drain has taken every block out of the lists and waits for their event.
  while (ordered_.pending().blocks != 0) std::this_thread::yield();
  void* second = nullptr;
  std::thread short_too([&] { second = ordered_.try_allocate(2 * k_mib, s2); });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  st->complete();
  draining.join();
  short_too.join();
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr) << "failed for memory another thread's drain was returning";
  EXPECT_NE(first, second);
  ASSERT_EQ(ordered_.deallocate(first, s2, nullptr), status::success);
  ASSERT_EQ(ordered_.deallocate(second, s2, nullptr), status::success);
}

TEST_F(stream_ordered_heap_test, double_and_foreign_frees_are_refused_without_change) {
  void* a = ordered_.try_allocate(k_mib, s1);
  auto st = std::make_shared<manual_state>();
  ASSERT_EQ(ordered_.deallocate(a, s1, std::make_unique<manual_event>(st)), status::success);
  std::string why;
  EXPECT_EQ(ordered_.deallocate(a, s1, nullptr, &why), status::invalid_device_pointer);
  EXPECT_NE(why.find("pending"), std::string::npos) << why;
  int x = 0;
  EXPECT_EQ(ordered_.deallocate(&x, s1, nullptr, &why), status::invalid_device_pointer);
  EXPECT_EQ(ordered_.pending().blocks, 1u);
  st->complete();
  EXPECT_EQ(ordered_.drain(), k_mib);
  heap_.check_invariants();
}

TEST_F(stream_ordered_heap_test, no_reuse_stream_never_takes_a_pending_block) {
  void* a = ordered_.try_allocate(k_mib, s1);
  auto st = std::make_shared<manual_state>();
  ASSERT_EQ(ordered_.deallocate(a, stream_ordered_heap::no_reuse_stream,
                                std::make_unique<manual_event>(st)),
            status::success);
  void* b = ordered_.try_allocate(k_mib, stream_ordered_heap::no_reuse_stream);
  EXPECT_NE(b, a);
  st->complete();
  ASSERT_EQ(ordered_.deallocate(b, s1, nullptr), status::success);
}

TEST_F(stream_ordered_heap_test, threads_on_their_own_streams_never_share_a_live_block) {
  // Each thread fills its block with its own byte and checks it before freeing: a block
  // handed to two threads at once shows up as a foreign byte.
  std::atomic<int> overlaps{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const std::uintptr_t s = 0x1000 + static_cast<std::uintptr_t>(t);
      const auto mark = static_cast<unsigned char>(t + 1);
      for (int i = 0; i < 2000; ++i) {
        const std::size_t n = 1024u << (i % 6);
        auto* p = static_cast<unsigned char*>(ordered_.try_allocate(n, s));
        if (p == nullptr) continue;
        std::memset(p, mark, n);
        std::this_thread::yield();
        for (std::size_t k = 0; k < n; k += 97) {
          if (p[k] != mark) {
            overlaps.fetch_add(1);
            break;
          }
        }
        auto st = std::make_shared<manual_state>();
        if (i % 3 != 0) st->complete();
        ASSERT_EQ(ordered_.deallocate(p, s, std::make_unique<manual_event>(st)), status::success);
        if (i % 3 == 0) st->complete();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(overlaps.load(), 0);
  ordered_.drain();
  EXPECT_EQ(heap_.stats().live_allocations, 0u);
  heap_.check_invariants();
}

}  // namespace
}  // namespace memweave
