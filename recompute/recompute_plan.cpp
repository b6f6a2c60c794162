// The recomputation planner. Invariants of a finished plan: every tensor a backward step or a
// replay reads is kept or held (rebuilt and not yet freed) at that moment; a replay rebuilds
// only absent tensors (dropped or transient ones of cheap layers) that are not held; every
// rebuilt tensor is freed exactly once, after its last reader in the replay batch or after a
// backward step, and nothing is held after backward step 0; replays re-run cheap layers only.
// These are checked while the plan is built (a violation is a bug: std::logic_error).
//
// Cost: O(N + tensors + reads) to analyse, O(Σ rebuild closure sizes) to emit the replays
// (linear for speed_centric; quadratic in a segment's depth for memory_centric), and for
// cost_aware one more emission per demoted segment (rare: only where holding windows of
// speed-centric segments overlap on a DAG).
//
// Immutable after construction; no shared state, so planning is thread-safe per plan.
#include "memweave/recompute/recompute_plan.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <utility>

#include "memweave/core/error.hpp"

namespace memweave {

const char* to_string(recompute_strategy s) noexcept {
  switch (s) {
    case recompute_strategy::speed_centric:
      return "speed_centric";
    case recompute_strategy::memory_centric:
      return "memory_centric";
    case recompute_strategy::cost_aware:
      return "cost_aware";
  }
  return "?";
}

recompute_strategy parse_recompute_strategy(std::string_view name) {
  if (name == "speed_centric" || name == "speed") return recompute_strategy::speed_centric;
  if (name == "memory_centric" || name == "memory") return recompute_strategy::memory_centric;
  if (name == "cost_aware" || name == "cost") return recompute_strategy::cost_aware;
  throw invalid_argument("unknown recomputation strategy '" + std::string(name) +
                         "'; expected speed_centric, memory_centric or cost_aware");
}

const char* to_string(tensor_fate f) noexcept {
  switch (f) {
    case tensor_fate::kept:
      return "kept";
    case tensor_fate::dropped:
      return "dropped";
    case tensor_fate::transient:
      return "transient";
  }
  return "?";
}

const char* to_string(segment_mode m) noexcept {
  return m == segment_mode::speed_centric ? "speed_centric" : "memory_centric";
}

namespace {

constexpr std::uint32_t none32 = std::numeric_limits<std::uint32_t>::max();

std::uint32_t checked_u32(std::size_t n, const char* what) {
  if (n >= none32)
    throw invalid_argument(std::string("recompute_plan: the plan needs ") + std::to_string(n) +
                           " " + what +
                           ", more than 2^32-1; plan a smaller graph, or use "
                           "fan_checkpoints / cost_aware to avoid quadratic replays");
  return static_cast<std::uint32_t>(n);
}

// Range maximum over a fixed array, O(1) per query after O(n log n) set-up.
class range_max {
 public:
  explicit range_max(const std::vector<std::size_t>& v) {
    const std::size_t n = v.size();
    table_.push_back(v);
    for (std::size_t w = 1; 2 * w <= n; w *= 2) {
      const std::vector<std::size_t>& prev = table_.back();
      std::vector<std::size_t> next(n - 2 * w + 1);
      for (std::size_t i = 0; i < next.size(); ++i) next[i] = std::max(prev[i], prev[i + w]);
      table_.push_back(std::move(next));
    }
  }
  // max of v[lo..hi], lo <= hi.
  std::size_t query(std::size_t lo, std::size_t hi) const {
    std::size_t level = 0;
    while ((std::size_t{2} << level) <= hi - lo + 1) ++level;
    return std::max(table_[level][lo], table_[level][hi + 1 - (std::size_t{1} << level)]);
  }

 private:
  std::vector<std::vector<std::size_t>> table_;
};

}  // namespace

// Everything the analysis computes once, and the emission of replays for given modes.
struct recompute_plan::builder {
  recompute_plan& plan;
  std::size_t n = 0;         // layers
  std::size_t t = 0;         // tensors
  std::vector<char> absent;  // per tensor: dropped or transient of a cheap layer
  std::vector<recompute_pos> max_reader, min_reader;  // backward readers (no_position: none)
  std::vector<std::uint32_t> need_off, need;    // per backward position: dropped tensors it reads
  std::vector<std::uint32_t> first_off, first;  // per position: segments whose first need it is
  std::vector<std::uint32_t> seg_dropped_off, seg_dropped;  // per segment: dropped tensor indices

  // Closure scratch (stamped, so nothing is cleared per call).
  std::vector<std::uint32_t> layer_mark;
  std::uint32_t stamp = 0;
  std::vector<recompute_pos> stack;

