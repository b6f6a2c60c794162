// The solver's settings checked, and the learning-rate schedules parsed and evaluated.
#include "memweave/engine/solver_settings.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"

namespace memweave {

namespace {

void check_range(const std::string& knob, const char* field, float v, double lo, double hi,
                 bool hi_open) {
  const bool ok = std::isfinite(v) && v >= lo && (hi_open ? v < hi : v <= hi);
  if (ok) return;
  // format_number: std::to_string printed -1e-9 as -0.000000, inside the range it names.
  throw invalid_argument(knob + ": " + field + " = " + format_number(v) +
                         ": expected a finite number in [" + format_number(lo) + ", " +
                         format_number(hi) + (hi_open ? ")" : "]"));
}

std::vector<std::string_view> split_colons(std::string_view text) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t colon = text.find(':', start);
    parts.push_back(text.substr(start, colon - start));
    if (colon == std::string_view::npos) return parts;
    start = colon + 1;
  }
}

}  // namespace

void solver_settings::validate(const std::string& knob) const {
  check_range(knob, "learning_rate", learning_rate, 0.0, 1e3, false);
  check_range(knob, "momentum", momentum, 0.0, 1.0, true);
  check_range(knob, "weight_decay", weight_decay, 0.0, 1.0, false);
}

lr_schedule lr_schedule::parse(std::string_view text, const std::string& knob) {
  const std::vector<std::string_view> parts = split_colons(text);
  constexpr std::int64_t k_max = std::numeric_limits<std::int64_t>::max();
  lr_schedule s;
  if (parts.size() == 1 && parts[0] == "constant") return s;
  if (parts.size() == 3 && parts[0] == "step") {
    s.type = kind::step;
    s.every = parse_int(parts[1], knob + " (step EVERY)", 1, k_max);
    s.gamma = parse_double(parts[2], knob + " (step GAMMA)", 1e-12, 1.0);
    return s;
  }
  if (parts.size() == 2 && parts[0] == "cosine") {
    s.type = kind::cosine;
    s.t_max = parse_int(parts[1], knob + " (cosine T_MAX)", 1, k_max);
    return s;
  }
  throw invalid_argument(knob_value(knob, text) +
                         " is not a learning-rate schedule: expected constant, "
                         "step:EVERY:GAMMA (e.g. step:30:0.1) or cosine:T_MAX (e.g. cosine:100); " +
                         std::string(knob_remedy(knob)));
}

double lr_schedule::rate(double base, std::int64_t it) const noexcept {
  double r = base;
  switch (type) {
    case kind::constant:
      break;
    case kind::step:
      r = base * std::pow(gamma, static_cast<double>(it / every));
      break;
    case kind::cosine: {
      const double t = static_cast<double>(std::min(it, t_max)) / static_cast<double>(t_max);
      r = base * 0.5 * (1.0 + std::cos(std::numbers::pi * t));
      break;
    }
  }
  if (it < warmup) r *= static_cast<double>(it + 1) / static_cast<double>(warmup);
  return r;
}

std::string lr_schedule::describe() const {
  std::string d = "constant";
  if (type == kind::step) {
    char g[32];
    std::snprintf(g, sizeof g, "%g", gamma);
    d = "step:" + std::to_string(every) + ":" + g;
  } else if (type == kind::cosine) {
    d = "cosine:" + std::to_string(t_max);
  }
  if (warmup > 0) d += " warmup " + std::to_string(warmup);
  return d;
}

}  // namespace memweave
