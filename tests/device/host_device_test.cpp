// The host backend: stream order, events, cross-stream waits, copies, the link throttle,
// real overlap of a throttled copy with compute, capacity, failures and destruction.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <numeric>
#include <thread>
#include <vector>

#include "memweave/core/error.hpp"
#include "memweave/device/device.hpp"

namespace memweave {
namespace {

using clock_type = std::chrono::steady_clock;

std::unique_ptr<device> make_host(std::size_t capacity = 64ull << 20, double gbps = 0.0) {
  device_options o;
  o.kind = "host";
  o.capacity_bytes = capacity;
  o.host_link_gbps = gbps;
  return make_device(o);
}

class host_device_test : public ::testing::Test {
 protected:
  std::unique_ptr<device> dev_ = make_host();
  stream& compute_ = dev_->get_stream(stream_role::compute);
  stream& h2d_ = dev_->get_stream(stream_role::host_to_device);
  stream& d2h_ = dev_->get_stream(stream_role::device_to_host);
};

TEST_F(host_device_test, reports_its_kind_name_and_capacity) {
  EXPECT_EQ(dev_->kind(), device_kind::host);
  EXPECT_TRUE(dev_->touches_memory());
  EXPECT_NE(dev_->name().find("host"), std::string::npos);
  EXPECT_EQ(dev_->memory().total_bytes, 64ull << 20);
  EXPECT_EQ(dev_->memory().free_bytes, 64ull << 20);
  EXPECT_EQ(compute_.role(), stream_role::compute);
  EXPECT_EQ(h2d_.role(), stream_role::host_to_device);
  EXPECT_EQ(d2h_.role(), stream_role::device_to_host);
  EXPECT_EQ(compute_.native_handle(), nullptr);
}

TEST_F(host_device_test, launches_run_in_order_on_one_stream) {
  std::vector<int> seen;  // touched only by the compute worker until synchronize()
  constexpr int n = 5000;
  for (int i = 0; i < n; ++i) compute_.launch([&seen, i] { seen.push_back(i); });
  compute_.synchronize();
  ASSERT_EQ(seen.size(), static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) ASSERT_EQ(seen[i], i);
}

TEST_F(host_device_test, launches_from_several_threads_all_run) {
  std::atomic<int> ran{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) compute_.launch([&ran] { ran.fetch_add(1); });
    });
  }
  for (auto& t : threads) t.join();
  compute_.synchronize();
  EXPECT_EQ(ran.load(), 2000);
}

TEST_F(host_device_test, work_runs_off_the_calling_thread) {
  std::thread::id worker;
  compute_.launch([&worker] { worker = std::this_thread::get_id(); });
  compute_.synchronize();
  EXPECT_NE(worker, std::this_thread::get_id());
}

TEST_F(host_device_test, event_completes_after_the_work_before_it) {
  auto e = dev_->create_event();
  EXPECT_TRUE(e->query()) << "an event never recorded is complete";
  std::promise<void> gate;
  auto opened = gate.get_future().share();
  std::atomic<bool> ran{false};
  compute_.launch([opened, &ran] {
    opened.wait();
    ran = true;
  });
  compute_.record(*e);
  EXPECT_FALSE(e->query());
  gate.set_value();
  e->synchronize();
  EXPECT_TRUE(ran.load());
  EXPECT_TRUE(e->query());
}

TEST_F(host_device_test, event_can_be_recorded_again) {
  auto e = dev_->create_event();
  compute_.record(*e);
  e->synchronize();
  ASSERT_TRUE(e->query());

  std::promise<void> gate;
  auto opened = gate.get_future().share();
  compute_.launch([opened] { opened.wait(); });
  compute_.record(*e);
  EXPECT_FALSE(e->query()) << "re-recorded behind blocked work";
  gate.set_value();
  e->synchronize();
  EXPECT_TRUE(e->query());
}

TEST_F(host_device_test, wait_holds_later_work_until_the_event_completes) {
  auto e = dev_->create_event();
  std::promise<void> gate;
  auto opened = gate.get_future().share();
  h2d_.launch([opened] { opened.wait(); });
  h2d_.record(*e);
  compute_.wait(*e);
  std::atomic<bool> ran{false};
  compute_.launch([&ran] { ran = true; });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_FALSE(ran.load()) << "compute ran before the event it waits for";
  gate.set_value();
  compute_.synchronize();
  EXPECT_TRUE(ran.load());
}

