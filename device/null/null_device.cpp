// The null backend: addresses are real (mmap reservations, unique and non-overlapping,
// capacity-bounded like the host backend) but nothing is ever read, written or run.
// Each stream keeps a simulated clock: launch adds its cost, a copy adds bytes / rate,
// record stamps the event with the clock, wait takes the max with the event's stamp.
//
// Thread safety: the clocks are atomics updated with compare-exchange, the memory tables
// have their own mutex; every method may be called from any thread.
#include "device/null/null_device.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"

namespace memweave::null_backend {
namespace {

null_event& as_null(event& e, const char* what) {
  auto* ne = dynamic_cast<null_event*>(&e);
  if (ne == nullptr) {
    throw invalid_argument(std::string("null stream ") + what +
                           ": the event was not created by a null device; create it with "
                           "create_event() of the device that owns the stream");
  }
  return *ne;
}

}  // namespace

null_stream::null_stream(stream_role role, double link_gbps, null_device& dev)
    : role_(role), link_bytes_per_s_(link_gbps * 1e9), dev_(dev) {}

void null_stream::advance(double seconds) noexcept {
  double now = clock_s_.load(std::memory_order_relaxed);
  while (!clock_s_.compare_exchange_weak(now, now + seconds, std::memory_order_acq_rel)) {
  }
}

void null_stream::launch(std::function<void()> /*work*/, double cost_s) {
  MEMWEAVE_EXPECTS(std::isfinite(cost_s) && cost_s >= 0.0,
                   std::string("null ") + to_string(role_) +
                       " stream: launch cost_s = " + std::to_string(cost_s) +
                       " is not a finite non-negative number of seconds; pass the kernel's "
                       "estimated time");
  advance(cost_s);
}

void null_stream::copy_async(void* /*dst*/, const void* /*src*/, std::size_t bytes,
                             copy_kind kind) {
  double rate = 0.0;
  switch (kind) {
    case copy_kind::host_to_device:
    case copy_kind::device_to_host: {
      // The copy lasts from this stream's clock to when the link has carried it: the clock
      // advances by that span (added, as launch's costs are, should threads share a stream).
      const double start = simulated_time_s();
      advance(dev_.reserve_link(kind, start, static_cast<double>(bytes) / link_bytes_per_s_) -
              start);
      return;
    }
    case copy_kind::device_to_device:
      rate = k_device_copy_gbps * 1e9;
      break;
    case copy_kind::host_to_host:
      rate = k_host_copy_gbps * 1e9;
      break;
  }
  advance(static_cast<double>(bytes) / rate);
}

void null_stream::launch_with_link(std::function<void()> work, double cost_s,
                                   std::size_t to_device_bytes, std::size_t to_host_bytes) {
  // The copies go between the work's parts (a split step's micro-steps), so what the link's
  // other traffic delays them by delays the work as a whole; on a free link they fit in it.
  const double start = simulated_time_s();
  double delay = 0.0;
  const auto reserve = [&](copy_kind kind, std::size_t bytes) {
    const double seconds = static_cast<double>(bytes) / link_bytes_per_s_;
    delay = std::max(delay, dev_.reserve_link(kind, start, seconds) - (start + seconds));
  };
  reserve(copy_kind::host_to_device, to_device_bytes);
  reserve(copy_kind::device_to_host, to_host_bytes);
  launch(std::move(work), cost_s + delay);
}

void null_stream::record(event& e) {
  as_null(e, "record").set_time_s(simulated_time_s());
}

void null_stream::wait(event& e) {
  const double t = as_null(e, "wait").time_s();
  double now = clock_s_.load(std::memory_order_relaxed);
  while (now < t && !clock_s_.compare_exchange_weak(now, t, std::memory_order_acq_rel)) {
  }
}

null_device::null_device(std::size_t capacity_bytes, double host_link_gbps,
                         const std::string& capacity_knob)
    : link_gbps_(host_link_gbps > 0 ? host_link_gbps : k_default_link_gbps),
      memory_("null device memory", PROT_NONE, capacity_bytes, "raise " + capacity_knob),
      pinned_("null device pinned memory", PROT_READ | PROT_WRITE,
              std::numeric_limits<std::size_t>::max(), "free pinned memory") {
  for (std::size_t i = 0; i < streams_.size(); ++i) {
    streams_[i] = std::make_unique<null_stream>(static_cast<stream_role>(i), link_gbps_, *this);
  }
}

double null_device::reserve_link(copy_kind kind, double ready, double seconds) {
  link_timeline& link = kind == copy_kind::host_to_device ? to_device_ : to_host_;
  const double done = link.reserve(ready, seconds);
  // Now and then forget what ended before every stream's clock: no copy starts there again.
  if (reservations_.fetch_add(1, std::memory_order_relaxed) % 256 == 255) {
    double least = done;
    for (const auto& s : streams_) least = std::min(least, s->simulated_time_s());
    to_device_.forget_before(least);
    to_host_.forget_before(least);
  }
  return done;
}

std::string null_device::name() const {
  char buf[64];
  std::snprintf(buf, sizeof buf, ", link %.3g GB/s)", link_gbps_);
  return "null (planning, " + format_bytes(memory_.capacity()) + buf;
}

void* null_device::allocate(std::size_t bytes) {
  return memory_.allocate(bytes);
}

void null_device::deallocate(void* p, std::size_t bytes) noexcept {
  memory_.deallocate(p, bytes);
}

void* null_device::allocate_pinned(std::size_t bytes) {
  return pinned_.allocate(bytes);
}

void null_device::deallocate_pinned(void* p, std::size_t bytes) noexcept {
  pinned_.deallocate(p, bytes);
}

memory_info null_device::memory() const {
  const std::size_t used = memory_.allocated();
  return {memory_.capacity() - used, memory_.capacity()};
}

stream& null_device::get_stream(stream_role role) {
  const auto i = static_cast<std::size_t>(role);
  MEMWEAVE_EXPECTS(i < streams_.size(), "null device: get_stream of stream_role " +
                                            std::to_string(i) +
                                            ", expected compute, host_to_device or device_to_host");
  return *streams_[i];
}

std::unique_ptr<event> null_device::make_event(const event_options& options) {
  (void)options;  // no work runs on null: its events never make a thread wait
  return std::make_unique<null_event>();
}

}  // namespace memweave::null_backend
