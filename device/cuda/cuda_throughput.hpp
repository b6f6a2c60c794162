// A cuda device's own figures for the cost model (device_throughput.hpp): its attributes, and
// its host link timed. Private to device/cuda.
#pragma once

#include <optional>

#include "memweave/device/device_throughput.hpp"

namespace memweave::cuda_backend {

/// The throughput of GPU `ordinal`, which must be current on the calling thread: the peaks
/// from its attributes, the link timed by pinned copies of 64 MiB each way (the best of three,
/// the slower direction, to two significant digits; 0 where the memory for them could not be
/// had). nullopt where the attributes are incomplete. Throws device_error where the runtime
/// fails otherwise.
std::optional<device_throughput> measure_throughput(int ordinal);

}  // namespace memweave::cuda_backend
