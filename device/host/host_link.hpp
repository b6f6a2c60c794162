// The host backend's simulated host<->device link, shared by its three streams. Each
// direction is one copy engine: a copy waits for the copies in its direction that reserved
// the link before it, whichever stream issued them, as a GPU's copy engine serves several
// streams. Without it each stream throttled on its own, so a split step's staging copies on
// the compute stream moved beside the swap streams' copies in the same direction at the full
// rate: twice the link's bandwidth (the null device shares its link the same way,
// null/link_timeline). Private to device/.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace memweave::host_backend {

class host_link {
 public:
  using clock = std::chrono::steady_clock;
  enum class direction : std::uint8_t { to_device = 0, to_host = 1 };

  /// `bytes_per_s` > 0: the rate of each direction.
  explicit host_link(double bytes_per_s);

  /// Reserves `bytes` of `d` from now, or from when the reservations made before it end,
  /// whichever is later; returns when the copy is done (the caller sleeps until then).
  /// First reserved, first served. Thread-safe.
  clock::time_point reserve(direction d, std::size_t bytes);

 private:
  const double bytes_per_s_;
  std::mutex mutex_;
  std::array<clock::time_point, 2> free_at_{};  // per direction: when its last copy is done
};

}  // namespace memweave::host_backend
