#include "memweave/device/device_throughput.hpp"

namespace memweave {

int fp32_lanes_per_multiprocessor(int major, int minor) noexcept {
  switch (major) {
    case 3:
      return 192;  // Kepler
    case 5:
      return 128;  // Maxwell
    case 6:
      return minor == 0 ? 64 : 128;  // GP100 has half the lanes of the other Pascals
    case 7:
      return 64;  // Volta, Turing
    case 8:
      return minor == 0 ? 64 : 128;  // A100 has half the lanes of the other Amperes and Ada
    default:
      // Hopper, Blackwell and (the guide's pattern since Maxwell) what comes after them.
      return major >= 9 ? 128 : 0;
  }
}

std::optional<device_throughput> throughput_of(const gpu_attributes& a,
                                               double link_bytes_per_s) noexcept {
  const int lanes = fp32_lanes_per_multiprocessor(a.major, a.minor);
  if (lanes == 0 || a.multiprocessors <= 0 || a.clock_khz <= 0 || a.memory_clock_khz <= 0 ||
      a.memory_bus_bits <= 0 || !(link_bytes_per_s >= 0)) {
    return std::nullopt;
  }
  device_throughput t;
  t.fp32_flops = 2.0 * lanes * a.multiprocessors * a.clock_khz * 1e3;
  t.memory_bytes_per_s = 2.0 * a.memory_clock_khz * 1e3 * (a.memory_bus_bits / 8.0);
  t.link_bytes_per_s = link_bytes_per_s;
  return t;
}

}  // namespace memweave
