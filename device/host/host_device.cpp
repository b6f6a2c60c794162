// The host backend: device memory is anonymous mmap memory bounded by a capacity; each of
// the three streams is one worker thread running its queue in order.
//
// Invariants and thread safety:
// - A stream's queue is a ring of tasks guarded by the stream's mutex; the worker pops one
//   task at a time and runs it without the lock, so launch/record/wait from any thread
//   never wait for running work. Nobody spins: the worker sleeps on work_cv_, callers of
//   synchronize() on idle_cv_, and a waiting worker or thread on the event's cv.
// - Events carry a generation: record() bumps `recorded` at call time, marks it pending and
//   queues a task that clears it when it runs; complete = the latest generation is not
//   pending. wait(e) captures the generation at call time and waits for that record alone,
//   as CUDA's does: re-recording e later neither delays it nor, on a stream that gets there
//   first, releases it early.
// - The first exception thrown by launched work is kept (sticky, like a CUDA error):
//   synchronize() and events recorded after it report it; the queue keeps running so
//   every later event still completes and nobody hangs.
// - The host<->device link (host_link, when a link speed is set) is the device's, shared by
//   the three streams: a copy over it waits for the copies in its direction reserved before
//   it; work launched with link bytes (a staged split step) reserves both directions when it
//   starts and ends no earlier than those would be done.
// - Destruction drains: every queued task runs before the workers are joined.
#include "device/host/host_device.hpp"
#include "device/run_work.hpp"

#include <sys/mman.h>
#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>

#include "memweave/core/error.hpp"
#include "memweave/core/log.hpp"
#include "memweave/core/units.hpp"

namespace memweave::host_backend {
namespace {

const char* role_name(stream_role role) noexcept {
  return to_string(role);
}

event_state& state_of(event& e, const char* what) {
  auto* he = dynamic_cast<host_event*>(&e);
  if (he == nullptr) {
    throw invalid_argument(std::string("host stream ") + what +
                           ": the event was not created by a host device; create it with "
                           "create_event() of the device that owns the stream");
  }
  return *he->state();
}

std::shared_ptr<event_state> shared_state_of(event& e, const char* what) {
  (void)state_of(e, what);
  return static_cast<host_event&>(e).state();
}

}  // namespace

// ---- host_event -------------------------------------------------------------------------

bool event_state::done(std::uint64_t g) const noexcept {
  return g == 0 || std::find(pending.begin(), pending.end(), g) == pending.end();
}

bool host_event::query() {
  std::lock_guard lock(state_->mu);
  return state_->done(state_->recorded);
}

void host_event::synchronize() {
  event_state& st = *state_;
  std::shared_ptr<const std::string> error;
  {
    std::unique_lock lock(st.mu);
    const std::uint64_t target = st.recorded;
    if (!st.done(target)) {
      ++st.waiters;
      st.cv.wait(lock, [&] { return st.done(target); });
      --st.waiters;
    }
    error = st.error;
  }
  if (error) {
    throw device_error("host device: work enqueued before this event failed: " + *error +
                       " (the stream stays failed; fix the failing work and recreate the device)");
  }
}

// ---- host_stream ------------------------------------------------------------------------

host_stream::host_stream(stream_role role, host_link* link)
    : role_(role), link_(link), ring_(256), worker_([this] { run(); }) {}

host_stream::~host_stream() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_one();
  if (worker_.joinable()) worker_.join();
}

void host_stream::push(task&& t) {
  {
    std::lock_guard lock(mu_);
    if (count_ == ring_.size()) {
      // Full: double the ring, keeping queue order (amortised; the ring never shrinks).
      std::vector<task> bigger(ring_.size() * 2);
      for (std::size_t i = 0; i < count_; ++i) {
        bigger[i] = std::move(ring_[(head_ + i) & (ring_.size() - 1)]);
      }
      ring_.swap(bigger);
      head_ = 0;
    }
    ring_[(head_ + count_) & (ring_.size() - 1)] = std::move(t);
    ++count_;
    ++enqueued_;
  }
  work_cv_.notify_one();
}

void host_stream::launch(std::function<void()> work, double /*cost_s*/) {
  push_work(std::move(work), 0, 0, "launch");
}

void host_stream::launch_with_link(std::function<void()> work, double /*cost_s*/,
                                   std::size_t to_device_bytes, std::size_t to_host_bytes) {
  push_work(std::move(work), to_device_bytes, to_host_bytes, "launch_with_link");
}