// As CUDA's: a wait is for the record it saw. The event recorded again on an idle stream
// completes that later record at once, which must not release the wait on the earlier one,
// still behind blocked work (the executor records one event on compute, has copies wait for
// it, then records it on the copy stream: `memweave eval` under utp overwrote the labels
// before the loss read them).
TEST_F(host_device_test, a_wait_is_for_its_own_record_not_a_later_one_on_another_stream) {
  auto e = dev_->create_event();
  std::promise<void> gate;
  auto opened = gate.get_future().share();
  std::atomic<bool> compute_done{false};
  compute_.launch([opened, &compute_done] {
    opened.wait();
    compute_done = true;
  });
  compute_.record(*e);
  h2d_.wait(*e);
  std::atomic<bool> saw_compute_done{false}, ran{false};
  h2d_.launch([&] {
    saw_compute_done = compute_done.load();
    ran = true;
  });
  d2h_.record(*e);  // an idle stream: this record completes at once
  d2h_.synchronize();
  EXPECT_TRUE(e->query()) << "the latest record has completed";
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_FALSE(ran.load()) << "the copy stream ran before the record it waits for";
  gate.set_value();
  h2d_.synchronize();
  EXPECT_TRUE(ran.load());
  EXPECT_TRUE(saw_compute_done.load());
}

TEST_F(host_device_test, wait_on_an_event_never_recorded_does_not_block) {
  auto e = dev_->create_event();
  compute_.wait(*e);
  std::atomic<bool> ran{false};
  compute_.launch([&ran] { ran = true; });
  compute_.synchronize();
  EXPECT_TRUE(ran.load());
}

TEST_F(host_device_test, compute_waiting_for_a_copy_sees_the_copied_data) {
  auto throttled = make_host(64ull << 20, 0.05);  // 1 MiB at 0.05 GB/s: about 21 ms
  stream& h2d = throttled->get_stream(stream_role::host_to_device);
  stream& compute = throttled->get_stream(stream_role::compute);
  constexpr std::size_t n = 1 << 20;
  auto* host = static_cast<unsigned char*>(throttled->allocate_pinned(n));
  auto* dev = static_cast<unsigned char*>(throttled->allocate(n));
  std::memset(dev, 0, n);
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<unsigned char>(i * 7 + 3);

  auto copied = throttled->create_event();
  h2d.copy_async(dev, host, n, copy_kind::host_to_device);
  h2d.record(*copied);
  compute.wait(*copied);
  std::atomic<std::size_t> mismatches{n};
  compute.launch([&] {
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad += dev[i] != static_cast<unsigned char>(i * 7 + 3);
    mismatches = bad;
  });
  compute.synchronize();
  EXPECT_EQ(mismatches.load(), 0u);
  throttled->deallocate(dev, n);
  throttled->deallocate_pinned(host, n);
}

TEST_F(host_device_test, copies_of_every_kind_are_correct) {
  constexpr std::size_t n = 3 * 4096 + 17;
  auto* src = static_cast<unsigned char*>(dev_->allocate_pinned(n));
  auto* back = static_cast<unsigned char*>(dev_->allocate_pinned(n));
  auto* other = static_cast<unsigned char*>(dev_->allocate_pinned(n));
  auto* d1 = static_cast<unsigned char*>(dev_->allocate(n));
  auto* d2 = static_cast<unsigned char*>(dev_->allocate(n));
  for (std::size_t i = 0; i < n; ++i) src[i] = static_cast<unsigned char>(i % 251);
  std::memset(back, 0, n);
  std::memset(other, 0, n);

  auto e = dev_->create_event();
  h2d_.copy_async(d1, src, n, copy_kind::host_to_device);
  h2d_.record(*e);
  compute_.wait(*e);
  compute_.copy_async(d2, d1, n, copy_kind::device_to_device);
  compute_.record(*e);
  d2h_.wait(*e);
  d2h_.copy_async(back, d2, n, copy_kind::device_to_host);
  d2h_.copy_async(other, back, n, copy_kind::host_to_host);
  dev_->synchronize();

  EXPECT_EQ(std::memcmp(d1, src, n), 0);
  EXPECT_EQ(std::memcmp(d2, src, n), 0);
  EXPECT_EQ(std::memcmp(back, src, n), 0);
  EXPECT_EQ(std::memcmp(other, src, n), 0);
  dev_->deallocate(d2, n);
  dev_->deallocate(d1, n);
  dev_->deallocate_pinned(other, n);
  dev_->deallocate_pinned(back, n);
  dev_->deallocate_pinned(src, n);
}

