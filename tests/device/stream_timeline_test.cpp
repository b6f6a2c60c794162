// The stream timeline: spans timed by the null device's simulated clocks and by stamps that
// the host device's streams run in order with the work.
#include "memweave/device/stream_timeline.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "memweave/device/device.hpp"

namespace memweave {
namespace {

std::unique_ptr<device> make(const char* kind, double gbps) {
  device_options o;
  o.kind = kind;
  o.capacity_bytes = 64ull << 20;
  o.host_link_gbps = gbps;
  return make_device(o);
}

TEST(stream_timeline_test, null_spans_follow_the_simulated_clocks_and_their_waits) {
  auto dev = make("null", 1.0);  // 1 GB/s: 1 MB takes 1 ms
  stream& compute = dev->get_stream(stream_role::compute);
  stream& d2h = dev->get_stream(stream_role::device_to_host);
  stream_timeline tl(*dev);
  tl.span(compute, "conv1 F", "kernel", 0, 1, [&] { compute.launch([] {}, 0.004); });
  auto done = dev->create_event();
  compute.record(*done);
  d2h.wait(*done);  // the copy waits for the kernel: enqueued before the span opens
  tl.span(d2h, "conv1 out", "offload", 1'000'000, 1,
          [&] { d2h.copy_async(nullptr, nullptr, 1'000'000, copy_kind::device_to_host); });
  tl.span(compute, "relu1 F", "kernel", 0, 2, [&] { compute.launch([] {}, 0.002); });
  dev->synchronize();
  const std::vector<timeline_span> s = tl.spans();
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].name, "conv1 F");
  EXPECT_EQ(s[0].stream, stream_role::compute);
  EXPECT_DOUBLE_EQ(s[0].begin_s, 0.0);
  EXPECT_NEAR(s[0].end_s, 0.004, 1e-12);
  EXPECT_EQ(s[1].stream, stream_role::device_to_host);
  EXPECT_EQ(s[1].bytes, 1'000'000u);
  EXPECT_EQ(s[1].step, 1);
  EXPECT_NEAR(s[1].begin_s, 0.004, 1e-12);
  EXPECT_NEAR(s[1].end_s, 0.005, 1e-12);
  EXPECT_NEAR(s[2].begin_s, 0.004, 1e-12);  // compute goes on while the copy runs
  EXPECT_NEAR(s[2].end_s, 0.006, 1e-12);
  tl.clear();
  EXPECT_TRUE(tl.empty());
}

TEST(stream_timeline_test, host_spans_are_stamped_when_the_stream_runs_the_work) {
  auto dev = make("host", 0.0);
  stream& compute = dev->get_stream(stream_role::compute);
  stream_timeline tl(*dev);
  // Work queued ahead of the span delays its begin: stamps are taken by the stream.
  compute.launch([] { std::this_thread::sleep_for(std::chrono::milliseconds(200)); });
  const auto opened = std::chrono::steady_clock::now();
  tl.span(compute, "slow", "kernel", 0, 0, [&] {
    compute.launch([] { std::this_thread::sleep_for(std::chrono::milliseconds(10)); });
  });
  tl.span(compute, "next", "kernel", 0, 1, [&] { compute.launch([] {}); });
  const double enqueue_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - opened).count();
  dev->synchronize();
  const std::vector<timeline_span> s = tl.spans();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_DOUBLE_EQ(s[0].begin_s, 0.0);
  EXPECT_GE(s[0].end_s - s[0].begin_s, 0.010);
  EXPECT_GE(s[1].begin_s, s[0].end_s);  // in order on one stream, never overlapping
  EXPECT_GE(s[1].end_s, s[1].begin_s);
  EXPECT_LT(enqueue_s, 0.100);  // opening spans never waited for the 200 ms ahead of them
}

}  // namespace
}  // namespace memweave