void host_stream::push_work(std::function<void()> work, std::size_t to_device_bytes,
                            std::size_t to_host_bytes, const char* what) {
  MEMWEAVE_EXPECTS(static_cast<bool>(work), std::string("host ") + role_name(role_) +
                                                " stream: " + what +
                                                " of an empty std::function; pass the work to run");
  task t;
  t.kind = op::work;
  t.work = std::move(work);
  t.to_device_bytes = to_device_bytes;
  t.to_host_bytes = to_host_bytes;
  push(std::move(t));
}

void host_stream::copy_async(void* dst, const void* src, std::size_t bytes, copy_kind kind) {
  if (bytes == 0) return;  // nothing to copy, nothing to order
  MEMWEAVE_EXPECTS(dst != nullptr && src != nullptr,
                   std::string("host ") + role_name(role_) + " stream: copy_async of " +
                       std::to_string(bytes) + " bytes with a null " +
                       (dst == nullptr ? "destination" : "source") + "; pass valid pointers");
  task t;
  t.kind = op::copy;
  t.copy = kind;
  t.dst = dst;
  t.src = src;
  t.bytes = bytes;
  push(std::move(t));
}

void host_stream::record(event& e) {
  task t;
  t.kind = op::record;
  t.event = shared_state_of(e, "record");
  {
    std::lock_guard lock(t.event->mu);
    t.generation = ++t.event->recorded;
    t.event->pending.push_back(t.generation);
  }
  push(std::move(t));
}

void host_stream::wait(event& e) {
  event_state& st = state_of(e, "wait");
  std::uint64_t g = 0;
  {
    std::lock_guard lock(st.mu);
    g = st.recorded;
    // Never recorded, or that record already ran: later work need not wait.
    if (st.done(g)) return;
  }
  task t;
  t.kind = op::wait;
  t.event = static_cast<host_event&>(e).state();
  t.generation = g;
  push(std::move(t));
}

void host_stream::synchronize() {
  if (std::this_thread::get_id() == worker_.get_id()) {
    throw invalid_argument(std::string("host ") + role_name(role_) +
                           " stream: synchronize() called from work running on this stream "
                           "would wait for itself forever; synchronize from another thread");
  }
  std::shared_ptr<const std::string> error;
  {
    std::unique_lock lock(mu_);
    const std::uint64_t target = enqueued_;
    if (completed_ < target) {
      ++sync_waiters_;
      idle_cv_.wait(lock, [&] { return completed_ >= target; });
      --sync_waiters_;
    }
    error = error_;
  }
  if (error) {
    throw device_error(std::string("host ") + role_name(role_) +
                       " stream: launched work failed: " + *error +
                       " (the stream stays failed; fix the failing work and recreate the device)");
  }
}

void host_stream::run() noexcept {
  // A throttled copy sleeps until its reservation ends. Linux lets a sleep overrun by the
  // thread's timer slack, 50 us by default: each copy then lasted 60-80 us more than its
  // bytes take, a latency no PCIe link has, and a tensor cache moving 160 small parameters
  // each way spent 65 ms an iteration on it. 1 ns: the sleep ends when the link would.
  (void)prctl(PR_SET_TIMERSLACK, 1UL);
  std::unique_lock lock(mu_);
  for (;;) {
    while (count_ == 0 && !stop_) work_cv_.wait(lock);
    if (count_ == 0) return;  // stopping and drained
    {
      task t = std::move(ring_[head_]);
      head_ = (head_ + 1) & (ring_.size() - 1);
      --count_;
      lock.unlock();
      execute(t);
    }  // the work's captures and the event reference are released outside the lock
    lock.lock();
    ++completed_;
    if (sync_waiters_ > 0) idle_cv_.notify_all();
  }
}