TEST_F(host_device_test, copy_with_a_null_pointer_is_rejected) {
  char buf[8] = {};
  EXPECT_THROW(h2d_.copy_async(nullptr, buf, 8, copy_kind::host_to_device), invalid_argument);
  h2d_.copy_async(nullptr, nullptr, 0, copy_kind::host_to_device);  // 0 bytes: a no-op
  h2d_.synchronize();
}

TEST(host_device_link, throttled_copies_take_at_least_bytes_over_bandwidth) {
  constexpr std::size_t n = 2 << 20;
  constexpr double gbps = 0.05;  // 2 MiB -> about 42 ms each way
  auto dev = make_host(64ull << 20, gbps);
  void* host = dev->allocate_pinned(n);
  void* d = dev->allocate(n);
  const double floor_s = static_cast<double>(n) / (gbps * 1e9);
  for (auto [role, kind] : {std::pair{stream_role::host_to_device, copy_kind::host_to_device},
                            std::pair{stream_role::device_to_host, copy_kind::device_to_host}}) {
    stream& s = dev->get_stream(role);
    const auto start = clock_type::now();
    if (kind == copy_kind::host_to_device) {
      s.copy_async(d, host, n, kind);
    } else {
      s.copy_async(host, d, n, kind);
    }
    s.synchronize();
    const double took = std::chrono::duration<double>(clock_type::now() - start).count();
    EXPECT_GE(took, floor_s) << to_string(kind);
  }
  dev->deallocate(d, n);
  dev->deallocate_pinned(host, n);
}

TEST(host_device_link, device_to_device_copies_are_not_throttled_by_the_link) {
  constexpr std::size_t n = 1 << 20;
  auto dev = make_host(64ull << 20, 0.0001);  // the link would need 10 s for 1 MiB
  void* a = dev->allocate(n);
  void* b = dev->allocate(n);
  stream& s = dev->get_stream(stream_role::compute);
  const auto start = clock_type::now();
  s.copy_async(b, a, n, copy_kind::device_to_device);
  s.synchronize();
  const double took = std::chrono::duration<double>(clock_type::now() - start).count();
  EXPECT_LT(took, 5.0) << "a device-to-device copy went through the simulated link";
  dev->deallocate(b, n);
  dev->deallocate(a, n);
}

TEST(host_device_link, compute_overlaps_a_copy_in_flight) {
  constexpr std::size_t n = 4 << 20;
  constexpr double gbps = 0.01;  // 4 MiB -> about 420 ms on the link
  auto dev = make_host(64ull << 20, gbps);
  void* host = dev->allocate_pinned(n);
  void* d = dev->allocate(n);
  stream& h2d = dev->get_stream(stream_role::host_to_device);
  stream& compute = dev->get_stream(stream_role::compute);
  auto copy_done = dev->create_event();
  auto compute_done = dev->create_event();

  h2d.copy_async(d, host, n, copy_kind::host_to_device);
  h2d.record(*copy_done);
  std::atomic<long> sum{0};
  compute.launch([&sum] {
    long s = 0;
    for (int i = 0; i < 1000; ++i) s += i;
    sum = s;
  });
  compute.record(*compute_done);

  compute_done->synchronize();
  EXPECT_EQ(sum.load(), 499500);
  EXPECT_FALSE(copy_done->query()) << "compute did not overlap the copy in flight";
  copy_done->synchronize();
  EXPECT_TRUE(copy_done->query());
  dev->deallocate(d, n);
  dev->deallocate_pinned(host, n);
}

// Copies over the link from two streams in the same direction share it, one after the
// other (one copy engine a direction, as the null device models it): together they take at
// least twice as long as one alone. Each stream throttling on its own took half that.
TEST(host_device_link, streams_share_each_direction_of_the_link) {
  constexpr std::size_t n = 2 << 20;
  constexpr double gbps = 0.05;  // 2 MiB -> about 42 ms
  auto dev = make_host(64ull << 20, gbps);
  void* host = dev->allocate_pinned(2 * n);
  void* d = dev->allocate(2 * n);
  const double floor_s = static_cast<double>(n) / (gbps * 1e9);
  stream& h2d = dev->get_stream(stream_role::host_to_device);
  stream& compute = dev->get_stream(stream_role::compute);
  const auto start = clock_type::now();
  h2d.copy_async(d, host, n, copy_kind::host_to_device);
  compute.copy_async(static_cast<char*>(d) + n, static_cast<char*>(host) + n, n,
                     copy_kind::host_to_device);
  h2d.synchronize();
  compute.synchronize();
  const double took = std::chrono::duration<double>(clock_type::now() - start).count();
  EXPECT_GE(took, 2 * floor_s)
      << "two streams' copies to the device moved at twice the link's rate";
  dev->deallocate(d, 2 * n);
  dev->deallocate_pinned(host, 2 * n);
}

