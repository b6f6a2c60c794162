// The largest batch, or the deepest ResNet, that trains within a budget under a policy:
// found by running the real executor on the null device at each candidate (doubling, then
// bisection). Fitting is not strictly monotonic (fragmentation can make a larger model fit
// where a slightly smaller one does not), so the answer is the largest value the search saw
// fit, with every value up to it that the search tried fitting too.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>

namespace memweave {

struct largest_fit {
  std::int64_t value = 0;  ///< largest fitting batch or n3; 0 when even the smallest fails
  int probes = 0;          ///< planner runs made
  double seconds = 0.0;    ///< time taken
};

/// Searches the largest value in [low, high] for which `fits(value)` is true, assuming it
/// holds at and below a threshold. What `fits` throws ends the search (a stop asked by a
/// signal, the smallest value's own errors).
largest_fit search_largest(std::int64_t low, std::int64_t high,
                           const std::function<bool(std::int64_t)>& fits);

/// "resnet:3,4,6,3" -> {3,4,6,3}; "resnet50" / "resnet101" / "resnet152" -> their blocks.
/// Throws invalid_argument for another network (--max-depth is for the ResNet family).
std::array<std::int64_t, 4> resnet_blocks(const std::string& net);

}  // namespace memweave
