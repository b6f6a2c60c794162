// `memweave plan --max-image-side`: the largest input side, a multiple of 32 (the total
// stride of the zoo's five-stage networks: every feature map then has a whole side), whose
// plan fits --budget at --batch, per policy. Found with largest_fit.hpp's search (doubling,
// then bisection) over the null device; each policy's plan at its side is the report's row,
// printed and written to --json/--csv/--svg (with "search": "max_image_side").
#pragma once

#include <cstdint>
#include <ostream>

#include "network_run.hpp"

namespace memweave {

/// The step of the search: sides are multiples of it.
inline constexpr std::int64_t k_image_side_step = 32;

/// Runs the search for every policy of `o` (a zoo network; o.budget_bytes set, no
/// --image-side). Returns 0 when some policy fits at the smallest side, else 1.
int plan_max_image_side(network_run_options o, std::ostream& out);

}  // namespace memweave