// The two directions are two copy engines: a copy in and a copy out at once take about as long
// as one (the bound is generous: sleeping threads on a loaded machine wake late).
TEST(host_device_link, the_two_directions_do_not_wait_for_each_other) {
  constexpr std::size_t n = 4 << 20;
  constexpr double gbps = 0.01;  // 4 MiB -> about 420 ms
  auto dev = make_host(64ull << 20, gbps);
  void* host = dev->allocate_pinned(2 * n);
  void* d = dev->allocate(2 * n);
  const double floor_s = static_cast<double>(n) / (gbps * 1e9);
  stream& h2d = dev->get_stream(stream_role::host_to_device);
  stream& d2h = dev->get_stream(stream_role::device_to_host);
  const auto start = clock_type::now();
  h2d.copy_async(d, host, n, copy_kind::host_to_device);
  d2h.copy_async(static_cast<char*>(host) + n, static_cast<char*>(d) + n, n,
                 copy_kind::device_to_host);
  h2d.synchronize();
  d2h.synchronize();
  const double took = std::chrono::duration<double>(clock_type::now() - start).count();
  EXPECT_GE(took, floor_s);
  EXPECT_LT(took, 1.75 * floor_s) << "a copy in waited for a copy out";
  dev->deallocate(d, 2 * n);
  dev->deallocate_pinned(host, 2 * n);
}

// Work that moves bytes over the link itself (a staged split step copying its micro-tensors)
// runs, and lasts no less than its bytes take on the link, shared with the copies of the other
// streams in the same direction.
TEST(host_device_link, work_with_link_bytes_holds_the_link_while_it_runs) {
  constexpr std::size_t n = 2 << 20;
  constexpr double gbps = 0.05;  // 2 MiB -> about 42 ms
  auto dev = make_host(64ull << 20, gbps);
  const double floor_s = static_cast<double>(n) / (gbps * 1e9);
  stream& compute = dev->get_stream(stream_role::compute);
  std::atomic<int> ran{0};
  auto start = clock_type::now();
  compute.launch_with_link([&ran] { ++ran; }, 0.0, 0, n);
  compute.synchronize();
  double took = std::chrono::duration<double>(clock_type::now() - start).count();
  EXPECT_EQ(ran.load(), 1);
  EXPECT_GE(took, floor_s) << "the work's copies out did not take the link's time";

  void* host = dev->allocate_pinned(n);
  void* d = dev->allocate(n);
  stream& h2d = dev->get_stream(stream_role::host_to_device);
  start = clock_type::now();
  h2d.copy_async(d, host, n, copy_kind::host_to_device);
  compute.launch_with_link([&ran] { ++ran; }, 0.0, n, 0);
  h2d.synchronize();
  compute.synchronize();
  took = std::chrono::duration<double>(clock_type::now() - start).count();
  EXPECT_EQ(ran.load(), 2);
  EXPECT_GE(took, 2 * floor_s) << "the work's copies in and a prefetch shared no link";
  dev->deallocate(d, n);
  dev->deallocate_pinned(host, n);

  // Without a link speed the work just runs.
  auto free_link = make_host();
  free_link->get_stream(stream_role::compute).launch_with_link([&ran] { ++ran; }, 0.0, n, n);
  free_link->get_stream(stream_role::compute).synchronize();
  EXPECT_EQ(ran.load(), 3);
}

TEST_F(host_device_test, capacity_is_enforced_with_out_of_memory) {
  const std::size_t cap = dev_->memory().total_bytes;
  void* a = dev_->allocate(cap / 2);
  void* b = dev_->allocate(cap / 4);
  EXPECT_EQ(dev_->memory().free_bytes, cap - cap / 2 - cap / 4);
  try {
    dev_->allocate(cap / 2);
    FAIL() << "allocation past the capacity succeeded";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.requested(), cap / 2);
    EXPECT_EQ(e.free_bytes(), cap / 4);
    EXPECT_NE(std::string(e.what()).find("MEMWEAVE_DEVICE_BYTES"), std::string::npos) << e.what();
  }
  dev_->deallocate(a, cap / 2);
  void* c = dev_->allocate(cap / 2);  // fits again
  EXPECT_NE(c, nullptr);
  dev_->deallocate(c, cap / 2);
  dev_->deallocate(b, cap / 4);
  EXPECT_EQ(dev_->memory().free_bytes, cap);
}