  // Emission state.
  bool hold_to_segment_end = false;
  std::vector<char> held;
  std::size_t held_bytes = 0;
  std::size_t speed_held_bytes = 0;  // the part of held_bytes from speed-centric segments
  std::size_t peak_speed_held = 0;   // untouched speed-centric bytes at the peak moment
  std::vector<std::vector<std::uint32_t>> pending;  // per backward position: frees after it
  std::vector<std::uint32_t> batch_index;           // per tensor: scratch
  std::vector<std::uint32_t> free_at;               // per tensor: scratch
  std::vector<std::uint32_t> kept_use;              // per tensor: last backward use (kept)

  explicit builder(recompute_plan& p) : plan(p) {}

  const layer_rec& L(recompute_pos p) const { return plan.layers_[p]; }
  std::span<const std::uint32_t> fr(recompute_pos p) const {
    return {plan.refs_.data() + L(p).fr_begin, plan.refs_.data() + L(p).fr_end};
  }
  std::span<const std::uint32_t> br(recompute_pos p) const {
    return {plan.refs_.data() + L(p).br_begin, plan.refs_.data() + L(p).br_end};
  }

  // The layers to re-run, sorted by position, to produce `wanted` (tensor indices) when the
  // tensors with is_resident(i) true are resident. Absent tensors only are ever rebuilt.
  template <class Resident>
  void closure(std::span<const std::uint32_t> wanted, Resident&& is_resident,
               std::vector<recompute_pos>& out) {
    out.clear();
    if (++stamp == 0) {
      std::fill(layer_mark.begin(), layer_mark.end(), 0);
      stamp = 1;
    }
    auto visit = [&](std::uint32_t ti) {
      if (!absent[ti] || is_resident(ti)) return;
      const recompute_pos p = plan.tensors_[ti].producer;
      if (layer_mark[p] == stamp) return;
      layer_mark[p] = stamp;
      stack.push_back(p);
    };
    for (std::uint32_t ti : wanted) visit(ti);
    while (!stack.empty()) {
      const recompute_pos p = stack.back();
      stack.pop_back();
      out.push_back(p);
      for (std::uint32_t r : fr(p)) visit(r);
    }
    std::sort(out.begin(), out.end());
  }

