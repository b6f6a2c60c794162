#include "memweave/device/stream_timeline.hpp"

#include <algorithm>
#include <limits>

namespace memweave {

stream_timeline::stream_timeline(device& dev)
    : simulated_(!dev.touches_memory()), origin_(std::chrono::steady_clock::now()) {}

double stream_timeline::now_s() const noexcept {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin_).count();
}

void stream_timeline::span(stream& s, std::string name, std::string category, std::size_t bytes,
                           int step, const std::function<void()>& enqueue) {
  entry* e = nullptr;
  {
    std::lock_guard lock(mutex_);
    entries_.push_back(
        {timeline_span{s.role(), std::move(name), std::move(category), 0.0, 0.0, bytes, step}, 0.0,
         0.0});
    e = &entries_.back();
  }
  if (simulated_) {
    // The null stream's clock moves when work is enqueued: read it around the enqueue.
    e->begin = s.simulated_time_s();
    enqueue();
    e->end = s.simulated_time_s();
    return;
  }
  // The stamps run on the stream, in order with the work; the stream's synchronization
  // orders their writes before spans() reads them.
  s.launch([this, e] { e->begin = now_s(); });
  enqueue();
  s.launch([this, e] { e->end = now_s(); });
}

std::vector<timeline_span> stream_timeline::spans() const {
  std::lock_guard lock(mutex_);
  double origin = std::numeric_limits<double>::infinity();
  for (const entry& e : entries_) origin = std::min(origin, e.begin);
  std::vector<timeline_span> out;
  out.reserve(entries_.size());
  for (const entry& e : entries_) {
    timeline_span s = e.span;
    s.begin_s = e.begin - origin;
    s.end_s = std::max(e.end, e.begin) - origin;
    out.push_back(std::move(s));
  }
  return out;
}

void stream_timeline::clear() {
  std::lock_guard lock(mutex_);
  entries_.clear();
}

bool stream_timeline::empty() const {
  std::lock_guard lock(mutex_);
  return entries_.empty();
}

}  // namespace memweave
