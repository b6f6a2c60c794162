// The `host` backend: a simulated device on the CPU. Private to device/.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "device/host/host_link.hpp"
#include "device/mapped_memory.hpp"
#include "memweave/device/device.hpp"

namespace memweave::host_backend {

/// What an event shares with the record/wait tasks that refer to it (tasks keep it alive
/// when the event object is destroyed first).
struct event_state {
  std::mutex mu;               // guards everything below
  std::condition_variable cv;  // signalled when a record task runs
  std::uint64_t recorded = 0;  // generation of the latest record() call
  // Generations recorded whose record task has not run yet. Records on different streams
  // run in any order, so "a later generation ran" says nothing of an earlier one, which a
  // wait may be for.
  std::vector<std::uint64_t> pending;
  std::uint64_t latest_done = 0;             // the highest generation whose record task ran
  std::shared_ptr<const std::string> error;  // stream failure seen by latest_done, or null
  int waiters = 0;                           // threads blocked on cv (skip notify when 0)
  /// Whether the record of generation `g` has run (0: never recorded). Under `mu`.
  bool done(std::uint64_t g) const noexcept;
};

/// An event of the host backend.
class host_event final : public event {
 public:
  host_event() : state_(std::make_shared<event_state>()) {}
  bool query() override;
  void synchronize() override;
  const std::shared_ptr<event_state>& state() const noexcept { return state_; }

 private:
  std::shared_ptr<event_state> state_;
};

/// One in-order queue run by one worker thread.
class host_stream final : public stream {
 public:
  /// With a `link` (null: none), host<->device copies take its time, shared with the other
  /// streams' copies in the same direction.
  host_stream(stream_role role, host_link* link);
  /// Runs what is queued, then joins the worker. Never throws.
  ~host_stream() override;

  stream_role role() const noexcept override { return role_; }
  void launch(std::function<void()> work, double cost_s) override;
  /// The work's own copies (a staged split step's slices) reserve the link from when it
  /// starts, and it ends no earlier than they would be done.
  void launch_with_link(std::function<void()> work, double cost_s, std::size_t to_device_bytes,
                        std::size_t to_host_bytes) override;
  void copy_async(void* dst, const void* src, std::size_t bytes, copy_kind kind) override;
  void record(event& e) override;
  void wait(event& e) override;
  void synchronize() override;
  void* native_handle() const noexcept override { return nullptr; }

 private:
  enum class op : std::uint8_t { work, copy, record, wait };
  // One queued item; a plain struct so that the ring holds it by value (no per-task
  // allocation beyond what std::function itself needs).
  struct task {
    op kind = op::work;
    copy_kind copy = copy_kind::host_to_host;
    std::function<void()> work;          // op::work
    std::size_t to_device_bytes = 0;     // op::work: what it moves over the link itself
    std::size_t to_host_bytes = 0;       // op::work
    void* dst = nullptr;                 // op::copy
    const void* src = nullptr;           // op::copy
    std::size_t bytes = 0;               // op::copy
    std::shared_ptr<event_state> event;  // op::record, op::wait
    std::uint64_t generation = 0;        // op::record, op::wait
  };

  void push(task&& t);
  void push_work(std::function<void()> work, std::size_t to_device_bytes, std::size_t to_host_bytes,
                 const char* what);
  void run() noexcept;
  void execute(task& t) noexcept;

  const stream_role role_;
  host_link* const link_;  // the device's, or null: copies are not throttled

  std::mutex mu_;                             // guards every member below but worker_
  std::condition_variable work_cv_;           // worker: a task was pushed or stop_ was set
  std::condition_variable idle_cv_;           // synchronize(): completed_ advanced
  std::vector<task> ring_;                    // circular queue; size is a power of two
  std::size_t head_ = 0;                      // index of the oldest queued task
  std::size_t count_ = 0;                     // tasks queued
  std::uint64_t enqueued_ = 0;                // tasks ever pushed
  std::uint64_t completed_ = 0;               // tasks ever finished
  int sync_waiters_ = 0;                      // threads in synchronize()
  bool stop_ = false;                         // destructor: run what is queued, then exit
  std::shared_ptr<const std::string> error_;  // first failure; written only by the worker
  std::thread worker_;                        // declared last: starts once the rest is built
};

/// The simulated device: mmap'd memory bounded by a capacity, three host_streams sharing
/// one simulated link.
class host_device final : public device {
 public:
  /// `capacity_knob` names what sets the capacity in out-of-memory errors.
  host_device(std::size_t capacity_bytes, double host_link_gbps,
              const std::string& capacity_knob = "MEMWEAVE_DEVICE_BYTES");
  /// Drains and joins the streams, then unmaps memory. Never throws.
  ~host_device() override;

  device_kind kind() const noexcept override { return device_kind::host; }
  std::string name() const override;
  void* allocate(std::size_t bytes) override;
  void deallocate(void* p, std::size_t bytes) noexcept override;
  void* allocate_pinned(std::size_t bytes) override;
  void deallocate_pinned(void* p, std::size_t bytes) noexcept override;
  memory_info memory() const override;
  stream& get_stream(stream_role role) override;
  std::unique_ptr<event> make_event(const event_options&) override;
  void synchronize() override;

 private:
  const double host_link_gbps_;
  std::unique_ptr<host_link> link_;                      // null where no link speed is set
  detail::mapped_memory memory_;                         // device memory, capacity-bounded
  detail::mapped_memory pinned_;                         // "pinned" host memory, unbounded
  std::array<std::unique_ptr<host_stream>, 3> streams_;  // by stream_role
};

}  // namespace memweave::host_backend