  void analyse(const recompute_graph& g, const recompute_options& o);
  void make_segments();
  std::vector<segment_mode> cost_aware_modes();
  // Emits the plan's steps and replays for `modes`. With probe_step != no_position, returns
  // instead the untouched held bytes per segment at the sub-step (probe_step, probe_replay).
  std::vector<std::size_t> emit(const std::vector<segment_mode>& modes,
                                recompute_pos probe_step = no_position,
                                std::size_t probe_replay = 0);
};

void recompute_plan::builder::analyse(const recompute_graph& g, const recompute_options& o) {
  n = g.layers.size();
  if (n == 0)
    throw invalid_argument(
        "recompute_plan: the graph has no layers; give the layers of one training iteration "
        "in forward route order");
  checked_u32(n, "layers");
  plan.layers_.resize(n);
  std::size_t total = 0;
  for (const recompute_layer& l : g.layers) total += l.produces.size();
  t = checked_u32(total, "tensors");
  plan.tensors_.reserve(t);
  plan.index_.reserve(t);

  auto where = [&](std::size_t p) {
    return "layer '" + g.layers[p].name + "' (id " + std::to_string(g.layers[p].id) +
           ", position " + std::to_string(p) + ")";
  };
  std::vector<std::uint32_t> seen(t, none32);  // dedupe reads per layer and list
  std::uint32_t list_serial = 0;
  auto add_reads = [&](std::size_t p, const std::vector<recompute_key>& keys, bool forward) {
    const std::uint32_t begin = static_cast<std::uint32_t>(plan.refs_.size());
    ++list_serial;
    for (recompute_key k : keys) {
      auto it = plan.index_.find(k);
      if (it == plan.index_.end() ||
          (forward && plan.tensors_[it->second].producer >= static_cast<recompute_pos>(p))) {
        if (forward)
          throw invalid_argument("recompute_plan: " + where(p) + " reads tensor key " +
                                 std::to_string(k) +
                                 " in its forward, but no earlier layer produces it; list the "
                                 "layers in forward route order, each tensor produced once");
        throw invalid_argument("recompute_plan: " + where(p) + " reads tensor key " +
                               std::to_string(k) +
                               " in its backward, but no layer's forward produces it; list "
                               "only forward tensors (outputs, aux, labels) as backward reads");
      }
      if (seen[it->second] == list_serial) continue;
      seen[it->second] = list_serial;
      plan.refs_.push_back(it->second);
    }
    return std::pair{begin, static_cast<std::uint32_t>(plan.refs_.size())};
  };

  // Tensors are indexed in production order, so forward reads can be resolved in one pass.
  for (std::size_t p = 0; p < n; ++p) {
    const recompute_layer& l = g.layers[p];
    layer_rec& r = plan.layers_[p];
    if (!(l.forward_cost >= 0) || !std::isfinite(l.forward_cost))
      throw invalid_argument("recompute_plan: " + where(p) + " has forward cost " +
                             std::to_string(l.forward_cost) +
                             "; expected a finite value >= 0 (flops or seconds)");
    r.id = l.id;
    r.name = l.name;
    r.checkpoint = l.checkpoint;
    r.forward_bytes = l.forward_bytes;
    r.backward_bytes = l.backward_bytes;
    r.forward_cost = l.forward_cost;
    std::tie(r.fr_begin, r.fr_end) = add_reads(p, l.forward_reads, true);
    r.prod_begin = static_cast<std::uint32_t>(plan.tensors_.size());
    for (const recompute_tensor& x : l.produces) {
      const auto idx = static_cast<std::uint32_t>(plan.tensors_.size());
      if (!plan.index_.emplace(x.key, idx).second)
        throw invalid_argument("recompute_plan: " + where(p) + " produces tensor key " +
                               std::to_string(x.key) + ", which layer position " +
                               std::to_string(plan.tensors_[plan.index_[x.key]].producer) +
                               " already produces; give every forward tensor a unique key");
      recompute_tensor_info info;
      info.key = x.key;
      info.bytes = x.bytes;
      info.producer = static_cast<recompute_pos>(p);
      info.last_forward_use = static_cast<recompute_pos>(p);
      plan.tensors_.push_back(info);
    }
    r.prod_end = static_cast<std::uint32_t>(plan.tensors_.size());
    for (std::uint32_t ti : std::span(plan.refs_).subspan(r.fr_begin, r.fr_end - r.fr_begin))
      plan.tensors_[ti].last_forward_use = static_cast<recompute_pos>(p);
  }
  for (std::size_t p = 0; p < n; ++p)
    std::tie(plan.layers_[p].br_begin, plan.layers_[p].br_end) =
        add_reads(p, g.layers[p].backward_reads, false);
  checked_u32(plan.refs_.size(), "read references");

  // Fans become checkpoints: count distinct consumer layers per producer.
  if (o.fan_checkpoints) {
    std::vector<std::uint32_t> consumers(n, 0), last_consumer(n, none32);
    for (std::size_t c = 0; c < n; ++c)
      for (std::uint32_t ti : fr(static_cast<recompute_pos>(c))) {
        const recompute_pos p = plan.tensors_[ti].producer;
        if (last_consumer[p] != c) {
          last_consumer[p] = static_cast<std::uint32_t>(c);
          ++consumers[p];
        }
      }
    for (std::size_t p = 0; p < n; ++p)
      if (consumers[p] >= 2) plan.layers_[p].checkpoint = true;
  }

  // Backward readers; absent tensors; fates and drops.
  max_reader.assign(t, no_position);
  min_reader.assign(t, no_position);
  for (std::size_t p = 0; p < n; ++p)
    for (std::uint32_t ti : br(static_cast<recompute_pos>(p))) {
      const auto pp = static_cast<recompute_pos>(p);
      if (max_reader[ti] == no_position || pp > max_reader[ti]) max_reader[ti] = pp;
      if (min_reader[ti] == no_position || pp < min_reader[ti]) min_reader[ti] = pp;
    }
  absent.assign(t, 0);
  std::size_t ti = 0;
  for (std::size_t p = 0; p < n; ++p) {
    const recompute_layer& l = g.layers[p];
    for (const recompute_tensor& x : l.produces) {
      recompute_tensor_info& info = plan.tensors_[ti];
      // Read by a backward step right after its last forward use (the loss's own output):
      // dropping it would free it for no step at all.
      const bool no_gap = max_reader[ti] != no_position &&
                          2 * n - 1 - max_reader[ti] == std::size_t{info.last_forward_use} + 1;
      absent[ti] = !plan.layers_[p].checkpoint && !x.keep && !no_gap;
      if (absent[ti] && max_reader[ti] != no_position) {
        info.fate = tensor_fate::dropped;
        info.last_use = min_reader[ti];
        plan.dropped_bytes_ += info.bytes;
      }
      ++ti;
    }
  }
  plan.drop_offsets_.assign(n + 1, 0);
  for (const recompute_tensor_info& info : plan.tensors_)
    if (info.fate == tensor_fate::dropped) ++plan.drop_offsets_[info.last_forward_use + 1];
  std::partial_sum(plan.drop_offsets_.begin(), plan.drop_offsets_.end(),
                   plan.drop_offsets_.begin());
  plan.drop_keys_.resize(plan.drop_offsets_[n]);
  {
    std::vector<std::uint32_t> fill(plan.drop_offsets_.begin(), plan.drop_offsets_.end() - 1);
    for (const recompute_tensor_info& info : plan.tensors_)
      if (info.fate == tensor_fate::dropped)
        plan.drop_keys_[fill[info.last_forward_use]++] = info.key;
  }

  // Needs: per backward position, the dropped tensors it reads.
  need_off.assign(n + 1, 0);
  for (std::size_t p = 0; p < n; ++p) {
    need_off[p + 1] = need_off[p];
    for (std::uint32_t x : br(static_cast<recompute_pos>(p)))
      if (absent[x]) {
        need.push_back(x);
        ++need_off[p + 1];
      }
  }

  std::size_t max_l = 0;
  for (const layer_rec& r : plan.layers_)
    max_l = std::max({max_l, r.forward_bytes, r.backward_bytes});
  plan.max_layer_bytes_ = max_l;
  plan.threshold_ = o.threshold_bytes != 0 ? o.threshold_bytes : max_l;
  hold_to_segment_end = o.speed_holds_to_segment_end;
  layer_mark.assign(n, 0);
}

void recompute_plan::builder::make_segments() {
  // Union-find over cheap layers, joined through absent tensors one reads of the other.
  std::vector<std::uint32_t> parent(n);
  std::iota(parent.begin(), parent.end(), 0u);
  auto find = [&](std::uint32_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  for (std::size_t c = 0; c < n; ++c) {
    if (L(static_cast<recompute_pos>(c)).checkpoint) continue;
    for (std::uint32_t ti : fr(static_cast<recompute_pos>(c)))
      if (absent[ti]) {
        const std::uint32_t a = find(plan.tensors_[ti].producer),
                            b = find(static_cast<std::uint32_t>(c));
        if (a != b) parent[std::max(a, b)] = std::min(a, b);
      }
  }
  std::vector<std::uint32_t> seg_of_root(n, none32);
  for (std::size_t p = 0; p < n; ++p) {
    layer_rec& r = plan.layers_[p];
    if (r.checkpoint) continue;
    const std::uint32_t root = find(static_cast<std::uint32_t>(p));
    if (seg_of_root[root] == none32) {
      seg_of_root[root] = static_cast<std::uint32_t>(plan.segments_.size());
      plan.segments_.emplace_back();
    }
    r.segment = seg_of_root[root];
    plan.segments_[r.segment].layers.push_back(static_cast<recompute_pos>(p));
  }
  // Dropped tensors and needs per segment.
  const std::size_t s_count = plan.segments_.size();
  seg_dropped_off.assign(s_count + 1, 0);
  for (std::uint32_t ti = 0; ti < t; ++ti) {
    const recompute_tensor_info& info = plan.tensors_[ti];
    if (info.fate != tensor_fate::dropped) continue;
    recompute_segment& s = plan.segments_[L(info.producer).segment];
    s.dropped.push_back(info.key);
    if (s.first_need == no_position || max_reader[ti] > s.first_need) s.first_need = max_reader[ti];
    if (s.last_need == no_position || min_reader[ti] < s.last_need) s.last_need = min_reader[ti];
    ++seg_dropped_off[L(info.producer).segment + 1];
  }
  std::partial_sum(seg_dropped_off.begin(), seg_dropped_off.end(), seg_dropped_off.begin());
  seg_dropped.resize(seg_dropped_off[s_count]);
  {
    std::vector<std::uint32_t> fill(seg_dropped_off.begin(), seg_dropped_off.end() - 1);
    for (std::uint32_t ti = 0; ti < t; ++ti)
      if (plan.tensors_[ti].fate == tensor_fate::dropped)
        seg_dropped[fill[L(plan.tensors_[ti].producer).segment]++] = ti;
  }
  first_off.assign(n + 1, 0);
  for (const recompute_segment& s : plan.segments_)
    if (s.first_need != no_position) ++first_off[s.first_need + 1];
  std::partial_sum(first_off.begin(), first_off.end(), first_off.begin());
  first.resize(first_off[n]);
  {
    std::vector<std::uint32_t> fill(first_off.begin(), first_off.end() - 1);
    for (std::uint32_t s = 0; s < s_count; ++s)
      if (plan.segments_[s].first_need != no_position)
        first[fill[plan.segments_[s].first_need]++] = s;
  }
  // The speed-centric memcost of each segment (Fig. 9a): Σ l^f over its full rebuild, plus
  // l^b of the backward step that triggers it (its first need), when the whole rebuild is
  // held. The largest l^b while any of it is held is reported too.
  std::vector<std::size_t> lb(n);
  for (std::size_t p = 0; p < n; ++p) lb[p] = L(static_cast<recompute_pos>(p)).backward_bytes;
  const range_max rmq(lb);
  std::vector<recompute_pos> layers;
  for (std::uint32_t s = 0; s < s_count; ++s) {
    recompute_segment& seg = plan.segments_[s];
    if (seg.first_need == no_position) continue;
    closure(
        std::span(seg_dropped)
            .subspan(seg_dropped_off[s], seg_dropped_off[s + 1] - seg_dropped_off[s]),
        [](std::uint32_t) { return false; }, layers);
    for (recompute_pos p : layers) seg.rebuild_forward_bytes += L(p).forward_bytes;
    seg.trigger_backward_bytes = lb[seg.first_need];
    seg.window_backward_bytes = rmq.query(seg.last_need, seg.first_need);
  }
}

std::vector<segment_mode> recompute_plan::builder::cost_aware_modes() {
  std::vector<segment_mode> modes(plan.segments_.size());
  for (std::size_t s = 0; s < modes.size(); ++s)
    modes[s] = plan.segments_[s].speed_cost() <= plan.threshold_ ? segment_mode::speed_centric
                                                                 : segment_mode::memory_centric;
  return modes;
}

std::vector<std::size_t> recompute_plan::builder::emit(const std::vector<segment_mode>& modes,
                                                       recompute_pos probe_step,
                                                       std::size_t probe_replay) {
  const bool probing = probe_step != no_position;
  std::vector<std::size_t> probe_bytes;
  plan.steps_.assign(n, backward_step_plan{});
  plan.replays_.clear();
  plan.keys_.clear();
  plan.extra_cost_ = 0;
  held.assign(t, 0);
  held_bytes = 0;
  speed_held_bytes = 0;
  peak_speed_held = 0;
  // Only absent tensors (of cheap layers, so with a segment) are ever held.
  auto is_speed = [&](std::uint32_t x) {
    return modes[L(plan.tensors_[x].producer).segment] == segment_mode::speed_centric;
  };
  auto hold = [&](std::uint32_t x) {
    held[x] = 1;
    held_bytes += plan.tensors_[x].bytes;
    if (is_speed(x)) speed_held_bytes += plan.tensors_[x].bytes;
  };
  auto release = [&](std::uint32_t x) {
    held[x] = 0;
    held_bytes -= plan.tensors_[x].bytes;
    if (is_speed(x)) speed_held_bytes -= plan.tensors_[x].bytes;
  };
  pending.assign(n, {});
  batch_index.assign(t, none32);
  free_at.assign(t, none32);
  kept_use.assign(t, no_position);

  recompute_peak& peak = plan.peak_;
  peak = recompute_peak{};
  for (std::size_t p = 0; p < n; ++p)
    if (p == 0 || L(static_cast<recompute_pos>(p)).forward_bytes > peak.bytes) {
      peak.bytes = L(static_cast<recompute_pos>(p)).forward_bytes;
      peak.layer = static_cast<recompute_pos>(p);
    }

  auto probe = [&](auto touched) {
    // Untouched held bytes per segment at this moment.
    probe_bytes.assign(plan.segments_.size(), 0);
    for (std::uint32_t x = 0; x < t; ++x)
      if (held[x] && !touched(x))
        probe_bytes[L(plan.tensors_[x].producer).segment] += plan.tensors_[x].bytes;
  };

  std::vector<std::uint32_t> wanted;
  std::vector<recompute_pos> batch;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> frees;  // (batch index, tensor)
  std::vector<std::uint32_t> step_frees;
  for (std::size_t kk = n; kk-- > 0;) {
    const auto k = static_cast<recompute_pos>(kk);
    backward_step_plan& step = plan.steps_[k];
    step.layer = k;
    // What to rebuild: whole speed-centric segments at their first need, and the needs of
    // memory-centric segments.
    wanted.clear();
    for (std::uint32_t i = first_off[k]; i < first_off[k + 1]; ++i) {
      const std::uint32_t s = first[i];
      if (modes[s] == segment_mode::speed_centric)
        wanted.insert(wanted.end(), seg_dropped.begin() + seg_dropped_off[s],
                      seg_dropped.begin() + seg_dropped_off[s + 1]);
    }
    for (std::uint32_t i = need_off[k]; i < need_off[k + 1]; ++i) {
      const std::uint32_t x = need[i];
      if (modes[L(plan.tensors_[x].producer).segment] == segment_mode::memory_centric)
        wanted.push_back(x);
    }
    closure(
        wanted, [&](std::uint32_t x) { return held[x] != 0; }, batch);

    // When each tensor rebuilt here is freed: after a backward step (read by one; memory-
    // centric: this one), or right after its last reader in the batch (an intermediate).
    for (std::uint32_t bi = 0; bi < batch.size(); ++bi)
      for (std::uint32_t x = L(batch[bi]).prod_begin; x < L(batch[bi]).prod_end; ++x)
        if (absent[x] && !held[x]) {
          batch_index[x] = bi;
          free_at[x] = bi;
        }
    for (std::uint32_t bi = 0; bi < batch.size(); ++bi)
      for (std::uint32_t r : fr(batch[bi]))
        if (batch_index[r] != none32) free_at[r] = bi;
    frees.clear();
    step_frees.clear();
    for (recompute_pos j : batch)
      for (std::uint32_t x = L(j).prod_begin; x < L(j).prod_end; ++x) {
        if (batch_index[x] == none32) continue;
        const bool speed = modes[L(j).segment] == segment_mode::speed_centric;
        if (speed && min_reader[x] != no_position) {
          pending[hold_to_segment_end ? plan.segments_[L(j).segment].last_need : min_reader[x]]
              .push_back(x);
        } else if (!speed && min_reader[x] != no_position &&
                   std::find(br(k).begin(), br(k).end(), x) != br(k).end()) {
          step_frees.push_back(x);
        } else {
          frees.emplace_back(free_at[x], x);
        }
      }
    std::stable_sort(frees.begin(), frees.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });

    step.replays_begin = checked_u32(plan.replays_.size(), "replays");
    std::size_t fi = 0;
    for (std::uint32_t bi = 0; bi < batch.size(); ++bi) {
      const recompute_pos j = batch[bi];
      const layer_rec& lj = L(j);
      std::size_t touched_held = 0, touched_speed = 0;
      auto touch = [&](std::uint32_t x) {
        if (!held[x]) return;
        touched_held += plan.tensors_[x].bytes;
        if (is_speed(x)) touched_speed += plan.tensors_[x].bytes;
      };
      for (std::uint32_t r : fr(j)) {
        touch(r);
        if (!absent[r]) kept_use[r] = k;
      }
      for (std::uint32_t x = lj.prod_begin; x < lj.prod_end; ++x) touch(x);
      const std::size_t resident = lj.forward_bytes + held_bytes - touched_held;
      step.peak_bytes = std::max(step.peak_bytes, resident);
      if (resident > peak.bytes) {
        peak = {resident, k, true, bi};
        peak_speed_held = speed_held_bytes - touched_speed;
      }
      if (probing && probe_step == k && probe_replay == bi)
        probe([&](std::uint32_t x) {
          return (x >= lj.prod_begin && x < lj.prod_end) ||
                 std::find(fr(j).begin(), fr(j).end(), x) != fr(j).end();
        });

      replay_action a;
      a.layer = j;
      a.segment = lj.segment;
      a.rebuilds_begin = checked_u32(plan.keys_.size(), "plan entries");
      for (std::uint32_t x = lj.prod_begin; x < lj.prod_end; ++x)
        if (batch_index[x] != none32) {
          hold(x);
          plan.keys_.push_back(plan.tensors_[x].key);
        }
      a.rebuilds_end = a.frees_begin = checked_u32(plan.keys_.size(), "plan entries");
      for (; fi < frees.size() && frees[fi].first == bi; ++fi) {
        const std::uint32_t x = frees[fi].second;
        release(x);
        plan.keys_.push_back(plan.tensors_[x].key);
      }
      a.frees_end = checked_u32(plan.keys_.size(), "plan entries");
      plan.replays_.push_back(a);
      plan.extra_cost_ += lj.forward_cost;
    }
    for (recompute_pos j : batch)
      for (std::uint32_t x = L(j).prod_begin; x < L(j).prod_end; ++x) batch_index[x] = none32;
    step.replays_end = checked_u32(plan.replays_.size(), "replays");

    // The backward step itself.
    std::size_t touched_held = 0, touched_speed = 0;
    for (std::uint32_t r : br(k)) {
      if (held[r]) {
        touched_held += plan.tensors_[r].bytes;
        if (is_speed(r)) touched_speed += plan.tensors_[r].bytes;
      } else if (absent[r]) {
        throw std::logic_error("recompute_plan: backward step of layer '" + L(k).name +
                               "' reads tensor key " + std::to_string(plan.tensors_[r].key) +
                               " that the plan has not rebuilt (planner bug)");
      } else {
        kept_use[r] = k;
      }
    }
    step.held_bytes = held_bytes;
    const std::size_t resident = L(k).backward_bytes + held_bytes - touched_held;
    step.peak_bytes = std::max(step.peak_bytes, resident);
    if (resident > peak.bytes) {
      peak = {resident, k, true, recompute_peak::no_replay};
      peak_speed_held = speed_held_bytes - touched_speed;
    }
    if (probing && probe_step == k && probe_replay == recompute_peak::no_replay)
      probe(
          [&](std::uint32_t x) { return std::find(br(k).begin(), br(k).end(), x) != br(k).end(); });

    step.frees_begin = checked_u32(plan.keys_.size(), "plan entries");
    for (std::uint32_t x : pending[k]) step_frees.push_back(x);
    for (std::uint32_t x : step_frees) {
      if (!held[x])
        throw std::logic_error("recompute_plan: tensor key " +
                               std::to_string(plan.tensors_[x].key) + " freed twice (planner bug)");
      release(x);
      plan.keys_.push_back(plan.tensors_[x].key);
    }
    step.frees_end = checked_u32(plan.keys_.size(), "plan entries");
    pending[k].clear();
  }
  if (held_bytes != 0)
    throw std::logic_error(
        "recompute_plan: rebuilt tensors still held after the last backward "
        "step (planner bug)");

  // Fates of kept tensors follow from their uses in this plan.
  for (std::uint32_t x = 0; x < t; ++x) {
    recompute_tensor_info& info = plan.tensors_[x];
    if (absent[x]) continue;
    info.fate = kept_use[x] != no_position ? tensor_fate::kept : tensor_fate::transient;
    info.last_use = kept_use[x];
  }
  return probe_bytes;
}

recompute_plan::recompute_plan(const recompute_graph& graph, const recompute_options& options)
    : strategy_(options.strategy) {
  builder b(*this);
  b.analyse(graph, options);
  b.make_segments();
  std::vector<segment_mode> modes(segments_.size(), segment_mode::speed_centric);
  if (strategy_ == recompute_strategy::memory_centric)
    std::fill(modes.begin(), modes.end(), segment_mode::memory_centric);
  else if (strategy_ == recompute_strategy::cost_aware)
    modes = b.cost_aware_modes();
  b.emit(modes);
  absent_ = b.absent;
  // cost_aware: where overlapping holding windows push the peak over the threshold, switch
  // the segment holding most at the peak to memory-centric, and plan again.
  while (strategy_ == recompute_strategy::cost_aware && peak_.bytes > threshold_ &&
         b.peak_speed_held > 0) {
    const std::vector<std::size_t> held =
        b.emit(modes, peak_.layer, peak_.replay);  // same plan; probes the peak moment
    std::size_t best = none32, best_bytes = 0;
    for (std::size_t s = 0; s < held.size(); ++s)
      if (modes[s] == segment_mode::speed_centric && held[s] > best_bytes) {
        best = s;
        best_bytes = held[s];
      }
    if (best == none32) break;
    modes[best] = segment_mode::memory_centric;
    b.emit(modes);
  }
  for (std::size_t s = 0; s < segments_.size(); ++s) segments_[s].mode = modes[s];
}

const recompute_tensor_info* recompute_plan::find(recompute_key key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const recompute_key> recompute_plan::drops_after_forward(recompute_pos p) const noexcept {
  return {drop_keys_.data() + drop_offsets_[p], drop_keys_.data() + drop_offsets_[p + 1]};
}

std::span<const replay_action> recompute_plan::replays(const backward_step_plan& s) const noexcept {
  return {replays_.data() + s.replays_begin, replays_.data() + s.replays_end};
}

std::span<const recompute_key> recompute_plan::rebuilds(const replay_action& a) const noexcept {
  return {keys_.data() + a.rebuilds_begin, keys_.data() + a.rebuilds_end};
}

std::span<const recompute_key> recompute_plan::frees(const replay_action& a) const noexcept {
  return {keys_.data() + a.frees_begin, keys_.data() + a.frees_end};
}

std::span<const recompute_key> recompute_plan::frees(const backward_step_plan& s) const noexcept {
  return {keys_.data() + s.frees_begin, keys_.data() + s.frees_end};
}

std::size_t recompute_plan::speed_segments() const noexcept {
  std::size_t k = 0;
  for (const recompute_segment& s : segments_)
    k += !s.dropped.empty() && s.mode == segment_mode::speed_centric;
  return k;
}

std::size_t recompute_plan::memory_segments() const noexcept {
  std::size_t k = 0;
  for (const recompute_segment& s : segments_)
    k += !s.dropped.empty() && s.mode == segment_mode::memory_centric;
  return k;
}

std::vector<recompute_pos> recompute_plan::rebuild_order(
    std::span<const recompute_key> wanted,
    const std::function<bool(recompute_key)>& resident) const {
  std::vector<std::uint32_t> idx;
  for (recompute_key k : wanted) {
    const recompute_tensor_info* info = find(k);
    if (info == nullptr)
      throw invalid_argument("rebuild_order: tensor key " + std::to_string(k) +
                             " is not a forward tensor of the planned graph");
    if (info->fate == tensor_fate::transient)
      throw invalid_argument("rebuild_order: tensor key " + std::to_string(k) +
                             " is transient (no backward step reads it), so the plan keeps no "
                             "inputs to rebuild it from; ask for dropped or kept tensors only");
    if (info->fate == tensor_fate::dropped) idx.push_back(index_.at(k));
  }
  // A closure over the plan's own (const) data: kept inputs are resident by definition.
  std::vector<recompute_pos> out;
  std::vector<char> mark(layers_.size(), 0);
  std::vector<recompute_pos> stack;
  auto visit = [&](std::uint32_t ti) {
    const recompute_tensor_info& info = tensors_[ti];
    if (!absent_[ti] || (resident && resident(info.key)) || mark[info.producer]) return;
    mark[info.producer] = 1;
    stack.push_back(info.producer);
  };
  for (std::uint32_t ti : idx) visit(ti);
  while (!stack.empty()) {
    const recompute_pos p = stack.back();
    stack.pop_back();
    out.push_back(p);
    for (std::uint32_t i = layers_[p].fr_begin; i < layers_[p].fr_end; ++i) visit(refs_[i]);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string recompute_plan::describe() const {
  std::string s = std::string("recompute plan: ") + to_string(strategy_) + ", " +
                  std::to_string(layers_.size()) + " layers, " + std::to_string(segments_.size()) +
                  " segments (" + std::to_string(speed_segments()) + " speed-centric, " +
                  std::to_string(memory_segments()) + " memory-centric), " +
                  std::to_string(extra_forwards()) + " extra forwards, peak " +
                  std::to_string(peak_.bytes) + " B, max l_i " + std::to_string(max_layer_bytes_) +
                  " B\n";
  auto name = [&](recompute_pos p) { return layers_[p].name; };
  auto key_name = [&](recompute_key k) {
    return name(tensors_[index_.at(k)].producer) + "#" + std::to_string(k);
  };
  for (std::size_t i = 0; i < segments_.size(); ++i) {
    const recompute_segment& seg = segments_[i];
    if (seg.dropped.empty()) continue;
    s += "  segment " + std::to_string(i) + " (" + to_string(seg.mode) + ", cost " +
         std::to_string(seg.speed_cost()) + "):";
    for (recompute_pos p : seg.layers) s += " " + name(p);
    s += "\n";
  }
  for (std::size_t p = 0; p < layers_.size(); ++p) {
    const auto d = drops_after_forward(static_cast<recompute_pos>(p));
    if (d.empty()) continue;
    s += "  forward " + name(static_cast<recompute_pos>(p)) + ": drop";
    for (recompute_key k : d) s += " " + key_name(k);
    s += "\n";
  }
  for (std::size_t pp = layers_.size(); pp-- > 0;) {
    const backward_step_plan& st = steps_[pp];
    if (st.replays_begin == st.replays_end && st.frees_begin == st.frees_end) continue;
    s += "  backward " + name(static_cast<recompute_pos>(pp)) + ":";
    for (const replay_action& a : replays(st)) {
      s += " replay " + name(a.layer);
      for (recompute_key k : frees(a)) s += " (free " + key_name(k) + ")";
      s += ";";
    }
    s += " run";
    for (recompute_key k : frees(st)) s += " (free " + key_name(k) + ")";
    s += "\n";
  }
  return s;
}

}  // namespace memweave
