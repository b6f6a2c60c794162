// Cost-aware recomputation (§3.4 of the SuperNeurons paper): which forward tensors to drop
// after the forward pass has used them, and which forwards to re-run, in which order, before
// each backward step, under one of three strategies.
//
// Terms. Layers are named by their position p in the graph (forward route order, 0..N-1);
// "backward step p" is the backward of layer p (route step 2N-1-p), and backward steps run
// from p = N-1 down to 0. A layer is a checkpoint when the graph says so or, with
// fan_checkpoints, when it is a cheap layer whose tensors two or more layers' forwards read.
// A forward tensor is
//   kept      written by a checkpoint, marked keep, or read by a backward step right after
//             its last forward use (the loss's own output): held, resident or offloaded by
//             the tensor pool, until last_use (below);
//   dropped   written by a cheap layer and read by some backward step: freed after its last
//             forward use, rebuilt before the backward steps that read it;
//   transient read by no backward step: dies after its last forward use (liveness); a cheap
//             one is rebuilt when a replay needs it as an input.
// A segment is a connected component of cheap layers, two cheap layers being connected when
// one's forward reads a dropped or transient tensor of the other: on a chain, a run of
// cheap layers between two checkpoints; on a DAG, it follows fans and joins, so rebuilding
// any tensor of a segment re-runs layers of that segment only, reading kept tensors (of
// checkpoints, or keep-marked) at its border. A rebuild re-runs the smallest set of layers
// of the segment that produces the wanted tensors from what is resident, in route order
// (a topological order of the DAG).
//
// Strategies, per segment:
//   speed_centric   at the segment's first need (the first backward step reading one of its
//                   dropped tensors), rebuild all its dropped tensors at once; each is freed
//                   after the last backward step reading it (at the latest, the segment's
//                   last need; speed_holds_to_segment_end: at the segment's last need, as
//                   the paper has it), each intermediate right after its last reader in the
//                   replay. One replay per layer: O(N) extra forwards.
//   memory_centric  before every backward step, rebuild just the dropped tensors it reads;
//                   free them right after the step and the intermediates right after their
//                   last reader in the replay. O(N^2) extra forwards on a long segment.
//   cost_aware      speed_centric for a segment when Σ l_i^f (the layers its full rebuild
//                   re-runs) + l_seg^b (l^b of the backward step that triggers the rebuild,
//                   as at l_4^b in Fig. 9a) <= l_peak = max_i l_i, memory_centric otherwise
//                   (§3.4, steps 1-2). The formula is the paper's estimate, not a bound (a
//                   later step of the segment may hold less but need more, and on a DAG the
//                   holding windows of segments overlap), so the plan is then simulated and,
//                   while its peak exceeds l_peak with speed-centric tensors held at the peak
//                   moment, the segment holding most there is switched to memory_centric.
//
// Counting rule: one extra forward computation per replayed layer forward (a replay of a
// layer in a batch of several is one; the same layer replayed before two backward steps is
// two). extra_forwards() is the paper's Table 1 "extra" column.
//
// Memory model (the paper's layer granularity, as in its §3.4 analysis and Fig. 10c): while
// a step runs, resident = the tensors the step touches (l_i^f for a forward or a replayed
// forward, l_i^b for a backward; parameters included) + the rebuilt tensors the plan holds
// at that moment that the step does not touch. Everything else (kept tensors, gradients
// waiting for a later step, other layers' parameters) is the tensor pool's business: it may
// be offloaded between uses. peak_bytes() is the largest such value over every forward step,
// replayed forward and backward step; its lower bound is max_i l_i, which cost_aware reaches
// on the zoo networks.
//
// Executor protocol (one iteration):
//   forward step p: run the forward of layer p as usual; then free drops_after_forward(p)
//     (dropped tensors whose last forward use is p; liveness frees transient ones as usual).
//     Kept tensors stay until last_use: keep them resident, or let the tensor pool offload
//     and prefetch them.
//   backward step p (p = N-1 .. 0): for each action a of replays(backward(p)), in order:
//     make the layer's forward_reads resident (each is kept, or was rebuilt and not yet
//     freed), run layer a.layer's forward in replay mode (Replay contract below) writing
//     rebuilds(a) (tensors of that layer already resident may be recomputed into scratch
//     and discarded), then free frees(a). Run the backward step. Then free
//     frees(backward(p)).
//   A rebuilt tensor is "resident until freed": an executor that also runs a tensor cache
//   inserts it like any tensor and must not evict it before its free; if it does (LRU under
//   pressure, TSPLIT §V-D), it rebuilds it on demand with rebuild_order() before its next
//   reader.
// Replay contract: a replayed forward must reproduce the values of the first forward and
// have no other effect: BN computes its batch statistics but does not update its running
// statistics again; DROPOUT regenerates the same mask (the same seed per layer and
// iteration); SOFTMAX does not add to the loss again.
//
// Immutable after construction; const use may be shared across threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "memweave/recompute/recompute_graph.hpp"

