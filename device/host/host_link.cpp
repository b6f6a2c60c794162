#include "device/host/host_link.hpp"

#include <algorithm>

namespace memweave::host_backend {

host_link::host_link(double bytes_per_s) : bytes_per_s_(bytes_per_s) {}

host_link::clock::time_point host_link::reserve(direction d, std::size_t bytes) {
  const auto span = std::chrono::duration_cast<clock::duration>(
      std::chrono::duration<double>(static_cast<double>(bytes) / bytes_per_s_));
  const clock::time_point now = clock::now();
  std::lock_guard lock(mutex_);
  clock::time_point& free_at = free_at_[static_cast<std::size_t>(d)];
  free_at = std::max(free_at, now) + span;
  return free_at;
}

}  // namespace memweave::host_backend
