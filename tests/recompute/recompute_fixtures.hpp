// Helpers of the recompute tests: an adapter from the engine's graph (network, route, tensor
// table, layer memory) to the planner's plain-data graph — the shape the engine's own adapter
// is expected to take — and an independent checker that replays a plan step by step.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "memweave/engine/layer_memory.hpp"
#include "memweave/engine/route.hpp"
#include "memweave/engine/tensor_table.hpp"
#include "memweave/recompute/recompute_plan.hpp"

namespace memweave::test {

struct adapter_options {
  /// The paper's simplification for Table 1: every backward step reads its inputs' outputs
  /// and nothing else (as CONV does); otherwise the tensor table's exact reads.
  bool paper_reads = false;
  /// Mark BN's saved statistics (2 x channels floats) keep: cheaper to keep than to rebuild.
  bool keep_bn_stats = false;
};

/// The planner's graph of `table` (its network and route) with l_i^f, l_i^b from `mem`.
/// Forward tensors are the data and auxiliary tensors; keys are tensor ids.
inline recompute_graph graph_of(const tensor_table& table, const layer_memory& mem,
                                const adapter_options& o = {}) {
  const network& net = table.net();
  const route& r = table.steps();
  recompute_graph g;
  g.layers.reserve(net.size());
  auto forward_tensor = [&](tensor_id t) {
    return table[t].role == tensor_role::data || table[t].role == tensor_role::auxiliary;
  };
  for (layer_id id : r.order()) {
    const layer& l = net[id];
    recompute_layer rl;
    rl.id = id;
    rl.name = l.name;
    rl.checkpoint = l.cost == cost_class::checkpoint;
    for (const tensor_access& a : table.accesses(r.forward_step(id))) {
      if (!forward_tensor(a.tensor)) continue;
      if (a.mode == access_mode::read) {
        rl.forward_reads.push_back(a.tensor);
      } else if (a.mode == access_mode::write) {
        const bool keep = o.keep_bn_stats && l.type == layer_type::bn &&
                          table[a.tensor].role == tensor_role::auxiliary;
        rl.produces.push_back({a.tensor, table[a.tensor].bytes, keep});
      }
    }
    const std::size_t bs = r.backward_step(id);
    if (o.paper_reads) {
      if (table.has_work(bs))
        for (layer_id x : l.inputs) rl.backward_reads.push_back(table.of(x).output);
    } else {
      for (const tensor_access& a : table.accesses(bs))
        if (a.mode == access_mode::read && forward_tensor(a.tensor))
          rl.backward_reads.push_back(a.tensor);
    }
    rl.forward_bytes = mem.of(id).forward_bytes;
    rl.backward_bytes = mem.of(id).backward_bytes;
    rl.forward_cost = static_cast<double>(l.output_shape.count());
    g.layers.push_back(std::move(rl));
  }
  return g;
}

/// Everything needed to plan an engine network (the table keeps references: keep this alive).
struct engine_graph {
  explicit engine_graph(network n, const adapter_options& o = {})
      : net(std::move(n)),
        steps(net),
        table(net, steps),
        mem(table),
        graph(graph_of(table, mem, o)) {}
  network net;
  route steps;
  tensor_table table;
  layer_memory mem;
  recompute_graph graph;
};

/// Walks `plan` over `g` as an executor would and checks that every tensor a replay or a
/// backward step reads is resident (kept, or rebuilt and not yet freed), that only cheap
/// layers are replayed and only absent tensors rebuilt, that every rebuilt tensor is freed
/// once and nothing is left, that drops follow the rules, and that the plan's counts and
/// peak agree with this walk. Returns the peak it computed (0 after a failure).
inline std::size_t check_plan(const recompute_graph& g, const recompute_plan& plan) {
  const std::size_t n = g.layers.size();
  std::unordered_map<recompute_key, std::size_t> producer;
  std::unordered_map<recompute_key, const recompute_tensor*> spec;
  for (std::size_t p = 0; p < n; ++p)
    for (const recompute_tensor& t : g.layers[p].produces) {
      producer[t.key] = p;
      spec[t.key] = &t;
    }
  auto info = [&](recompute_key k) -> const recompute_tensor_info& {
    const recompute_tensor_info* i = plan.find(k);
    EXPECT_NE(i, nullptr) << "key " << k;
    static const recompute_tensor_info empty{};
    return i ? *i : empty;
  };
  std::unordered_set<recompute_key> read_by_backward;
  std::unordered_map<recompute_key, std::size_t> last_fwd;
  for (std::size_t p = 0; p < n; ++p) {
    for (recompute_key k : g.layers[p].backward_reads) read_by_backward.insert(k);
    for (recompute_key k : g.layers[p].forward_reads) last_fwd[k] = p;
    for (const recompute_tensor& t : g.layers[p].produces)
      if (!last_fwd.count(t.key)) last_fwd[t.key] = p;
  }
  // Checkpoints and fates.
  for (std::size_t p = 0; p < n; ++p) {
    if (g.layers[p].checkpoint && !plan.is_checkpoint(static_cast<recompute_pos>(p))) {
      ADD_FAILURE() << "checkpoint " << g.layers[p].name << " not a checkpoint in the plan";
      return 0;
    }
    for (const recompute_tensor& t : g.layers[p].produces) {
      const recompute_tensor_info& i = info(t.key);
      if (i.fate == tensor_fate::dropped &&
          (plan.is_checkpoint(static_cast<recompute_pos>(p)) || t.keep)) {
        ADD_FAILURE() << "tensor " << t.key << " of " << g.layers[p].name
                      << " dropped although its layer is a checkpoint or it is marked keep";
        return 0;
      }
      if (read_by_backward.count(t.key) && i.fate == tensor_fate::transient) {
        ADD_FAILURE() << "tensor " << t.key << " of " << g.layers[p].name
                      << " is read by a backward step but neither kept nor dropped";
        return 0;
      }
      // A cheap layer's tensor that a later backward step reads is dropped unless kept.
      const bool gap = read_by_backward.count(t.key) > 0;
      if (gap && !plan.is_checkpoint(static_cast<recompute_pos>(p)) && !t.keep &&
          i.fate == tensor_fate::kept) {
        // Only the no-gap case (read right after its last forward use) may be kept.
        std::size_t first_bwd = 0;
        for (std::size_t q = 0; q < n; ++q)
          if (std::count(g.layers[q].backward_reads.begin(), g.layers[q].backward_reads.end(),
                         t.key))
            first_bwd = std::max(first_bwd, q);
        if (2 * n - 1 - first_bwd != last_fwd[t.key] + 1) {
          ADD_FAILURE() << "tensor " << t.key << " of cheap layer " << g.layers[p].name
                        << " kept although a gap separates its forward and backward uses";
          return 0;
        }
      }
    }
  }
  // Forward: drops come after the last forward use, once each.
  std::unordered_set<recompute_key> resident, dropped;
  std::size_t peak = 0;
  for (std::size_t p = 0; p < n; ++p) {
    peak = std::max(peak, g.layers[p].forward_bytes);
    for (recompute_key k : g.layers[p].forward_reads)
      if (!resident.count(k)) {
        ADD_FAILURE() << "forward of " << g.layers[p].name << " reads dropped tensor " << k;
        return 0;
      }
    for (const recompute_tensor& t : g.layers[p].produces) resident.insert(t.key);
    for (recompute_key k : plan.drops_after_forward(static_cast<recompute_pos>(p))) {
      if (last_fwd[k] != p || info(k).fate != tensor_fate::dropped || !resident.erase(k)) {
        ADD_FAILURE() << "bad drop of tensor " << k << " after forward of " << g.layers[p].name;
        return 0;
      }
      dropped.insert(k);
    }
  }
  for (const recompute_tensor_info& i : plan.tensors())
    if (i.fate == tensor_fate::dropped && !dropped.count(i.key)) {
      ADD_FAILURE() << "dropped tensor " << i.key << " never dropped in the forward pass";
      return 0;
    }
  // Backward: residency of every read, rebuilds, frees; the memory model.
  std::unordered_map<recompute_key, std::size_t> held;  // key -> bytes
  std::size_t held_bytes = 0, replays = 0;
  auto available = [&](recompute_key k, std::size_t p, const char* who, const std::string& name) {
    if (held.count(k)) return true;
    const recompute_tensor_info& i = info(k);
    if (i.fate == tensor_fate::kept) {
      if (i.last_use == no_position || p < i.last_use) {
        ADD_FAILURE() << who << " " << name << " at backward step of position " << p
                      << " reads kept tensor " << k << " after its declared last use";
        return false;
      }
      return true;
    }
    ADD_FAILURE() << who << " " << name << " at backward step of " << g.layers[p].name
                  << " reads tensor " << k << " (" << to_string(i.fate) << ") that is not resident";
    return false;
  };
  for (std::size_t pp = n; pp-- > 0;) {
    const auto p = static_cast<recompute_pos>(pp);
    const backward_step_plan& st = plan.backward(p);
    EXPECT_EQ(st.layer, p);
    for (const replay_action& a : plan.replays(st)) {
      ++replays;
      const recompute_layer& l = g.layers[a.layer];
      if (l.checkpoint || plan.is_checkpoint(a.layer)) {
        ADD_FAILURE() << "checkpoint " << l.name << " replayed";
        return 0;
      }
      std::size_t touched = 0;
      for (recompute_key k : l.forward_reads) {
        if (!available(k, pp, "replay of", l.name)) return 0;
        if (held.count(k)) touched += held[k];
      }
      for (const recompute_tensor& t : l.produces)
        if (held.count(t.key)) touched += t.bytes;
      peak = std::max(peak, l.forward_bytes + held_bytes - touched);
      for (recompute_key k : plan.rebuilds(a)) {
        if (producer[k] != a.layer || held.count(k) || info(k).fate == tensor_fate::kept) {
          ADD_FAILURE() << "replay of " << l.name << " rebuilds tensor " << k
                        << " it does not produce, or that is held or kept";
          return 0;
        }
        held[k] = spec[k]->bytes;
        held_bytes += spec[k]->bytes;
      }
      for (recompute_key k : plan.frees(a)) {
        if (!held.count(k)) {
          ADD_FAILURE() << "replay of " << l.name << " frees tensor " << k << " not held";
          return 0;
        }
        held_bytes -= held[k];
        held.erase(k);
      }
    }
    const recompute_layer& l = g.layers[p];
    std::size_t touched = 0;
    std::unordered_set<recompute_key> reads(l.backward_reads.begin(), l.backward_reads.end());
    for (recompute_key k : reads) {
      if (!available(k, pp, "backward of", l.name)) return 0;
      if (held.count(k)) touched += held[k];
    }
    EXPECT_EQ(st.held_bytes, held_bytes) << l.name;
    peak = std::max(peak, l.backward_bytes + held_bytes - touched);
    for (recompute_key k : plan.frees(st)) {
      if (!held.count(k)) {
        ADD_FAILURE() << "backward of " << l.name << " frees tensor " << k << " not held";
        return 0;
      }
      held_bytes -= held[k];
      held.erase(k);
    }
  }
  EXPECT_TRUE(held.empty()) << held.size() << " rebuilt tensors never freed";
  EXPECT_EQ(replays, plan.extra_forwards());
  EXPECT_EQ(peak, plan.peak_bytes());
  EXPECT_GE(peak, plan.max_layer_bytes());
  return peak;
}

}  // namespace memweave::test
