// The device the executor's timing model stands for: what the null device charges each
// kernel, what the memory schedule plans with, and what the eviction rule weighs a rebuild
// against a round trip with. A value type carried by executor_options; the defaults are a
// Pascal-class GPU (the paper's TITAN Xp) on PCIe 3.0 x16.
#pragma once

#include <string>
#include <vector>

namespace memweave {

class device;
struct device_throughput;

/// Throughputs of the modelled device. A kernel costs the larger of its compute time
/// (flops / `flops`) and its memory time (bytes / `memory_bytes_per_s`); a copy between
/// host and device costs bytes / `link_bytes_per_s`.
struct cost_model {
  double flops = 12e12;               ///< fp32 floating-point operations per second
  double memory_bytes_per_s = 500e9;  ///< device-memory bytes per second
  double link_bytes_per_s = 16e9;     ///< host link bytes per second, each way

  /// A named device (MEMWEAVE_COST_MODEL, `--cost-model`):
  ///   titan_xp   the default above (the SuperNeurons paper's GPU; PCIe 3.0 x16)
  ///   k40        Tesla K40: 4.29 TFLOP/s fp32, 288 GB/s GDDR5, PCIe 3.0 x16
  ///   h100_pcie5 H100 PCIe: 51 TFLOP/s fp32 (CUDA cores, no tensor cores), 2.0 TB/s HBM2e,
  ///              PCIe 5.0 x16 (64 GB/s each way)
  ///   auto       the option's default: titan_xp here, where there is no device to ask;
  ///              for_device asks the device
  /// Throws invalid_argument naming `knob`, the value and the known names otherwise.
  static cost_model preset(const std::string& name, const std::string& knob = "cost model");
  /// The names preset() knows, in the order above.
  static const std::vector<std::string>& preset_names();
  /// A device's own figures (device::throughput); a link it did not time (0) is the
  /// default's, PCIe 3.0 x16.
  static cost_model of(const device_throughput& t) noexcept;
  /// "auto" with a device to ask: its own figures where it has them (a GPU:
  /// of(*dev.throughput())), the default above elsewhere (the simulated devices, which stand
  /// for no GPU of their own).
  static cost_model for_device(device& dev);
};

}  // namespace memweave
