// Dynamic convolution-workspace selection (§3.5 of the SuperNeurons paper): at each
// convolution step, after the step's functional tensors are allocated, the fastest
// algorithm whose workspace fits the memory the heap can still hand out (its largest free
// run, less a reserve). Candidates are measured once per distinct convolution and cached.
//
// Modes (MEMWEAVE_CONV_WS): dynamic (default); none (always the algorithm with no
// workspace); max (the fastest regardless: the step fails if it does not fit); fixed:<name>
// (one algorithm everywhere, as the bit-identity oracle needs: algorithms sum in different
// orders).
//
// Not thread-safe: one executor drives one selector.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "memweave/conv_workspace/conv_algorithm_cache.hpp"

namespace memweave {

enum class conv_ws_mode { dynamic, none, max, fixed };

struct conv_ws_options {
  conv_ws_mode mode = conv_ws_mode::dynamic;
  std::string fixed_algorithm;    ///< for conv_ws_mode::fixed
  std::size_t reserve_bytes = 0;  ///< left free when sizing a workspace
  std::string cache_path;         ///< load/save measured candidates here ("" = no file)
  /// The knob the mode came from ("MEMWEAVE_CONV_WS", "--conv-ws"), named in errors.
  std::string source = "MEMWEAVE_CONV_WS";
  /// "dynamic", "none", "max" or "fixed:<name>"; invalid_argument naming `what` otherwise.
  static conv_ws_options parse(const std::string& mode, const std::string& what);
  /// MEMWEAVE_CONV_WS, MEMWEAVE_CONV_WS_RESERVE, MEMWEAVE_CONV_CACHE.
  static conv_ws_options from_environment();
  /// "dynamic", "fixed:direct", ...
  std::string mode_name() const;
};

/// Under `options` fixed, that `candidates` (of convolution `convolution`, `kind` "" or
/// "host ") hold the named algorithm: invalid_argument naming the knob and the ones
/// available otherwise. Nothing under the other modes.
void check_fixed_algorithm(const conv_ws_options& options,
                           const std::vector<conv_candidate>& candidates,
                           const std::string& convolution, std::string_view kind = "");

/// The choice among `candidates` under `options` when `available` bytes can be handed out
/// (before the reserve is taken off): dynamic, the fastest within them; none, the fastest
/// without a workspace; max, the fastest; fixed, the named one. Ties go to the smaller
/// workspace. nullptr where none qualifies.
const conv_candidate* pick_conv_candidate(const conv_ws_options& options,
                                          const std::vector<conv_candidate>& candidates,
                                          std::size_t available);

class conv_workspace_selector {
 public:
  using measure_fn = std::function<std::vector<conv_candidate>()>;
  /// Whether a candidate runs on this backend as it says: an algorithm it has, with at least
  /// the workspace that algorithm needs at the key's shape.
  using runs_fn = std::function<bool(const conv_candidate&)>;

  /// `fingerprint` names what timings are valid for (see conv_algorithm_cache); the cache
  /// file, when set, is loaded now and saved on destruction if anything was measured.
  conv_workspace_selector(conv_ws_options options, std::string fingerprint);
  ~conv_workspace_selector();
  conv_workspace_selector(const conv_workspace_selector&) = delete;
  conv_workspace_selector& operator=(const conv_workspace_selector&) = delete;

  const conv_ws_options& options() const noexcept { return options_; }

  /// The candidates of `key`: from the cache, else from `measure()` (then cached). They
  /// must include one with no workspace (invalid_argument otherwise) and, in fixed mode,
  /// the fixed algorithm (invalid_argument listing the available ones otherwise). A cached
  /// entry with a candidate `runs` refuses (a cache file edited by hand, or of an older
  /// version: an unknown algorithm, too small a workspace) is measured again, with a warning
  /// naming the file and the candidate.
  const std::vector<conv_candidate>& candidates(const std::string& key, const measure_fn& measure,
                                                const runs_fn& runs = {});

  /// The choice among `candidates` when `available` bytes can be handed out (before the
  /// reserve is taken off): see the modes above. Ties go to the smaller workspace.
  const conv_candidate& choose(const std::vector<conv_candidate>& candidates,
                               std::size_t available) const;

  /// Measurements made (cache misses) and cache hits so far.
  std::size_t measured() const noexcept { return measured_; }
  std::size_t hits() const noexcept { return hits_; }
  const conv_algorithm_cache& cache() const noexcept { return cache_; }

 private:
  conv_ws_options options_;
  std::string fingerprint_;
  conv_algorithm_cache cache_;
  std::size_t measured_ = 0;
  std::size_t hits_ = 0;
  bool warned_refused_ = false;              // a cached candidate was refused (said once)
  std::unordered_set<std::string> checked_;  // keys whose candidates run as they say
};

}  // namespace memweave
