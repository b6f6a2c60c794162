// What ran on a device's streams, and when: a span per kernel and per copy, so a user sees
// which copies hid under compute (`--trace-timeline`) and the executor can re-plan from
// measured step and copy times (Capuchin) instead of the model's.
//
// How a span is timed, per backend: on `null` it reads the stream's simulated clock right
// before and right after the work is enqueued (a wait on an event moves that clock when it
// is enqueued, so the caller enqueues its waits first); on `host` and `cuda` it enqueues a
// timestamp on the stream before and after the work (a host function on `cuda`), so the
// times are when the stream really ran it. Timestamps of one device share one origin.
//
// Thread-safe: spans may be opened from any thread; spans() reads stamps written by the
// streams, so call it once they are synchronized.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "memweave/device/device.hpp"

namespace memweave {

/// One kernel or copy on one stream.
struct timeline_span {
  stream_role stream = stream_role::compute;
  std::string name;      ///< "conv1 F", "res2a_branch2a B", a tensor's name for a copy
  std::string category;  ///< "kernel", "replay", "offload", "prefetch", ...
  double begin_s = 0.0;  ///< seconds since the timeline's origin
  double end_s = 0.0;
  std::size_t bytes = 0;  ///< copies: bytes moved
  int step = -1;          ///< the route position it belongs to (-1: none)
};

class stream_timeline {
 public:
  explicit stream_timeline(device& dev);
  stream_timeline(const stream_timeline&) = delete;
  stream_timeline& operator=(const stream_timeline&) = delete;

  /// Runs `enqueue` (which puts work on `s`, and nothing else: no waits) between two
  /// timestamps of `s`.
  void span(stream& s, std::string name, std::string category, std::size_t bytes, int step,
            const std::function<void()>& enqueue);

  /// The spans opened since the last clear(), in the order they were opened, with times
  /// relative to the earliest begin among them. Call once the streams are synchronized.
  std::vector<timeline_span> spans() const;
  /// Forgets every span (the streams must be synchronized: no stamp may be pending).
  void clear();
  bool empty() const;

 private:
  struct entry {
    timeline_span span;
    double begin = 0.0, end = 0.0;  // raw stamps
  };
  double now_s() const noexcept;

  bool simulated_;  // null: the streams' simulated clocks
  std::chrono::steady_clock::time_point origin_;
  mutable std::mutex mutex_;
  std::deque<entry> entries_;  // a deque: stamps hold pointers to entries as it grows
};

}  // namespace memweave