namespace memweave {

enum class recompute_strategy { speed_centric, memory_centric, cost_aware };

/// "speed_centric", "memory_centric", "cost_aware".
const char* to_string(recompute_strategy s) noexcept;
/// The inverse of to_string (also "speed", "memory", "cost"); invalid_argument otherwise.
recompute_strategy parse_recompute_strategy(std::string_view name);

struct recompute_options {
  recompute_strategy strategy = recompute_strategy::cost_aware;
  /// Treat cheap layers whose forward tensors several layers' forwards read (fans: a ResNet
  /// block's output, an Inception module's CONCAT, a DenseNet block's input) as checkpoints.
  /// Without it, identity shortcuts chain all the blocks of a ResNet stage into one segment,
  /// whose memory-centric rebuilds grow quadratically with the stage's depth.
  bool fan_checkpoints = true;
  /// cost_aware's threshold; 0: l_peak = max_i l_i (the paper's).
  std::size_t threshold_bytes = 0;
  /// Speed-centric segments hold every rebuilt tensor until the segment's last need, as the
  /// paper describes, instead of freeing each after its own last reader (the default: the
  /// same replays, never more memory).
  bool speed_holds_to_segment_end = false;
};

/// Layer position in the graph (forward route order).
using recompute_pos = std::uint32_t;
inline constexpr recompute_pos no_position = std::numeric_limits<recompute_pos>::max();

/// What happens to a forward tensor (see the header comment).
enum class tensor_fate { kept, dropped, transient };
/// "kept", "dropped", "transient".
const char* to_string(tensor_fate f) noexcept;

/// A forward tensor of the graph, as planned.
struct recompute_tensor_info {
  recompute_key key = 0;
  std::size_t bytes = 0;
  recompute_pos producer = no_position;  ///< the layer writing it
  tensor_fate fate = tensor_fate::transient;
  recompute_pos last_forward_use = no_position;  ///< the last forward step touching it
  /// Kept: the backward step (its replays included) that uses it last, no_position when only
  /// forward steps use it. Dropped: the last backward step reading it.
  recompute_pos last_use = no_position;
};

enum class segment_mode { speed_centric, memory_centric };
/// "speed_centric" / "memory_centric".
const char* to_string(segment_mode m) noexcept;

/// A recomputation segment.
struct recompute_segment {
  std::vector<recompute_pos> layers;   ///< its cheap layers, route order
  std::vector<recompute_key> dropped;  ///< its dropped tensors, production order
  segment_mode mode = segment_mode::speed_centric;
  std::size_t rebuild_forward_bytes = 0;   ///< Σ l_i^f over the layers its full rebuild re-runs
  std::size_t trigger_backward_bytes = 0;  ///< l_seg^b: l^b of its first need (Fig. 9a's l_4^b)
  std::size_t window_backward_bytes = 0;   ///< max l^b over backward steps first..last need
  recompute_pos first_need = no_position;  ///< first backward step reading a dropped tensor
  recompute_pos last_need = no_position;   ///< last such step
  /// rebuild_forward_bytes + trigger_backward_bytes: the speed-centric memcost of §3.4.
  std::size_t speed_cost() const noexcept { return rebuild_forward_bytes + trigger_backward_bytes; }
};

/// One re-run forward. Its lists are read through recompute_plan::rebuilds / frees.
struct replay_action {
  recompute_pos layer = no_position;                   ///< the layer whose forward runs again
  std::uint32_t segment = 0;                           ///< index in segments()
  std::uint32_t rebuilds_begin = 0, rebuilds_end = 0;  // range in the plan's key pool
  std::uint32_t frees_begin = 0, frees_end = 0;        // range in the plan's key pool
};

/// The recomputation around one backward step.
struct backward_step_plan {
  recompute_pos layer = no_position;                 ///< whose backward this is
  std::uint32_t replays_begin = 0, replays_end = 0;  // range in the plan's replay list
  std::uint32_t frees_begin = 0, frees_end = 0;      // range in the plan's key pool
  std::size_t peak_bytes = 0;  ///< most resident during its replays and the step (model above)
  std::size_t held_bytes = 0;  ///< rebuilt bytes held while the step runs (read by it or not)
};

/// Where the peak happens.
struct recompute_peak {
  std::size_t bytes = 0;
  recompute_pos layer = no_position;  ///< the layer of the step
  bool backward = false;              ///< false: its forward step
  std::size_t replay = no_replay;     ///< index among the step's replays, or no_replay (the step)
  static constexpr std::size_t no_replay = std::numeric_limits<std::size_t>::max();
};

class recompute_plan {
 public:
  /// Plans `graph` under `options`. Throws invalid_argument for a graph whose keys repeat, a
  /// forward read of a tensor no earlier layer writes, a backward read of a tensor no layer
  /// writes, or a negative / non-finite forward cost. O(N + reads + plan size).
  explicit recompute_plan(const recompute_graph& graph, const recompute_options& options = {});

