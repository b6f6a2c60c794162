// The selection rule. Candidates are measured at most once per key; the choice itself is a
// scan of a handful of candidates, cheap enough for every step.
#include "memweave/conv_workspace/conv_workspace_selector.hpp"

#include <algorithm>

#include "memweave/core/config.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/log.hpp"
#include "memweave/core/units.hpp"

namespace memweave {

conv_ws_options conv_ws_options::parse(const std::string& mode, const std::string& what) {
  conv_ws_options o;
  o.source = what;
  if (mode == "dynamic") {
    o.mode = conv_ws_mode::dynamic;
  } else if (mode == "none") {
    o.mode = conv_ws_mode::none;
  } else if (mode == "max") {
    o.mode = conv_ws_mode::max;
  } else if (mode.starts_with("fixed:") && mode.size() > 6) {
    o.mode = conv_ws_mode::fixed;
    o.fixed_algorithm = mode.substr(6);
  } else {
    throw invalid_argument(knob_value(what, mode) +
                           " is not a workspace mode: expected dynamic, none, max or "
                           "fixed:<algorithm> (e.g. fixed:direct); " +
                           std::string(knob_remedy(what)));
  }
  return o;
}

conv_ws_options conv_ws_options::from_environment() {
  conv_ws_options o = parse(option_string("MEMWEAVE_CONV_WS"), "MEMWEAVE_CONV_WS");
  o.reserve_bytes = option_bytes("MEMWEAVE_CONV_WS_RESERVE").value_or(0);
  o.cache_path = option_string("MEMWEAVE_CONV_CACHE");
  return o;
}

std::string conv_ws_options::mode_name() const {
  switch (mode) {
    case conv_ws_mode::dynamic:
      return "dynamic";
    case conv_ws_mode::none:
      return "none";
    case conv_ws_mode::max:
      return "max";
    case conv_ws_mode::fixed:
      return "fixed:" + fixed_algorithm;
  }
  return "dynamic";
}

conv_workspace_selector::conv_workspace_selector(conv_ws_options options, std::string fingerprint)
    : options_(std::move(options)), fingerprint_(std::move(fingerprint)) {
  if (!options_.cache_path.empty()) cache_.load(options_.cache_path, fingerprint_);
}

conv_workspace_selector::~conv_workspace_selector() {
  if (options_.cache_path.empty() || !cache_.dirty()) return;
  try {
    cache_.save(options_.cache_path, fingerprint_);
  } catch (const std::exception& e) {
    log(log_level::warn, e.what());
  }
}

void check_fixed_algorithm(const conv_ws_options& options,
                           const std::vector<conv_candidate>& candidates,
                           const std::string& convolution, std::string_view kind) {
  if (options.mode != conv_ws_mode::fixed) return;
  std::string names;
  for (const auto& c : candidates) {
    if (c.algorithm == options.fixed_algorithm) return;
    names += (names.empty() ? "" : ", ") + c.algorithm;
  }
  throw invalid_argument(knob_value(options.source, options.mode_name()) + " names no " +
                         std::string(kind) + "algorithm of convolution " + convolution +
                         "; available: " + names + "; " + std::string(knob_remedy(options.source)));
}

const std::vector<conv_candidate>& conv_workspace_selector::candidates(const std::string& key,
                                                                       const measure_fn& measure,
                                                                       const runs_fn& runs) {
  if (const auto* found = cache_.find(key)) {
    // A cache file made under another mode may lack the fixed algorithm: measure again
    // (which replaces the entry, or says the algorithm does not exist).
    const bool has_fixed = options_.mode != conv_ws_mode::fixed ||
                           std::any_of(found->begin(), found->end(), [&](const conv_candidate& c) {
                             return c.algorithm == options_.fixed_algorithm;
                           });
    // One that cannot run as the file says would fail its step (a kernel given too small a
    // workspace): the file's word is not taken for it. Checked once per entry (choose_conv
    // looks every step's candidates up); what this process measured needs no check.
    const bool check = runs && !checked_.contains(key);
    const auto refused = check ? std::find_if(found->begin(), found->end(),
                                              [&](const conv_candidate& c) { return !runs(c); })
                               : found->end();
    if (check && refused == found->end()) checked_.insert(key);
    if (refused != found->end()) {
      if (!warned_refused_) {
        log(log_level::warn, "conv algorithm cache '" + options_.cache_path + "': convolution " +
                                 key + ": candidate '" + refused->algorithm + " " +
                                 std::to_string(refused->workspace_bytes) +
                                 "' is not an algorithm of this backend with the workspace it "
                                 "needs; measured again, as is every such entry "
                                 "(MEMWEAVE_CONV_CACHE)");
      }
      warned_refused_ = true;
    } else if (has_fixed) {
      ++hits_;
      return *found;
    }
  }
  std::vector<conv_candidate> measured = measure();
  bool has_zero = false;
  std::string names;
  for (const auto& c : measured) {
    has_zero = has_zero || c.workspace_bytes == 0;
    names += (names.empty() ? "" : ", ") + c.algorithm;
  }
  MEMWEAVE_EXPECTS(has_zero,
                   "convolution " + key + " has no algorithm without workspace among: " + names);
  check_fixed_algorithm(options_, measured, key);
  ++measured_;
  cache_.insert(key, std::move(measured));
  checked_.insert(key);
  return *cache_.find(key);
}

const conv_candidate* pick_conv_candidate(const conv_ws_options& options,
                                          const std::vector<conv_candidate>& candidates,
                                          std::size_t available) {
  const std::size_t budget =
      available > options.reserve_bytes ? available - options.reserve_bytes : 0;
  const conv_candidate* best = nullptr;
  auto better = [](const conv_candidate& a, const conv_candidate* b) {
    return b == nullptr || a.seconds < b->seconds ||
           (a.seconds == b->seconds && a.workspace_bytes < b->workspace_bytes);
  };
  for (const auto& c : candidates) {
    switch (options.mode) {
      case conv_ws_mode::dynamic:
        if (c.workspace_bytes <= budget && better(c, best)) best = &c;
        break;
      case conv_ws_mode::none:
        if (c.workspace_bytes == 0 && better(c, best)) best = &c;
        break;
      case conv_ws_mode::max:
        if (better(c, best)) best = &c;
        break;
      case conv_ws_mode::fixed:
        if (c.algorithm == options.fixed_algorithm) best = &c;
        break;
    }
  }
  return best;
}

const conv_candidate& conv_workspace_selector::choose(const std::vector<conv_candidate>& candidates,
                                                      std::size_t available) const {
  const conv_candidate* best = pick_conv_candidate(options_, candidates, available);
  // candidates() guarantees a zero-workspace candidate and the fixed one.
  if (best == nullptr) throw std::logic_error("conv_workspace_selector: no candidate to choose");
  return *best;
}

}  // namespace memweave
