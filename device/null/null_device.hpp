// The `null` backend (planning): real, unique device addresses with no memory behind them,
// nothing run, a simulated clock per stream. Private to device/.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <string>

#include "device/mapped_memory.hpp"
#include "device/null/link_timeline.hpp"
#include "memweave/device/device.hpp"

namespace memweave::null_backend {

/// Host<->device link used for copy costs when device_options::host_link_gbps is 0
/// (GB/s = 1e9 bytes/s): about what a PCIe 3.0 x16 link sustains.
inline constexpr double k_default_link_gbps = 16.0;
/// Effective rate of a device-to-device copy (it reads and writes every byte: half of a
/// ~900 GB/s HBM2 device's memory bandwidth).
inline constexpr double k_device_copy_gbps = 450.0;
/// Effective rate of a host-to-host copy (memcpy on one core).
inline constexpr double k_host_copy_gbps = 10.0;

/// An event of the null backend: the simulated time at which it was recorded.
class null_event final : public event {
 public:
  bool query() override { return true; }
  void synchronize() override {}
  /// The recording stream's clock at record(); 0 when never recorded.
  double time_s() const noexcept { return time_s_.load(std::memory_order_acquire); }
  void set_time_s(double t) noexcept { time_s_.store(t, std::memory_order_release); }

 private:
  std::atomic<double> time_s_{0.0};
};

class null_device;

/// A stream that runs nothing and advances a simulated clock. Thread-safe (lock-free but for
/// the link's reservations).
class null_stream final : public stream {
 public:
  /// `link_gbps` is the host<->device copy rate; `dev` holds the link both directions of
  /// which every stream's host<->device copies share.
  null_stream(stream_role role, double link_gbps, null_device& dev);
  stream_role role() const noexcept override { return role_; }
  /// Does not run `work`; the clock advances by `cost_s` (finite, >= 0).
  void launch(std::function<void()> work, double cost_s) override;
  /// Touches nothing; the clock advances by bytes / the rate of `kind`, and a host<->device
  /// copy also waits for the link's direction where other streams' copies hold it
  /// (link_timeline: it moves in their gaps).
  void copy_async(void* dst, const void* src, std::size_t bytes, copy_kind kind) override;
  /// The clock advances by cost_s, and by as much again as the link's other traffic delays
  /// the work's own copies, reserved on each direction from the work's start.
  void launch_with_link(std::function<void()> work, double cost_s, std::size_t to_device_bytes,
                        std::size_t to_host_bytes) override;
  /// The event takes this stream's clock.
  void record(event& e) override;
  /// clock = max(clock, the event's time).
  void wait(event& e) override;
  void synchronize() override {}
  void* native_handle() const noexcept override { return nullptr; }
  double simulated_time_s() const noexcept override {
    return clock_s_.load(std::memory_order_acquire);
  }

 private:
  void advance(double seconds) noexcept;

  const stream_role role_;
  const double link_bytes_per_s_;
  null_device& dev_;
  std::atomic<double> clock_s_{0.0};  // simulated seconds of work enqueued so far
};

/// The planning device.
class null_device final : public device {
 public:
  /// `capacity_knob` names what sets the capacity in out-of-memory errors.
  null_device(std::size_t capacity_bytes, double host_link_gbps,
              const std::string& capacity_knob = "MEMWEAVE_DEVICE_BYTES");

  device_kind kind() const noexcept override { return device_kind::null; }
  std::string name() const override;
  /// A PROT_NONE reservation: a real address that must never be read or written.
  void* allocate(std::size_t bytes) override;
  void deallocate(void* p, std::size_t bytes) noexcept override;
  /// Real, writable host memory, committed lazily (a jemalloc arena keeps metadata in it).
  void* allocate_pinned(std::size_t bytes) override;
  void deallocate_pinned(void* p, std::size_t bytes) noexcept override;
  memory_info memory() const override;
  stream& get_stream(stream_role role) override;
  std::unique_ptr<event> make_event(const event_options&) override;
  void synchronize() override {}
  bool touches_memory() const noexcept override { return false; }

  /// Reserves `seconds` of the link's direction `kind` (host_to_device or device_to_host)
  /// from `ready` on (link_timeline::reserve); returns when the copy is done.
  double reserve_link(copy_kind kind, double ready, double seconds);

 private:
  const double link_gbps_;
  detail::mapped_memory memory_;                         // PROT_NONE reservations, capacity-bounded
  detail::mapped_memory pinned_;                         // read/write, unbounded
  link_timeline to_device_, to_host_;                    // the link's two directions
  std::atomic<unsigned> reservations_{0};                // since the link last forgot
  std::array<std::unique_ptr<null_stream>, 3> streams_;  // by stream_role
};

}  // namespace memweave::null_backend
