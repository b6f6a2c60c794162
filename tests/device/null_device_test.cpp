// The null (planning) backend: nothing runs, addresses are real and unique, capacity is
// enforced, each stream keeps a simulated clock, pinned memory is real.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include "device/null/link_timeline.hpp"
#include "device/null/null_device.hpp"
#include "memweave/core/error.hpp"
#include "memweave/device/device.hpp"

namespace memweave {
namespace {

std::unique_ptr<device> make_null(std::size_t capacity = 1ull << 30, double gbps = 0.0) {
  device_options o;
  o.kind = "null";
  o.capacity_bytes = capacity;
  o.host_link_gbps = gbps;
  return make_device(o);
}

class null_device_test : public ::testing::Test {
 protected:
  std::unique_ptr<device> dev_ = make_null();
  stream& compute_ = dev_->get_stream(stream_role::compute);
  stream& h2d_ = dev_->get_stream(stream_role::host_to_device);
  stream& d2h_ = dev_->get_stream(stream_role::device_to_host);
};

TEST_F(null_device_test, reports_kind_and_touches_no_memory) {
  EXPECT_EQ(dev_->kind(), device_kind::null);
  EXPECT_FALSE(dev_->touches_memory());
  EXPECT_NE(dev_->name().find("null"), std::string::npos);
  EXPECT_EQ(dev_->memory().total_bytes, 1ull << 30);
  EXPECT_EQ(dev_->memory().free_bytes, 1ull << 30);
}

TEST_F(null_device_test, launched_work_never_runs) {
  bool ran = false;
  compute_.launch([&ran] { ran = true; }, 0.001);
  compute_.launch([] { throw std::runtime_error("never thrown"); });
  compute_.synchronize();
  dev_->synchronize();
  EXPECT_FALSE(ran);
}

TEST_F(null_device_test, addresses_are_unique_and_do_not_overlap) {
  std::vector<std::pair<char*, std::size_t>> regions;
  for (std::size_t i = 1; i <= 100; ++i) {
    const std::size_t bytes = i * 4099;
    regions.emplace_back(static_cast<char*>(dev_->allocate(bytes)), bytes);
    ASSERT_NE(regions.back().first, nullptr);
  }
  std::sort(regions.begin(), regions.end());
  for (std::size_t i = 1; i < regions.size(); ++i) {
    EXPECT_LE(regions[i - 1].first + regions[i - 1].second, regions[i].first)
        << "regions " << i - 1 << " and " << i << " overlap";
  }
  for (auto [p, bytes] : regions) dev_->deallocate(p, bytes);
  EXPECT_EQ(dev_->memory().free_bytes, dev_->memory().total_bytes);
}

TEST(null_device_memory, plans_devices_larger_than_the_machine) {
  auto dev = make_null(64ull << 30);
  void* a = dev->allocate(40ull << 30);  // address space only
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(dev->memory().free_bytes, 24ull << 30);
  dev->deallocate(a, 40ull << 30);
}

TEST_F(null_device_test, capacity_is_enforced_with_out_of_memory) {
  const std::size_t cap = dev_->memory().total_bytes;
  void* a = dev_->allocate(cap - 4096);
  try {
    dev_->allocate(8192);
    FAIL() << "allocation past the capacity succeeded";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.requested(), 8192u);
    EXPECT_EQ(e.free_bytes(), 4096u);
  }
  void* b = dev_->allocate(4096);  // exactly what is left
  EXPECT_EQ(dev_->memory().free_bytes, 0u);
  dev_->deallocate(b, 4096);
  dev_->deallocate(a, cap - 4096);
}

TEST_F(null_device_test, pinned_memory_is_real_and_writable) {
  constexpr std::size_t n = 64ull << 20;
  auto* p = static_cast<unsigned char*>(dev_->allocate_pinned(n));
  ASSERT_NE(p, nullptr);
  std::memset(p, 0x5a, 1 << 20);  // a jemalloc arena writes its metadata at the start
  p[n - 1] = 7;
  EXPECT_EQ(p[0], 0x5a);
  EXPECT_EQ(p[(1 << 20) - 1], 0x5a);
  EXPECT_EQ(p[n - 1], 7);
  dev_->deallocate_pinned(p, n);
}

TEST_F(null_device_test, launch_costs_advance_the_stream_clock) {
  EXPECT_EQ(compute_.simulated_time_s(), 0.0);
  compute_.launch([] {}, 0.25);
  compute_.launch([] {}, 0.5);
  compute_.launch([] {});  // no cost given
  EXPECT_DOUBLE_EQ(compute_.simulated_time_s(), 0.75);
  EXPECT_EQ(h2d_.simulated_time_s(), 0.0) << "streams keep separate clocks";
}

TEST_F(null_device_test, bad_launch_cost_is_rejected) {
  EXPECT_THROW(compute_.launch([] {}, -1.0), invalid_argument);
  EXPECT_THROW(compute_.launch([] {}, std::numeric_limits<double>::infinity()), invalid_argument);
}

TEST_F(null_device_test, copies_cost_bytes_over_their_rate) {
  const double gb = 1e9;
  // Addresses are never dereferenced: the sizes alone matter.
  void* d = dev_->allocate(4096);
  h2d_.copy_async(d, nullptr, static_cast<std::size_t>(1.6 * gb), copy_kind::host_to_device);
  EXPECT_NEAR(h2d_.simulated_time_s(), 1.6 / null_backend::k_default_link_gbps, 1e-12);
  d2h_.copy_async(nullptr, d, static_cast<std::size_t>(3.2 * gb), copy_kind::device_to_host);
  EXPECT_NEAR(d2h_.simulated_time_s(), 3.2 / null_backend::k_default_link_gbps, 1e-12);
  compute_.copy_async(d, d, static_cast<std::size_t>(4.5 * gb), copy_kind::device_to_device);
  EXPECT_NEAR(compute_.simulated_time_s(), 4.5 / null_backend::k_device_copy_gbps, 1e-12);
  compute_.copy_async(nullptr, nullptr, static_cast<std::size_t>(gb), copy_kind::host_to_host);
  EXPECT_NEAR(compute_.simulated_time_s(),
              4.5 / null_backend::k_device_copy_gbps + 1.0 / null_backend::k_host_copy_gbps, 1e-12);
  dev_->deallocate(d, 4096);
}

TEST(null_device_clock, host_link_gbps_sets_the_copy_rate) {
  auto dev = make_null(1 << 20, 8.0);
  stream& h2d = dev->get_stream(stream_role::host_to_device);
  h2d.copy_async(nullptr, nullptr, 4'000'000'000ull, copy_kind::host_to_device);
  EXPECT_NEAR(h2d.simulated_time_s(), 0.5, 1e-12);
}

TEST(null_link_timeline, a_copy_on_a_free_link_takes_its_own_time) {
  null_backend::link_timeline link;
  EXPECT_DOUBLE_EQ(link.reserve(1.0, 0.5), 1.5);
  EXPECT_DOUBLE_EQ(link.reserve(3.0, 0.25), 3.25);
  EXPECT_DOUBLE_EQ(link.reserve(2.0, 0.0), 2.0) << "nothing to move: done when ready";
  EXPECT_EQ(link.intervals(), 2u);
}

TEST(null_link_timeline, overlapping_copies_share_the_link_in_its_gaps) {
  null_backend::link_timeline link;
  ASSERT_DOUBLE_EQ(link.reserve(1.0, 1.0), 2.0);  // [1, 2)
  ASSERT_DOUBLE_EQ(link.reserve(3.0, 1.0), 4.0);  // [3, 4)
  // From 0: [0, 1), then [2, 3), then [4, 4.5): the first two keep their times.
  EXPECT_DOUBLE_EQ(link.reserve(0.0, 2.5), 4.5);
  EXPECT_EQ(link.intervals(), 1u) << "[0, 4.5) is one busy interval";
  // Ready inside a busy interval: starts at its end.
  EXPECT_DOUBLE_EQ(link.reserve(2.0, 1.0), 5.5);
  // A gap that fits exactly, and the interval after it joins.
  ASSERT_DOUBLE_EQ(link.reserve(7.0, 1.0), 8.0);
  EXPECT_DOUBLE_EQ(link.reserve(5.5, 1.5), 7.0);
  EXPECT_EQ(link.intervals(), 1u);
  EXPECT_DOUBLE_EQ(link.reserve(0.0, 1.0), 9.0);
}

TEST(null_link_timeline, a_copy_too_short_for_the_clock_s_precision_ends) {
  // At t = 1000 s, 1e-18 s is below a double's resolution: the copy must still end (it once
  // walked past the last interval), done where it starts.
  null_backend::link_timeline link;
  ASSERT_DOUBLE_EQ(link.reserve(999.0, 1.0), 1000.0);
  EXPECT_DOUBLE_EQ(link.reserve(1000.0, 1e-18), 1000.0);
  EXPECT_DOUBLE_EQ(link.reserve(2000.0, 1e-18), 2000.0);
  EXPECT_DOUBLE_EQ(link.reserve(500.0, 1.0), 501.0);
}

TEST(null_link_timeline, forgets_what_ended_before_a_time) {
  null_backend::link_timeline link;
  link.reserve(0.0, 1.0);
  link.reserve(2.0, 1.0);
  link.reserve(4.0, 1.0);
  link.forget_before(3.0);
  EXPECT_EQ(link.intervals(), 1u);
  EXPECT_DOUBLE_EQ(link.reserve(3.5, 1.0), 5.5) << "[4, 5) still held";
}

TEST_F(null_device_test, streams_share_each_direction_of_the_link) {
  const std::size_t bytes = 1'600'000'000;  // 0.1 s at 16 GB/s
  h2d_.copy_async(nullptr, nullptr, bytes, copy_kind::host_to_device);
  // The compute stream's copy in the same direction, also ready at 0, waits for the link;
  // the other direction is free.
  compute_.copy_async(nullptr, nullptr, bytes, copy_kind::host_to_device);
  d2h_.copy_async(nullptr, nullptr, bytes, copy_kind::device_to_host);
  EXPECT_NEAR(h2d_.simulated_time_s(), 0.1, 1e-12);
  EXPECT_NEAR(compute_.simulated_time_s(), 0.2, 1e-12);
  EXPECT_NEAR(d2h_.simulated_time_s(), 0.1, 1e-12);
}

TEST_F(null_device_test, work_that_moves_bytes_is_delayed_by_the_link_s_other_traffic) {
  const std::size_t tenth = 1'600'000'000;  // 0.1 s at 16 GB/s
  // On a free link its copies fit in its own time.
  compute_.launch_with_link({}, 0.5, tenth, tenth);
  EXPECT_NEAR(compute_.simulated_time_s(), 0.5, 1e-12);
  // The swap stream holds the link's direction to the device for [0.5, 0.8): the work's
  // 0.1 s in starts at 0.8, 0.3 s late, and the work ends that much later.
  h2d_.launch({}, 0.5);
  h2d_.copy_async(nullptr, nullptr, 3 * tenth, copy_kind::host_to_device);
  compute_.launch_with_link({}, 0.5, tenth, 0);
  EXPECT_NEAR(compute_.simulated_time_s(), 1.3, 1e-12);
  // A copy on the swap stream after it waits for the work's reservation too.
  EXPECT_NEAR(h2d_.simulated_time_s(), 0.8, 1e-12);
  h2d_.copy_async(nullptr, nullptr, tenth, copy_kind::host_to_device);
  EXPECT_NEAR(h2d_.simulated_time_s(), 1.0, 1e-12);
}

TEST_F(null_device_test, wait_takes_the_later_of_the_two_clocks) {
  auto e = dev_->create_event();
  EXPECT_TRUE(e->query());
  compute_.launch([] {}, 1.0);
  compute_.record(*e);
  compute_.launch([] {}, 5.0);  // after the record: not part of the event
  h2d_.launch([] {}, 0.25);
  h2d_.wait(*e);
  EXPECT_DOUBLE_EQ(h2d_.simulated_time_s(), 1.0);
  h2d_.launch([] {}, 0.5);
  EXPECT_DOUBLE_EQ(h2d_.simulated_time_s(), 1.5);

  // Waiting on an event from the past does not move a clock back.
  auto early = dev_->create_event();
  d2h_.record(*early);  // at 0
  h2d_.wait(*early);
  EXPECT_DOUBLE_EQ(h2d_.simulated_time_s(), 1.5);
  EXPECT_TRUE(e->query());
  EXPECT_NO_THROW(e->synchronize());
}

TEST_F(null_device_test, rerecording_an_event_takes_the_new_time) {
  auto e = dev_->create_event();
  compute_.launch([] {}, 1.0);
  compute_.record(*e);
  compute_.launch([] {}, 1.0);
  compute_.record(*e);
  d2h_.wait(*e);
  EXPECT_DOUBLE_EQ(d2h_.simulated_time_s(), 2.0);
}

TEST_F(null_device_test, clocks_are_thread_safe) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([this] {
      for (int i = 0; i < 1000; ++i) compute_.launch([] {}, 0.25);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_DOUBLE_EQ(compute_.simulated_time_s(), 1000.0);
}

TEST_F(null_device_test, event_of_another_backend_is_rejected) {
  device_options o;
  o.kind = "host";
  o.capacity_bytes = 1 << 20;
  auto host = make_device(o);
  auto foreign = host->create_event();
  EXPECT_THROW(compute_.record(*foreign), invalid_argument);
  EXPECT_THROW(compute_.wait(*foreign), invalid_argument);
}

}  // namespace
}  // namespace memweave