TEST_F(host_device_test, device_memory_is_usable_and_page_aligned) {
  constexpr std::size_t n = 1 << 20;
  auto* p = static_cast<unsigned char*>(dev_->allocate(n));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 4096, 0u);
  std::memset(p, 0xab, n);
  EXPECT_EQ(p[n - 1], 0xab);
  dev_->deallocate(p, n);
  EXPECT_EQ(dev_->allocate(0), nullptr);
  dev_->deallocate(nullptr, 0);
}

TEST_F(host_device_test, foreign_pointer_free_is_ignored) {
  int local = 0;
  dev_->deallocate(&local, sizeof local);  // logged, not a crash
  EXPECT_EQ(dev_->memory().free_bytes, dev_->memory().total_bytes);
}

TEST_F(host_device_test, throwing_work_fails_the_stream_but_later_events_complete) {
  auto before = dev_->create_event();
  auto after = dev_->create_event();
  compute_.record(*before);
  compute_.launch([] { throw std::runtime_error("boom in a kernel"); });
  std::atomic<bool> later_ran{false};
  compute_.launch([&later_ran] { later_ran = true; });
  compute_.record(*after);

  try {
    compute_.synchronize();
    FAIL() << "synchronize did not report the failure";
  } catch (const device_error& e) {
    EXPECT_NE(std::string(e.what()).find("boom in a kernel"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(later_ran.load()) << "the queue stopped after the failure";
  EXPECT_TRUE(after->query());
  EXPECT_NO_THROW(before->synchronize()) << "an event recorded before the failure";
  try {
    after->synchronize();
    FAIL() << "an event recorded after the failure did not report it";
  } catch (const device_error& e) {
    EXPECT_NE(std::string(e.what()).find("boom in a kernel"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dev_->synchronize(), device_error);
  // The other streams are unaffected.
  EXPECT_NO_THROW(h2d_.synchronize());
}

TEST_F(host_device_test, only_the_first_failure_is_kept) {
  compute_.launch([] { throw std::runtime_error("first"); });
  compute_.launch([] { throw 42; });
  try {
    compute_.synchronize();
    FAIL();
  } catch (const device_error& e) {
    EXPECT_NE(std::string(e.what()).find("first"), std::string::npos) << e.what();
  }
}

TEST_F(host_device_test, synchronize_from_own_worker_is_rejected) {
  std::atomic<bool> rejected{false};
  compute_.launch([&] {
    try {
      compute_.synchronize();
    } catch (const invalid_argument&) {
      rejected = true;
    }
  });
  compute_.synchronize();
  EXPECT_TRUE(rejected.load());
}

TEST_F(host_device_test, empty_work_is_rejected) {
  EXPECT_THROW(compute_.launch(std::function<void()>{}), invalid_argument);
}

TEST_F(host_device_test, event_of_another_backend_is_rejected) {
  device_options o;
  o.kind = "null";
  o.capacity_bytes = 1 << 20;
  auto null_dev = make_device(o);
  auto foreign = null_dev->create_event();
  EXPECT_THROW(compute_.record(*foreign), invalid_argument);
  EXPECT_THROW(compute_.wait(*foreign), invalid_argument);
}

TEST(host_device_lifetime, destruction_runs_pending_work_first) {
  std::atomic<int> ran{0};
  {
    auto dev = make_host(1 << 20, 0.001);
    stream& compute = dev->get_stream(stream_role::compute);
    stream& h2d = dev->get_stream(stream_role::host_to_device);
    void* d = dev->allocate(4096);
    void* h = dev->allocate_pinned(4096);
    auto e = dev->create_event();
    h2d.copy_async(d, h, 4096, copy_kind::host_to_device);  // about 4 ms on the link
    h2d.record(*e);
    compute.wait(*e);
    for (int i = 0; i < 200; ++i) compute.launch([&ran] { ran.fetch_add(1); });
    // dev and e go out of scope with all of that still queued; memory is left allocated.
  }
  EXPECT_EQ(ran.load(), 200);
}

TEST(host_device_lifetime, event_may_die_before_its_record_runs) {
  auto dev = make_host();
  stream& compute = dev->get_stream(stream_role::compute);
  std::promise<void> gate;
  auto opened = gate.get_future().share();
  compute.launch([opened] { opened.wait(); });
  {
    auto e = dev->create_event();
    compute.record(*e);
    dev->get_stream(stream_role::device_to_host).wait(*e);
  }
  gate.set_value();
  dev->synchronize();
}

}  // namespace
}  // namespace memweave
