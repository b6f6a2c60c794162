// The named devices of the cost model. Figures are the vendors' datasheet peaks (fp32 without
// tensor cores, since the engine's kernels are fp32; device memory; the host link's raw rate
// each way): the model, like the paper's, ranks plans, it does not predict a real run.
#include "memweave/engine/cost_model.hpp"

#include "memweave/core/error.hpp"
#include "memweave/device/device.hpp"

namespace memweave {
namespace {

struct named_model {
  const char* name;
  cost_model model;
};

const named_model k_presets[] = {
    {"titan_xp", cost_model{12e12, 500e9, 16e9}},
    {"k40", cost_model{4.29e12, 288e9, 16e9}},
    {"h100_pcie5", cost_model{51e12, 2.0e12, 64e9}},
};

}  // namespace

cost_model cost_model::preset(const std::string& name, const std::string& knob) {
  if (name == "auto") return cost_model{};  // no device to ask here (for_device asks it)
  std::string known;
  for (const named_model& p : k_presets) {
    if (name == p.name) return p.model;
    known += known.empty() ? p.name : std::string(", ") + p.name;
  }
  throw invalid_argument(knob + " '" + name + "' is not a known device model: expected auto or " +
                         known);
}

const std::vector<std::string>& cost_model::preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const named_model& p : k_presets) n.emplace_back(p.name);
    return n;
  }();
  return names;
}

cost_model cost_model::of(const device_throughput& t) noexcept {
  cost_model m;
  m.flops = t.fp32_flops;
  m.memory_bytes_per_s = t.memory_bytes_per_s;
  if (t.link_bytes_per_s > 0) m.link_bytes_per_s = t.link_bytes_per_s;
  return m;
}

cost_model cost_model::for_device(device& dev) {
  const std::optional<device_throughput> t = dev.throughput();
  return t ? of(*t) : cost_model{};
}

}  // namespace memweave
