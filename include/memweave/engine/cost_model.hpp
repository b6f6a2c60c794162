// The device the executor's timing model stands for: what the null device charges each
// kernel, what the memory schedule plans with, and what the eviction rule weighs a rebuild
// against a round trip with. A value type carried by executor_options; the defaults are a
// Pascal-class GPU (the paper's TITAN Xp) on PCIe 3.0 x16.
#pragma once

namespace memweave {

/// Throughputs of the modelled device. A kernel costs the larger of its compute time
/// (flops / `flops`) and its memory time (bytes / `memory_bytes_per_s`); a copy between
/// host and device costs bytes / `link_bytes_per_s`.
struct cost_model {
  double flops = 12e12;               ///< fp32 floating-point operations per second
  double memory_bytes_per_s = 500e9;  ///< device-memory bytes per second
  double link_bytes_per_s = 16e9;     ///< host link bytes per second, each way
};

}  // namespace memweave
