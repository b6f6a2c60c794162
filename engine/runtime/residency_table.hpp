// Where each tensor's value is (device, host, a copy between them, or nowhere until it is
// rebuilt), and the live counters that follow from it: the executor's residency state
// machine. Every change of where a tensor is goes through one named transition here, and
// each transition moves bytes_live and tensors_live with the tensor's device memory, so the
// counters change in this file only.
//
// The table records; it does not act. The executor does what a transition stands for (the
// cache allocation, the copy, the heap free) and then records it. Not thread-safe: the
// thread driving the executor owns it.
//
// Invariants: a resident tensor's device memory is the tensor cache's; an offloading or
// prefetching one's is aside(t), outside the cache (a copy may still touch it); on_host,
// staged, dropped and absent ones hold none. bytes_live and tensors_live sum the tensors holding
// device memory (persistent ones outside the cache included), plus the bytes of the step's
// workspaces.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "memweave/engine/tensor_table.hpp"

namespace memweave {

/// Where a tensor the tensor cache manages is now.
enum class residency : std::uint8_t {
  absent,       ///< not born yet, or dead
  resident,     ///< in the tensor cache (device memory)
  offloading,   ///< copy to host in flight, device memory held aside
  on_host,      ///< only the host copy exists
  prefetching,  ///< copy back in flight into device memory held aside
  dropped,      ///< recompute/all: freed, to be rebuilt by re-running its layer's forward
  staged,       ///< TSPLIT: whole in the executor's host staging memory, read and written
                ///< by split steps one micro-batch's slice at a time
};

class residency_table {
 public:
  /// Every tensor of `table` absent, nothing live. Holds a reference to `table`.
  explicit residency_table(const tensor_table& table);

  std::size_t size() const noexcept { return state_.size(); }
  residency state(tensor_id t) const noexcept { return state_[t]; }
  /// The device memory of an offloading or prefetching tensor; nullptr otherwise.
  void* aside(tensor_id t) const noexcept { return aside_[t]; }
  /// Whether a host copy of `t` exists or is on its way (valid until `t` is written).
  bool copied(tensor_id t) const noexcept { return copied_[t]; }
  void set_copied(tensor_id t, bool copied) noexcept { copied_[t] = copied; }

  // ---- Transitions: each records what the executor just did. ----

  /// A persistent tensor outside the cache took its device memory (it stays `absent` here:
  /// the executor holds its pointer).
  void persistent_allocated(tensor_id t) noexcept;
  /// absent, on_host or dropped -> resident: the cache allocated it.
  void allocated(tensor_id t) noexcept;
  /// resident -> `to` (on_host: evicted with a valid host copy; dropped: to be rebuilt):
  /// its device memory went back.
  void left_device(tensor_id t, residency to) noexcept;
  /// resident -> offloading: the cache let go of `ptr`, held aside while the copy runs.
  void offload_started(tensor_id t, void* ptr) noexcept;
  /// offloading -> on_host: the copy landed and the memory held aside went back.
  void offload_landed(tensor_id t) noexcept;
  /// on_host -> prefetching: the copy back into `ptr` (from the heap, not the cache) began.
  void prefetch_started(tensor_id t, void* ptr) noexcept;
  /// offloading or prefetching -> resident: the cache took the memory held aside.
  void back_in_cache(tensor_id t) noexcept;
  /// absent, resident, on_host or dropped -> staged: its value (if any) was copied into the
  /// host staging memory, and its device memory (if any) went back.
  void staged(tensor_id t) noexcept;
  /// staged or on_host -> dropped: its host value was given back (host memory ran out), to
  /// be rebuilt.
  void host_value_dropped(tensor_id t) noexcept { set(t, residency::dropped); }
  /// Any -> absent: whatever it held is given back (by the caller, before).
  void freed(tensor_id t) noexcept;
  /// absent -> `before` (absent or dropped): a birth undone before the tensor held a value.
  void unborn(tensor_id t, residency before) noexcept;
  /// dropped -> absent for every tensor: a rebuilt and dropped-again tensor holds nothing.
  void forget_dropped() noexcept;

  /// A workspace of `bytes` is held for the running step, or given back.
  void workspace_taken(std::size_t bytes) noexcept { bytes_live_ += bytes; }
  void workspace_returned(std::size_t bytes) noexcept { bytes_live_ -= bytes; }

  // ---- Counters ----

  /// Exact bytes of device memory held for tensors (and the step's workspaces).
  std::size_t bytes_live() const noexcept { return bytes_live_; }
  /// Tensors holding device memory.
  std::size_t tensors_live() const noexcept { return tensors_live_; }
  /// Tensors on_host: none, and there is nothing to prefetch (prefetch_ahead walked the
  /// route to its end at every step of a network without checkpoint layers: a 20,000-layer
  /// chain's planning, quadratic).
  std::size_t on_host_tensors() const noexcept { return on_host_; }
  /// Starts a step's peaks at 0.
  void begin_step() noexcept { step_peak_live_ = step_peak_heap_ = 0; }
  /// Raises the step's peaks to what is live now and to `heap_bytes_in_use`.
  void note_peak(std::size_t heap_bytes_in_use) noexcept;
  std::size_t step_peak_live() const noexcept { return step_peak_live_; }
  std::size_t step_peak_heap() const noexcept { return step_peak_heap_; }

 private:
  void count_in(tensor_id t) noexcept;
  void count_out(tensor_id t) noexcept;
  void set(tensor_id t, residency to) noexcept;  // every change of state_, counting on_host_

  const tensor_table& table_;
  std::vector<residency> state_;  // per tensor
  std::vector<void*> aside_;      // per tensor: device memory held outside the cache
  std::vector<bool> copied_;      // per tensor: a host copy exists or is on its way
  std::size_t bytes_live_ = 0;
  std::size_t tensors_live_ = 0;
  std::size_t on_host_ = 0;         // tensors on_host
  std::size_t step_peak_live_ = 0;  // max bytes_live_ within the current step
  std::size_t step_peak_heap_ = 0;  // max heap bytes in use within the current step
};

}  // namespace memweave
