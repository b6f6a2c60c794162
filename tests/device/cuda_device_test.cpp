// The cuda backend on a real GPU: allocation, round trips through all three streams,
// events and host-function launches. Every test skips when no CUDA device is present (fails
// with MEMWEAVE_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <time.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include "memweave/core/error.hpp"
#include "memweave/device/device.hpp"
#include "support/gpu_or_skip.hpp"

namespace memweave {
namespace {

#define MEMWEAVE_NEED_GPU() MEMWEAVE_GPU_OR_SKIP("the cuda backend is built but needs a GPU")

std::unique_ptr<device> make_cuda() {
  device_options o;
  o.kind = "cuda";
  return make_device(o);
}

TEST(cuda_device, reports_kind_name_memory_and_streams) {
  MEMWEAVE_NEED_GPU();
  auto dev = make_cuda();
  EXPECT_EQ(dev->kind(), device_kind::cuda);
  EXPECT_TRUE(dev->touches_memory());
  EXPECT_NE(dev->name().find("cuda:0"), std::string::npos) << dev->name();
  const memory_info m = dev->memory();
  EXPECT_GT(m.total_bytes, 0u);
  EXPECT_LE(m.free_bytes, m.total_bytes);
  for (auto role :
       {stream_role::compute, stream_role::host_to_device, stream_role::device_to_host}) {
    EXPECT_EQ(dev->get_stream(role).role(), role);
    EXPECT_NE(dev->get_stream(role).native_handle(), nullptr);
  }
}

TEST(cuda_device, its_throughput_is_a_gpus_and_is_measured_once) {
  MEMWEAVE_NEED_GPU();
  auto dev = make_cuda();
  const std::size_t free_before = dev->memory().free_bytes;
  const auto t = dev->throughput();
  ASSERT_TRUE(t.has_value()) << dev->name();
  // Between a K40 and ten times an H100: a GPU's, in its units (a kHz taken for MHz or bits
  // for bytes is off by 1000 or 8).
  EXPECT_GT(t->fp32_flops, 4e12);
  EXPECT_LT(t->fp32_flops, 700e12);
  EXPECT_GT(t->memory_bytes_per_s, 250e9);
  EXPECT_LT(t->memory_bytes_per_s, 50e12);
  // Timed: PCIe 3 x8 at least, below NVLink-C2C's 450 GB/s each way.
  EXPECT_GT(t->link_bytes_per_s, 4e9);
  EXPECT_LT(t->link_bytes_per_s, 450e9);
  // The probe's memory is given back, and the figures are kept (not timed again).
  EXPECT_GE(dev->memory().free_bytes + (std::size_t{8} << 20), free_before);
  const auto again = dev->throughput();
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->link_bytes_per_s, t->link_bytes_per_s);
  std::printf("%s: %.1f TFLOP/s fp32, %.0f GB/s, link %.1f GB/s (timed)\n", dev->name().c_str(),
              t->fp32_flops / 1e12, t->memory_bytes_per_s / 1e9, t->link_bytes_per_s / 1e9);
}

TEST(cuda_device, allocation_takes_device_memory_and_gives_it_back) {
  MEMWEAVE_NEED_GPU();
  auto dev = make_cuda();
  constexpr std::size_t n = 256ull << 20;
  const std::size_t free_before = dev->memory().free_bytes;
  void* p = dev->allocate(n);
  ASSERT_NE(p, nullptr);
  EXPECT_LE(dev->memory().free_bytes + n / 2, free_before) << "256 MiB did not leave the free pool";
  dev->deallocate(p, n);
  EXPECT_EQ(dev->allocate(0), nullptr);
}

TEST(cuda_device, impossible_allocation_is_out_of_memory_with_numbers) {
  MEMWEAVE_NEED_GPU();
  auto dev = make_cuda();
  const std::size_t too_much = dev->memory().total_bytes * 4;
  try {
    (void)dev->allocate(too_much);
    FAIL() << "allocated four times the device";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.requested(), too_much);
    EXPECT_GT(e.free_bytes(), 0u);
    EXPECT_NE(std::string(e.what()).find("cudaMalloc"), std::string::npos) << e.what();
  }
  // The failure is not sticky: the device still works.
  void* p = dev->allocate(1 << 20);
  EXPECT_NE(p, nullptr);
  dev->deallocate(p, 1 << 20);
}

TEST(cuda_device, round_trip_through_all_three_streams) {
  MEMWEAVE_NEED_GPU();
  auto dev = make_cuda();
  constexpr std::size_t n = (16 << 20) + 123;
  auto* src = static_cast<unsigned char*>(dev->allocate_pinned(n));
  auto* back = static_cast<unsigned char*>(dev->allocate_pinned(n));
  auto* other = static_cast<unsigned char*>(dev->allocate_pinned(n));
  void* d1 = dev->allocate(n);
  void* d2 = dev->allocate(n);
  for (std::size_t i = 0; i < n; ++i) src[i] = static_cast<unsigned char>(i * 13 + 1);
  std::memset(back, 0, n);
  std::memset(other, 0, n);

  stream& h2d = dev->get_stream(stream_role::host_to_device);
  stream& compute = dev->get_stream(stream_role::compute);
  stream& d2h = dev->get_stream(stream_role::device_to_host);
  auto uploaded = dev->create_event();
  auto moved = dev->create_event();
  h2d.copy_async(d1, src, n, copy_kind::host_to_device);
  h2d.record(*uploaded);
  compute.wait(*uploaded);
  compute.copy_async(d2, d1, n, copy_kind::device_to_device);
  compute.record(*moved);
  d2h.wait(*moved);
  d2h.copy_async(back, d2, n, copy_kind::device_to_host);
  d2h.copy_async(other, back, n, copy_kind::host_to_host);
  dev->synchronize();

  EXPECT_EQ(std::memcmp(back, src, n), 0);
  EXPECT_EQ(std::memcmp(other, src, n), 0);
  EXPECT_TRUE(uploaded->query());
  EXPECT_TRUE(moved->query());
  dev->deallocate(d2, n);
  dev->deallocate(d1, n);
  dev->deallocate_pinned(other, n);
  dev->deallocate_pinned(back, n);
  dev->deallocate_pinned(src, n);
}

