// One direction of the null device's host<->device link, shared by its streams: the copies
// reserved on it so far, as busy intervals of simulated time. Without it each stream had a
// link of its own, so a split step's staging copies on the compute stream ran at the full
// rate beside the swap streams' copies in the same direction: twice the link's bandwidth.
// Private to device/.
#pragma once

#include <map>
#include <mutex>

namespace memweave::null_backend {

class link_timeline {
 public:
  /// Reserves `seconds` of the link from `ready` on in the time earlier reservations left
  /// free: the copy moves in their gaps, so copies that overlap share the link and the one
  /// reserved first keeps its times. Returns when the copy is done (ready + seconds on a
  /// free link). Thread-safe.
  double reserve(double ready, double seconds);
  /// Forgets what ended at or before `t`: no copy is reserved from before it any more (the
  /// least of the streams' clocks), so the intervals stay as few as the copies in flight.
  void forget_before(double t);
  /// The reservations held now (for tests).
  std::size_t intervals() const;

 private:
  mutable std::mutex mutex_;
  std::map<double, double> busy_;  // start -> end: disjoint, none touching another
};

}  // namespace memweave::null_backend