void host_stream::execute(task& t) noexcept {
  switch (t.kind) {
    case op::work: {
      // Its own copies hold the link from its start, in both directions at once.
      host_link::clock::time_point copies_done{};
      if (link_ != nullptr) {
        if (t.to_device_bytes > 0) {
          copies_done = link_->reserve(host_link::direction::to_device, t.to_device_bytes);
        }
        if (t.to_host_bytes > 0) {
          copies_done =
              std::max(copies_done, link_->reserve(host_link::direction::to_host, t.to_host_bytes));
        }
      }
      std::string message;
      const bool failed = detail::run_work(t.work, message);
      if (copies_done != host_link::clock::time_point{}) std::this_thread::sleep_until(copies_done);
      if (failed && !error_) {
        try {
          auto error = std::make_shared<const std::string>(std::move(message));
          log(log_level::info,
              std::string("host ") + role_name(role_) + " stream: launched work failed: " + *error);
          std::lock_guard lock(mu_);
          error_ = std::move(error);
        } catch (...) {
          // No memory to keep the message: keep a static one so the failure is not lost.
          static const auto oom =
              std::make_shared<const std::string>("(message lost: out of memory)");
          std::lock_guard lock(mu_);
          error_ = oom;
        }
      }
      break;
    }
    case op::copy: {
      const bool over_link =
          t.copy == copy_kind::host_to_device || t.copy == copy_kind::device_to_host;
      if (over_link && link_ != nullptr) {
        // The simulated link: the copy lasts at least bytes / bandwidth, after the copies in
        // its direction reserved before it. The bytes land at the end, as on a real link, so
        // a reader that forgot to wait sees stale data instead of a lucky early copy.
        std::this_thread::sleep_until(link_->reserve(t.copy == copy_kind::host_to_device
                                                         ? host_link::direction::to_device
                                                         : host_link::direction::to_host,
                                                     t.bytes));
      }
      std::memcpy(t.dst, t.src, t.bytes);
      break;
    }
    case op::record: {
      event_state& st = *t.event;
      std::lock_guard lock(st.mu);
      std::erase(st.pending, t.generation);
      if (t.generation > st.latest_done) {
        st.error = error_;  // this worker is error_'s only writer: no lock needed to read
        st.latest_done = t.generation;
      }
      if (st.waiters > 0) st.cv.notify_all();
      break;
    }
    case op::wait: {
      event_state& st = *t.event;
      std::unique_lock lock(st.mu);
      if (st.done(t.generation)) break;
      ++st.waiters;
      st.cv.wait(lock, [&] { return st.done(t.generation); });
      --st.waiters;
      break;
    }
  }
}

// ---- host_device ------------------------------------------------------------------------

host_device::host_device(std::size_t capacity_bytes, double host_link_gbps,
                         const std::string& capacity_knob)
    : host_link_gbps_(host_link_gbps),
      memory_("host device memory", PROT_READ | PROT_WRITE, capacity_bytes,
              "raise " + capacity_knob),
      pinned_("host device pinned memory", PROT_READ | PROT_WRITE,
              std::numeric_limits<std::size_t>::max(), "free pinned memory") {
  if (host_link_gbps > 0) link_ = std::make_unique<host_link>(host_link_gbps * 1e9);
  for (std::size_t i = 0; i < streams_.size(); ++i) {
    streams_[i] = std::make_unique<host_stream>(static_cast<stream_role>(i), link_.get());
  }
}

host_device::~host_device() {
  // Joining one stream at a time is safe: a stream blocked on an event that another stream
  // has yet to record is released by that stream's worker, which keeps running until its
  // own destructor drains it.
  for (auto& s : streams_) s.reset();
}

std::string host_device::name() const {
  std::string n = "host (simulated, " + format_bytes(memory_.capacity());
  if (host_link_gbps_ > 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, ", link %.3g GB/s", host_link_gbps_);
    n += buf;
  }
  return n + ")";
}

void* host_device::allocate(std::size_t bytes) {
  return memory_.allocate(bytes);
}

void host_device::deallocate(void* p, std::size_t bytes) noexcept {
  memory_.deallocate(p, bytes);
}

void* host_device::allocate_pinned(std::size_t bytes) {
  return pinned_.allocate(bytes);
}

void host_device::deallocate_pinned(void* p, std::size_t bytes) noexcept {
  pinned_.deallocate(p, bytes);
}

memory_info host_device::memory() const {
  const std::size_t used = memory_.allocated();
  return {memory_.capacity() - used, memory_.capacity()};
}

stream& host_device::get_stream(stream_role role) {
  const auto i = static_cast<std::size_t>(role);
  MEMWEAVE_EXPECTS(i < streams_.size(), "host device: get_stream of stream_role " +
                                            std::to_string(i) +
                                            ", expected compute, host_to_device or device_to_host");
  return *streams_[i];
}

std::unique_ptr<event> host_device::make_event(const event_options& options) {
  (void)options;  // host events already wait on a condition variable
  return std::make_unique<host_event>();
}

void host_device::synchronize() {
  // Wait for all three even when one failed, then report the first failure.
  std::exception_ptr first;
  for (auto& s : streams_) {
    try {
      s->synchronize();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace memweave::host_backend
