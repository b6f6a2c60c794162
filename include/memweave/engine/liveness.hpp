// Liveness analysis (§3.2 of the paper) over the steps of one training iteration, and the
// per-step memory plan the executor follows.
//
// A non-persistent tensor is live from its first use (the step that writes it) to its last
// use (the last step that reads it), both inclusive. For step s:
//   in(s)  = tensors live before s:  first < s <= last   (made earlier, still needed)
//   out(s) = tensors live after s:   first <= s < last   (needed by a later step)
//   born_at(s)    = tensors with first == s
//   dies_after(s) = tensors with last == s
// exactly the in/out sets of Fig. 4 (FC7's in holds t2 and t5, its out does not).
//
// The paper builds the sets by checking, per layer, all later layers: O(N^2). Here one pass
// over the steps' access lists gives each tensor's first and last use, O(steps + accesses);
// born_at/dies_after are stored (linear size), and in/out sets, whose total size is
// quadratic on deep networks, are computed on demand in O(tensors).
//
// Persistent tensors (parameters, momenta, BN running stats) are outside the analysis: the
// executor allocates them once before the first iteration and keeps them (both policies).
//
// Plans: `baseline` allocates every non-persistent tensor before step 0 and frees them all
// after the last step (the paper's baseline, one independent tensor per request);
// `liveness` allocates each before its first use and frees it after its last use. Tensors
// of 0 bytes (workspaces not yet sized) are left out of plans: nothing is allocated for them
// and they are not counted.
//
// Immutable after construction. Holds a reference to the tensor table (which must outlive
// it); plan() reads the table's bytes when called, so after set_workspace_bytes a new plan
// reflects the new sizes.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "memweave/engine/tensor_table.hpp"

namespace memweave {

enum class memory_policy {
  baseline,  ///< all transient tensors live for the whole iteration
  liveness,  ///< each transient tensor lives from its first to its last use
};

/// "baseline" / "liveness".
const char* to_string(memory_policy p) noexcept;

/// What the executor does around step s, and what is resident during it.
struct step_plan {
  std::vector<tensor_id> allocate;       ///< allocate before the step (access order)
  std::vector<tensor_id> free;           ///< free after the step (access order)
  std::size_t bytes_live = 0;            ///< bytes resident during the step, persistent included
  std::size_t tensors_live = 0;          ///< tensors resident during the step, persistent included
  std::size_t transient_bytes_live = 0;  ///< the same without persistent tensors
  std::size_t transient_tensors_live = 0;  ///< the same without persistent tensors
};

struct memory_plan {
  memory_policy policy = memory_policy::liveness;
  std::vector<tensor_id> persistent;  ///< allocated once, before the first iteration
  std::size_t persistent_bytes = 0;
  std::vector<step_plan> steps;  ///< one per route step
  std::size_t peak_bytes = 0;    ///< max over steps of bytes_live
  std::size_t peak_step = 0;     ///< first step reaching peak_bytes
  std::size_t peak_tensors = 0;  ///< max over steps of tensors_live
};

class liveness {
 public:
  /// Analyses the steps of `table`. Throws std::logic_error if a transient tensor is read
  /// before it is written or never used (a bug in the table, not bad input).
  explicit liveness(const tensor_table& table);
  /// It keeps a reference: a temporary table would dangle.
  explicit liveness(tensor_table&&) = delete;

  /// 2N.
  std::size_t step_count() const noexcept { return steps_; }

  /// First and last step that touch tensor `t` (persistent tensors too: their first and
  /// last access). Unchecked.
  std::size_t first_use(tensor_id t) const noexcept { return first_[t]; }
  std::size_t last_use(tensor_id t) const noexcept { return last_[t]; }

  /// Transient tensors first used at step s / last used at step s (in tensor id order).
  std::span<const tensor_id> born_at(std::size_t s) const noexcept;
  std::span<const tensor_id> dies_after(std::size_t s) const noexcept;

  /// The in and out sets of step s, transient tensors in id order. O(tensors) each.
  std::vector<tensor_id> in_set(std::size_t s) const;
  std::vector<tensor_id> out_set(std::size_t s) const;

  /// The per-step plan under `policy`, with the table's current bytes.
  memory_plan plan(memory_policy policy) const;

 private:
  const tensor_table* table_;
  std::size_t steps_ = 0;
  std::vector<std::size_t> first_, last_;  // per tensor
  std::vector<std::size_t> born_offsets_, dies_offsets_;
  std::vector<tensor_id> born_, dies_;
};

}  // namespace memweave
