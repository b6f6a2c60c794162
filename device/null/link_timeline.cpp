#include "device/null/link_timeline.hpp"

#include <algorithm>
#include <iterator>

namespace memweave::null_backend {

double link_timeline::reserve(double ready, double seconds) {
  if (!(seconds > 0.0)) return ready;
  std::lock_guard lock(mutex_);
  // The interval that holds `ready` (or ends at it) delays the copy's start to its end, and
  // the copy joins it.
  auto next = busy_.upper_bound(ready);
  double start = ready;
  double at = ready;
  if (next != busy_.begin()) {
    const auto before = std::prev(next);
    if (before->second >= ready) {
      start = before->first;
      at = before->second;
      busy_.erase(before);
    }
  }
  // Fill the gaps from `at` on until the copy's seconds are spent; every busy interval
  // passed (and one that starts just where the copy ends) joins one interval with it.
  double left = seconds;
  double end = at;
  while (true) {
    // Past the last interval the link is free for good (compared as such: at + left - at
    // may round below left).
    if (next == busy_.end() || next->first - at >= left) {
      end = at + left;
      if (next != busy_.end() && next->first <= end) {
        end = std::max(end, next->second);
        next = busy_.erase(next);
      }
      break;
    }
    left -= next->first - at;
    at = next->second;
    next = busy_.erase(next);
  }
  busy_.emplace(start, end);
  // The copy is done when its last second moved: where the filling stopped, not the end of
  // an interval it joined after it.
  return at + left;
}

void link_timeline::forget_before(double t) {
  std::lock_guard lock(mutex_);
  auto it = busy_.begin();
  while (it != busy_.end() && it->second <= t) it = busy_.erase(it);
}

std::size_t link_timeline::intervals() const {
  std::lock_guard lock(mutex_);
  return busy_.size();
}

}  // namespace memweave::null_backend
