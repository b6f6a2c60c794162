// Per-layer memory, the quantities of the paper's analysis (§1, §3, §4.1.1), defined exactly
// on the tensor table's accesses:
//
//   l_i^f  = bytes of the distinct tensors that layer i's forward step touches: its inputs,
//            output, parameters (and BN running stats), aux tensors, forward workspace
//            (SOFTMAX: also the labels; DATA: its output and the labels).
//   l_i^b  = bytes of the distinct tensors that layer i's backward step touches: the output
//            gradient, the forward tensors its type reads, the input gradients it writes or
//            accumulates, the trained parameters, their gradients and momenta, aux tensors,
//            backward workspace. 0 for a backward without work (DATA's).
//   l_i    = max(l_i^f, l_i^b): what must be resident for layer i to run at all.
//   max_layer_bytes = max_i l_i: the paper's l_peak, the least peak any schedule at layer
//            granularity can reach (the goal of cost-aware recomputation).
//
// Persistent tensors are included in l_i (a step needs its parameters resident). Workspace
// bytes are the table's current ones (0 until conv-workspace selection sets them).
//
// The paper's closed forms, with these l: baseline Σ l_i^f + Σ l_i^b, liveness
// Σ l_i^f + l_N^b (N the last layer of the route, the loss). They count a tensor once per
// step touching it (a layer's output is also its consumer's input), so they overestimate; the
// paper's derivation assumes each tensor belongs to one layer. That assumption holds exactly
// for the "new" bytes:
//   n_i^f, n_i^b = bytes of the transient tensors whose first use is layer i's forward /
//                  backward step (what that step brings into existence).
// Σ n_i^f + Σ n_i^b is exactly the baseline's transient bytes on any network, and on a chain
// whose every forward output is read by a backward step (the paper's footnote 2), the
// liveness plan's transient peak is Σ n_i^f + n_N^b.
//
// Immutable after construction; reads the table's bytes at construction.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "memweave/engine/tensor_table.hpp"

namespace memweave {

/// The memory of one layer.
struct layer_memory_row {
  layer_id layer = invalid_layer;
  std::size_t forward_bytes = 0;       ///< l_i^f
  std::size_t backward_bytes = 0;      ///< l_i^b
  std::size_t bytes = 0;               ///< l_i = max(l_i^f, l_i^b)
  std::size_t forward_new_bytes = 0;   ///< n_i^f
  std::size_t backward_new_bytes = 0;  ///< n_i^b
};

class layer_memory {
 public:
  /// The memory of every layer of `table`'s network.
  explicit layer_memory(const tensor_table& table);

  /// One row per layer, indexed by layer id.
  std::span<const layer_memory_row> rows() const noexcept { return rows_; }
  const layer_memory_row& of(layer_id id) const noexcept { return rows_[id]; }

  /// max_i l_i and the first layer (in route order) reaching it.
  std::size_t max_layer_bytes() const noexcept { return max_bytes_; }
  layer_id peak_layer() const noexcept { return peak_layer_; }

  /// Σ l_i^f and Σ l_i^b.
  std::size_t sum_forward() const noexcept { return sum_f_; }
  std::size_t sum_backward() const noexcept { return sum_b_; }
  /// The paper's baseline Σ l_i^f + Σ l_i^b and liveness Σ l_i^f + l_N^b.
  std::size_t paper_baseline_bytes() const noexcept { return sum_f_ + sum_b_; }
  std::size_t paper_liveness_bytes() const noexcept { return sum_f_ + last_b_; }

  /// Σ n_i^f + Σ n_i^b (= the baseline's transient bytes) and Σ n_i^f + n_N^b.
  std::size_t new_baseline_bytes() const noexcept { return sum_new_f_ + sum_new_b_; }
  std::size_t new_liveness_bytes() const noexcept { return sum_new_f_ + last_new_b_; }

 private:
  std::vector<layer_memory_row> rows_;
  std::size_t max_bytes_ = 0;
  layer_id peak_layer_ = invalid_layer;
  std::size_t sum_f_ = 0, sum_b_ = 0, last_b_ = 0;
  std::size_t sum_new_f_ = 0, sum_new_b_ = 0, last_new_b_ = 0;
};

}  // namespace memweave