TEST(cuda_device, launch_runs_in_stream_order_and_events_follow_it) {
  MEMWEAVE_NEED_GPU();
  auto dev = make_cuda();
  stream& compute = dev->get_stream(stream_role::compute);
  auto e = dev->create_event();
  EXPECT_TRUE(e->query()) << "an event never recorded is complete";

  std::promise<void> gate;
  auto opened = gate.get_future().share();
  std::vector<int> seen;
  compute.launch([opened] { opened.wait(); });
  for (int i = 0; i < 100; ++i) compute.launch([&seen, i] { seen.push_back(i); });
  compute.record(*e);
  EXPECT_FALSE(e->query()) << "recorded behind a blocked host function";
  gate.set_value();
  e->synchronize();
  EXPECT_TRUE(e->query());
  ASSERT_EQ(seen.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(seen[i], i);
}

TEST(cuda_device, wait_orders_work_across_streams) {
  MEMWEAVE_NEED_GPU();
  auto dev = make_cuda();
  stream& h2d = dev->get_stream(stream_role::host_to_device);
  stream& compute = dev->get_stream(stream_role::compute);
  auto e = dev->create_event();
  std::promise<void> gate;
  auto opened = gate.get_future().share();
  std::atomic<bool> first_done{false};
  std::atomic<bool> order_ok{false};
  h2d.launch([opened, &first_done] {
    opened.wait();
    first_done = true;
  });
  h2d.record(*e);
  compute.wait(*e);
  compute.launch([&] { order_ok = first_done.load(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  gate.set_value();
  compute.synchronize();
  EXPECT_TRUE(order_ok.load());
}

TEST(cuda_device, throwing_launch_fails_synchronize_and_later_events) {
  MEMWEAVE_NEED_GPU();
  auto dev = make_cuda();
  stream& compute = dev->get_stream(stream_role::compute);
  auto before = dev->create_event();
  auto after = dev->create_event();
  compute.record(*before);
  compute.launch([] { throw std::runtime_error("boom on the gpu stream"); });
  std::atomic<bool> later_ran{false};
  compute.launch([&later_ran] { later_ran = true; });
  compute.record(*after);
  try {
    compute.synchronize();
    FAIL() << "synchronize did not report the failed launch";
  } catch (const device_error& e) {
    EXPECT_NE(std::string(e.what()).find("boom on the gpu stream"), std::string::npos);
  }
  EXPECT_TRUE(later_ran.load());
  EXPECT_NO_THROW(before->synchronize());
  EXPECT_THROW(after->synchronize(), device_error);
  EXPECT_NO_THROW(dev->get_stream(stream_role::host_to_device).synchronize());
}

TEST(cuda_device, destruction_waits_for_pending_launches) {
  MEMWEAVE_NEED_GPU();
  std::atomic<int> ran{0};
  {
    auto dev = make_cuda();
    stream& compute = dev->get_stream(stream_role::compute);
    for (int i = 0; i < 50; ++i) compute.launch([&ran] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 50);
}

TEST(cuda_device, bad_ordinal_is_refused) {
  MEMWEAVE_NEED_GPU();
  device_options o;
  o.kind = "cuda";
  o.cuda_ordinal = 1000;
  try {
    (void)make_device(o);
    FAIL() << "ordinal 1000 accepted";
  } catch (const no_device_error& e) {
    EXPECT_NE(std::string(e.what()).find("MEMWEAVE_CUDA_DEVICE"), std::string::npos);
  }
}

// Issue 12: an event made with blocking_sync lets the waiting thread sleep (the transfer
// engine's watcher waits on such events for whole copies): while the stream is busy for
// 300 ms, synchronize() costs the waiting thread far less CPU time than wall time. A
// spinning wait (cudaEventDefault under the default schedule, one context on many cores)
// would burn about all of it.
TEST(cuda_device, blocking_sync_event_sleeps_while_it_waits) {
  MEMWEAVE_NEED_GPU();
  auto dev = make_cuda();
  stream& s = dev->get_stream(stream_role::compute);
  auto done = dev->create_event(event_options{.blocking_sync = true});
  s.launch([] { std::this_thread::sleep_for(std::chrono::milliseconds(300)); });
  s.record(*done);
  const auto cpu_now = [] {
    timespec t{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  };
  const auto wall0 = std::chrono::steady_clock::now();
  const double cpu0 = cpu_now();
  done->synchronize();
  const double cpu = cpu_now() - cpu0;
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  ASSERT_GE(wall, 0.2) << "the wait did not cover the stream's sleep";
  EXPECT_LT(cpu, 0.25 * wall) << "the waiting thread spent " << cpu << " s of CPU in " << wall
                              << " s: the event spins instead of blocking";
  EXPECT_TRUE(done->query());
}

}  // namespace
}  // namespace memweave
