// What a real device does at its peak: the three figures a cost model is made of, read off
// the device itself (a cuda device's attributes and a timed copy), so that a run on a GPU
// plans with that GPU's figures rather than a preset's. The simulated devices (host, null)
// have none of their own: their model is a preset.
#pragma once

#include <optional>

namespace memweave {

struct device_throughput {
  double fp32_flops = 0;          ///< fp32 operations per second (an FMA counts two)
  double memory_bytes_per_s = 0;  ///< device memory
  double link_bytes_per_s = 0;    ///< host link, the slower way; 0 where it was not measured
};

/// The attributes a GPU reports (cudaDeviceGetAttribute), in their units.
struct gpu_attributes {
  int major = 0;  // compute capability
  int minor = 0;
  int multiprocessors = 0;      // cudaDevAttrMultiProcessorCount
  double clock_khz = 0;         // cudaDevAttrClockRate: the peak core clock
  double memory_clock_khz = 0;  // cudaDevAttrMemoryClockRate
  int memory_bus_bits = 0;      // cudaDevAttrGlobalMemoryBusWidth
};

/// fp32 results per clock of one multiprocessor (the CUDA C++ Programming Guide's table of
/// arithmetic instruction throughputs), by compute capability; 0 for one older than 3.0.
int fp32_lanes_per_multiprocessor(int major, int minor) noexcept;

/// The peak fp32 rate (lanes x 2 x clock x multiprocessors) and the memory bandwidth (2 per
/// memory clock, as NVIDIA's datasheets count double data rate, x the bus width) of `a`, with
/// `link_bytes_per_s` as measured; nullopt where an attribute is missing or zero (a driver
/// that does not report it), so that the caller keeps a preset rather than a zero rate.
std::optional<device_throughput> throughput_of(const gpu_attributes& a,
                                               double link_bytes_per_s) noexcept;

}  // namespace memweave