  recompute_strategy strategy() const noexcept { return strategy_; }
  /// N.
  std::size_t layer_count() const noexcept { return layers_.size(); }
  /// Whether layer p is a checkpoint here (the graph's mark, or a fan with fan_checkpoints).
  bool is_checkpoint(recompute_pos p) const noexcept { return layers_[p].checkpoint; }
  /// The segment of cheap layer p (index in segments()), no_position for a checkpoint.
  std::uint32_t segment_of(recompute_pos p) const noexcept { return layers_[p].segment; }

  /// Every forward tensor, in production order; and one by key (nullptr when unknown).
  std::span<const recompute_tensor_info> tensors() const noexcept { return tensors_; }
  const recompute_tensor_info* find(recompute_key key) const;

  /// Dropped tensors to free after forward step p.
  std::span<const recompute_key> drops_after_forward(recompute_pos p) const noexcept;

  std::span<const recompute_segment> segments() const noexcept { return segments_; }

  /// The plan of backward step p (0 <= p < N, unchecked).
  const backward_step_plan& backward(recompute_pos p) const noexcept { return steps_[p]; }
  /// Its replays, in order; each action's rebuilt tensors and frees; the step's frees.
  std::span<const replay_action> replays(const backward_step_plan& s) const noexcept;
  std::span<const recompute_key> rebuilds(const replay_action& a) const noexcept;
  std::span<const recompute_key> frees(const replay_action& a) const noexcept;
  std::span<const recompute_key> frees(const backward_step_plan& s) const noexcept;
  /// All replays of the iteration, backward order.
  std::span<const replay_action> all_replays() const noexcept { return replays_; }

  /// Extra forward computations per iteration (one per replay), and their summed cost.
  std::size_t extra_forwards() const noexcept { return replays_.size(); }
  double extra_forward_cost() const noexcept { return extra_cost_; }
  /// Number of segments run speed-centric / memory-centric (segments with dropped tensors).
  std::size_t speed_segments() const noexcept;
  std::size_t memory_segments() const noexcept;

  /// l_peak = max_i l_i (the lower bound of peak_bytes), and the threshold cost_aware used.
  std::size_t max_layer_bytes() const noexcept { return max_layer_bytes_; }
  std::size_t threshold_bytes() const noexcept { return threshold_; }
  /// The peak of the memory model, and where it happens.
  std::size_t peak_bytes() const noexcept { return peak_.bytes; }
  const recompute_peak& peak() const noexcept { return peak_; }
  /// Bytes freed by drops (Σ over dropped tensors).
  std::size_t dropped_bytes() const noexcept { return dropped_bytes_; }

  /// The layers to re-run, in route order, to make `wanted` resident when the tensors for
  /// which `resident` returns true are (kept tensors are taken as resident always). For an
  /// executor whose cache evicted a rebuilt tensor. Throws invalid_argument on unknown keys.
  std::vector<recompute_pos> rebuild_order(
      std::span<const recompute_key> wanted,
      const std::function<bool(recompute_key)>& resident = {}) const;

  /// A readable account: strategy, counts, segments, drops and the replays of each step.
  std::string describe() const;

 private:
  struct layer_rec {
    std::uint64_t id = 0;
    std::string name;
    bool checkpoint = false;
    std::uint32_t segment = no_position;
    std::size_t forward_bytes = 0, backward_bytes = 0;
    double forward_cost = 0;
    std::uint32_t fr_begin = 0, fr_end = 0;      // forward reads (tensor indices) in refs_
    std::uint32_t prod_begin = 0, prod_end = 0;  // produced tensor indices (contiguous)
    std::uint32_t br_begin = 0, br_end = 0;      // backward reads in refs_
  };
  struct builder;
  friend struct builder;

  recompute_strategy strategy_;
  std::vector<layer_rec> layers_;
  std::vector<std::uint32_t> refs_;  // tensor indices of forward and backward reads
  std::vector<recompute_tensor_info> tensors_;
  std::vector<char> absent_;  // per tensor: dropped, or transient of a cheap layer
  std::unordered_map<recompute_key, std::uint32_t> index_;
  std::vector<std::uint32_t> drop_offsets_;  // per forward step, into drop_keys_
  std::vector<recompute_key> drop_keys_;
  std::vector<recompute_segment> segments_;
  std::vector<backward_step_plan> steps_;  // by position
  std::vector<replay_action> replays_;
  std::vector<recompute_key> keys_;  // rebuild and free lists
  double extra_cost_ = 0;
  std::size_t max_layer_bytes_ = 0;
  std::size_t threshold_ = 0;
  std::size_t dropped_bytes_ = 0;
  recompute_peak peak_;
};

}  // namespace memweave
