// The executor's moves of a tensor between where it can be: born and freed in the tensor
// cache, evicted (to host memory, or dropped for a rebuild), written back ahead, offloaded and
// prefetched through the transfer engine, fetched when a step needs it, rebuilt by replaying
// a layer's forward, and packed anew when scattered allocations leave no run long enough.
// Each move is made here and recorded in the residency table right after (executor.cpp says
// when each is made).
#include "memweave/engine/executor.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "engine/runtime/executor_staging.hpp"
#include "engine/runtime/executor_transfers.hpp"
#include "engine/runtime/kernel_launcher.hpp"
#include "engine/runtime/residency_table.hpp"
#include "engine/runtime/schedule_inputs.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"

namespace memweave {
namespace {

// Write-back skips tensors whose life ends within this many steps.
constexpr std::size_t k_write_back_horizon = 8;

}  // namespace

// Whether the tensor cache owns `t`'s device memory: every transient tensor, and under
// utp/all the persistent ones too. Workspace placeholders (0 bytes) are taken at the step.
bool executor::in_cache(tensor_id t) const noexcept {
  return table_[t].bytes != 0 && (cache_persistent() || !table_[t].persistent);
}

void* executor::allocate_transient(tensor_id t, std::size_t step) {
  const tensor_info& info = table_[t];
  void* p = nullptr;
  try {
    p = cache_->allocate(t, info.bytes);
  } catch (const out_of_memory& e) {
    const route_step rs = route_.at(step);
    // Device memory could not be made because host memory, where it would go, is full: the
    // budget is not what to raise.
    throw out_of_memory(std::string(host_exhausted_ ? "host memory ran out" : "out of budget") +
                            " at step " + std::to_string(step + 1) + " (" + net_[rs.layer].name +
                            " " + to_string(rs.direction) + "): tensor " + info.name + " (" +
                            to_string(info.role) + "): " + e.what(),
                        e.requested(), e.free_bytes(), e.largest_free_run());
  }
  residency_->allocated(t);
  return p;
}

void executor::free_transient(tensor_id t) noexcept {
  switch (residency_->state(t)) {
    case residency::resident:
      cache_->release(t);
      break;
    case residency::offloading:
    case residency::prefetching:
      // A copy may still touch the memory: let it finish before the bytes are reused.
      try {
        if (residency_->state(t) == residency::offloading) {
          transfers_->engine.wait_offloaded(t);
        } else {
          transfers_->engine.make_ready(t, dev_.get_stream(stream_role::compute));
        }
      } catch (...) {
        // The failure stays pending in the engine and is thrown by its next call.
      }
      (void)heap_->deallocate(residency_->aside(t));
      break;
    case residency::staged:
      retire_staging(t);
      break;
    case residency::on_host:
    case residency::dropped:
    case residency::absent:
      break;
  }
  forget_host(t);
  residency_->freed(t);
}

void* executor::device_ptr(tensor_id t) const {
  if (t == invalid_tensor) return nullptr;
  if (persistent_ptr_[t] != nullptr) return persistent_ptr_[t];
  if (host_resident_[t] != nullptr) return host_resident_[t].get();
  // A staged tensor's whole value, in host memory: a split step's kernel reaches it only
  // through its micro buffer (split_step.hpp); a watched copy reads it directly.
  if (residency_->state(t) == residency::staged) return staging_->buffer[t].get();
  return residency_->state(t) == residency::resident ? cache_->ptr(t) : nullptr;
}

// The cache needs room: move `t` to host memory. A tensor whose host copy is still valid
// (offloaded before and not written since) leaves at once; otherwise it is offloaded and
// this thread waits for the copy (the compute stream has nothing to do until the step's
// allocation succeeds anyway).
// all: whether evicting `t` should drop it (rebuilding costs its producer's forward again)
// rather than move it (a copy out and back).
bool executor::drop_on_evict(tensor_id t) const {
  if (!may_drop_now(t)) return false;
  const layer& l = net_[table_[t].owner];
  std::vector<shape4> in;
  for (layer_id i : l.inputs) in.push_back(net_[i].output_shape);
  const double rebuild_s = layers::forward_flops(l, in) / options_.model.flops;
  const double move_s =
      2.0 * static_cast<double>(table_[t].bytes) / options_.model.link_bytes_per_s;
  return rebuild_s <= move_s;
}

// Whether evicting `t` may drop it: a tensor the running step reads is never dropped (it would
// be rebuilt within the step, while the step's other tensors are held).
bool executor::may_drop_now(tensor_id t) const {
  return recompute_ && droppable_[t] && !read_by_running_step(t);
}

bool executor::read_by_running_step(tensor_id t) const {
  if (current_step_ >= route_.step_count()) return false;
  for (const auto& a : table_.accesses(current_step_)) {
    if (a.tensor == t) return true;
  }
  return false;
}

// Called where `t`'s device memory is about to be written or given back. An offload of it
// still in flight (a write-back ahead of need) is dropped: its copy reads that memory while a
// kernel writes it, or a later tensor reuses it. On a GPU (and in the null device's model) the
// copy then reads a mix that is thrown away, and waiting for it would only stall the step. On
// the host backend the copy is a memcpy on another thread: a data race (ThreadSanitizer saw
// BN's running statistics written under a write-back of them), so there the compute stream
// waits for the copy first.
void executor::forget_host(tensor_id t) noexcept {
  if (!transfers_) return;
  if (dev_.kind() == device_kind::host) {
    try {
      transfers_->engine.order_after_offload(t, dev_.get_stream(stream_role::compute));
    } catch (...) {
      try {
        (void)transfers_->engine.wait_offloaded(t);
      } catch (...) {
        // A failure stays pending in the engine and is thrown by its next call.
      }
    }
  }
  transfers_->engine.drop_host(t);
  residency_->set_copied(t, false);
}

// utp/all: when free memory runs below the watermark, start copying out the next victims
// (the LRU end) while they stay resident, so that evicting them later frees at once
// instead of stalling the step loop on a copy. Decided from heap numbers and our own
// bookkeeping only, never from whether a copy has landed, so plan and train agree.
void executor::write_back() {
  // Where steps are staged the link is what the iteration waits for: their micro-tensors
  // cross it in every staged step, and a copy ahead of need takes the link's time from them
  // (in the plan's model, with the link shared: ResNet-50 b32 at 0.5 x max(l_i) 757.1 ->
  // 744.7 ms, DenseNet-121 688.3 -> 655.8). The eviction copies what it must, when it must.
  // Asked first: it spares every step of such a run the heap's lock.
  if (any_staged_) return;
  if (heap_->stats().free_bytes >= watermark_) return;
  std::size_t covered = 0;
  for (tensor_key t : cache_->lru_tail(32)) {
    if (covered >= watermark_) break;
    covered += table_[t].bytes;
    // Gradients may still be accumulated into: copying them early is likely wasted.
    if (residency_->copied(t) || drop_on_evict(t) || table_[t].role == tensor_role::gradient)
      continue;
    // A tensor about to die would be copied for nothing.
    if (free_step_[t] <= current_step_ + k_write_back_horizon) continue;
    transfers_->engine.wait_offloaded(t);  // a discarded earlier copy still in flight
    try {
      offload_with_room(t, cache_->ptr(t), transfer_encoding::exact);
    } catch (const out_of_memory&) {
      // Host memory is full: a copy ahead of need is not worth failing for (nothing was
      // enqueued); the eviction, if it comes, decides (drop, or the error).
      return;
    }
    ++marks_.offloads;
    residency_->set_copied(t, true);
  }
}

// Starts the offload of `t` (at `ptr`, `bytes`, 0 for its own size). Where host memory is
// full, what copies still in flight hold of buffers already given back is waited for and the
// offload tried once more: on null nothing is ever held so, and host and cuda then decide as
// plan did. Throws out_of_memory when host memory is still full.
void executor::offload_with_room(tensor_id t, const void* ptr, transfer_encoding encoding,
                                 std::size_t bytes) {
  if (bytes == 0) bytes = table_[t].bytes;
  transfer_engine& engine = transfers_->engine;
  try {
    engine.offload(t, ptr, bytes, written(t), encoding);
  } catch (const out_of_memory&) {
    // ... and staging buffers given back this iteration, the stream waited for: both, as
    // null, where plan found room, holds neither.
    const bool reclaimed = engine.reclaim_host() > 0;
    if (!release_retired_staging() && !reclaimed) throw;
    engine.offload(t, ptr, bytes, written(t), encoding);
  }
}

bool executor::evict(tensor_id t, void* ptr, std::size_t bytes) {
  auto drop_it = [&] {
    forget_host(t);
    residency_->left_device(t, residency::dropped);
    return true;
  };
  if (drop_on_evict(t)) return drop_it();
  transfer_engine& engine = transfers_->engine;
  if (!residency_->copied(t)) {
    engine.wait_offloaded(t);  // a discarded earlier copy still in flight
    for (;;) {
      try {
        offload_with_room(t, ptr, transfer_encoding::exact, bytes);
        ++marks_.offloads;
        break;
      } catch (const out_of_memory&) {
        // Host memory is full even of what copies in flight held: a tensor that can be
        // rebuilt goes anyway, dropped (its replay costs compute, not memory; ResNet-152
        // under TSPLIT's staging at 12 GiB); else a host value that can be rebuilt makes
        // room, and the copy is tried again.
        if (may_drop_now(t)) return drop_it();
        if (drop_one_host_value()) continue;
        host_exhausted_ = true;  // not a matter of packing device memory: no repack
        throw;
      }
    }
    residency_->set_copied(t, true);
  }
  engine.wait_offloaded(t);  // at once when written back ahead and already landed
  residency_->left_device(t, residency::on_host);
  if (table_[t].persistent) persistent_moved_ = true;
  return true;
}

// The event an offload of `t` must wait for: the end of the step that last wrote it, when
// that step is over (its kernel enqueued), else now. Waiting only for the writer, not for
// everything queued on the compute stream, lets the copy run while later kernels compute.
event& executor::written(tensor_id t) {
  const std::size_t w = last_write_[t];
  if (w < current_step_ && step_done_[w] != nullptr && step_done_iteration_[w] == iterations_run_) {
    return *step_done_[w];
  }
  dev_.get_stream(stream_role::compute).record(*transfers_->ready);
  return *transfers_->ready;
}

// offload policy: `t` has had its last forward use; copy it out, and give its device
// memory back when the copy is reaped (offload_lag steps later).
void executor::start_offload(tensor_id t) {
  void* p = cache_->ptr(t);
  const bool fp16 = t < compressed_.size() && compressed_[t];
  offload_with_room(t, p, fp16 ? transfer_encoding::fp16 : transfer_encoding::exact);
  ++marks_.offloads;
  residency_->set_copied(t, true);
  residency_->offload_started(t, cache_->forget(t));
}

// Copies `t` back into `p` after the event `ready` last recorded on the compute stream. Its
// offload may still be in flight when its memory was released without waiting
// (apply_releases): the copy back needs it landed.
void executor::start_prefetch(tensor_id t, void* p) {
  transfers_->engine.wait_offloaded(t);
  transfers_->engine.prefetch(t, p, transfers_->ready.get());
  ++marks_.prefetches;
}

// An offload in flight lands: its device copy, held aside, goes back to the heap. With
// `compute`, that stream waits for the copy first (the memory's next user runs there).
void executor::finish_offload(tensor_id t, stream* compute) {
  transfers_->engine.wait_offloaded(t, compute);
  (void)heap_->deallocate(residency_->aside(t));
  residency_->offload_landed(t);
}

void executor::reap_offloads(std::size_t step, bool all) {
  if (!transfers_) return;
  auto reap = [this](tensor_id t) {
    if (residency_->state(t) == residency::offloading) finish_offload(t, nullptr);  // else gone
  };
  // Offloads are due exactly at the step they were scheduled for, so each list is reaped
  // once, when its step comes (or all of them at the end of the iteration).
  const std::size_t first = all ? 0 : step, last = all ? offloads_due_.size() - 1 : step;
  for (std::size_t s = first; s <= last && s < offloads_due_.size(); ++s) {
    for (tensor_id t : offloads_due_[s]) reap(t);
    offloads_due_[s].clear();
  }
}

// Brings `t` back onto the device before the step that reads it.
void executor::ensure_resident(tensor_id t, std::size_t step) {
  stream& compute = dev_.get_stream(stream_role::compute);
  switch (residency_->state(t)) {
    case residency::resident:
      (void)cache_->check(t);
      return;
    case residency::offloading:
      // Its device copy is intact: keep it (and the host copy, now valid and clean).
      transfers_->engine.wait_offloaded(t);
      cache_->insert(t, residency_->aside(t), table_[t].bytes);
      residency_->back_in_cache(t);
      return;
    case residency::prefetching:
      transfers_->engine.make_ready(t, compute);
      cache_->insert(t, residency_->aside(t), table_[t].bytes);
      residency_->back_in_cache(t);
      return;
    case residency::on_host: {
      (void)cache_->check(t);             // a miss, counted
      if (schedule_) ++schedule_misses_;  // not brought back as scheduled
      void* p = allocate_transient(t, step);
      compute.record(*transfers_->ready);
      start_prefetch(t, p);
      transfers_->engine.make_ready(t, compute);
      return;
    }
    case residency::dropped:
      rebuild(t, step);
      // A staged replay leaves it in host staging memory: one copy in.
      if (residency_->state(t) == residency::staged) return fetch_staged(t, step);
      (void)cache_->check(t);
      return;
    case residency::staged:
      fetch_staged(t, step);
      return;
    case residency::absent:
      break;
  }
  throw std::logic_error("executor: step " + std::to_string(step + 1) + " reads " + table_[t].name +
                         ", which is not alive");
}

// In backward, start copying back the tensors in host memory that the backward steps of the
// next `prefetch_distance` checkpoint layers read, into memory the heap can give without
// evicting anything (a prefetch must not push out what is needed sooner).
void executor::prefetch_ahead(std::size_t step) {
  if (!transfers_ || residency_->on_host_tensors() == 0) return;
  stream& compute = dev_.get_stream(stream_role::compute);
  int checkpoints = 0;
  bool recorded = false;
  // Memory held by a prefetch is outside the cache (it cannot be evicted while the copy is
  // in flight), so a prefetch must leave the next step room for the tensors it creates.
  std::size_t next_needs = 0;
  if (step + 1 < route_.step_count()) {
    for (const auto& a : table_.accesses(step + 1)) {
      if (a.mode == access_mode::write && !table_[a.tensor].persistent) {
        next_needs += heap_->round_up(table_[a.tensor].bytes);
      }
    }
  }
  for (std::size_t s = step + 1; s < route_.step_count(); ++s) {
    const layer& l = net_[route_.at(s).layer];
    for (const auto& a : table_.accesses(s)) {
      const tensor_id t = a.tensor;
      if (residency_->state(t) != residency::on_host) continue;
      if (heap_->largest_free_run() < heap_->round_up(table_[t].bytes) + next_needs) return;
      void* p = heap_->try_allocate(table_[t].bytes);
      if (p == nullptr) return;  // no room now; ensure_resident fetches it when needed
      if (!recorded) compute.record(*transfers_->ready), recorded = true;
      start_prefetch(t, p);
      residency_->prefetch_started(t, p);
    }
    if (l.cost == cost_class::checkpoint && l.type != layer_type::data &&
        ++checkpoints >= options_.prefetch_distance) {
      return;
    }
  }
}

// recompute/all: give back the device memory of a tensor that can be rebuilt.
void executor::drop(tensor_id t) noexcept {
  if (residency_->state(t) != residency::resident) return;
  // A host copy made before is not kept for a tensor that will be rebuilt instead.
  forget_host(t);
  cache_->release(t);
  residency_->left_device(t, residency::dropped);
}

// A convolution workspace of `bytes` from the heap; with `may_evict` (under utp/all),
// unlocked tensors leave from the LRU end until a free run holds it. nullptr when it cannot.
void* executor::take_workspace(std::size_t bytes, bool may_evict) {
  void* p = heap_->try_allocate(bytes);
  const std::size_t need = heap_->round_up(bytes);
  while (p == nullptr && may_evict && options_.policy.evict_to_host) {
    const std::vector<tensor_key> victim = cache_->lru_tail(1);
    if (victim.empty()) break;
    (void)cache_->evict(victim[0]);
    if (heap_->largest_free_run() >= need) p = heap_->try_allocate(bytes);
  }
  return p;
}

// Re-runs the forward of the layer at route position `position` (a cheap layer), making
// what it reads resident and what it writes resident again. The running statistics of BN
// are not updated a second time; DROPOUT's mask comes out identical (same seed). With
// `fused_act` (the layer is a BN or a CONV, fused_source_), the BN runs from its saved
// statistics (the CONV with the algorithm its step ran) with that ACT applied as it writes,
// into the ACT's output: the layer's own output is not made, and what BN's forward wrote
// besides it (the saved statistics) is only read.
void executor::replay_forward(std::size_t position, std::size_t step, const layer* fused_act) {
  if (fused_act == nullptr && staging_->step[position] && !evaluating_) {
    return replay_staged(position, step);
  }
  const layer& l = net_[route_.order()[position]];
  std::span<const tensor_access> accesses = table_.accesses(position);
  std::vector<tensor_access> fused;
  if (fused_act != nullptr) {
    const tensor_id y = table_.of(l.id).output;
    for (const tensor_access& a : accesses) {
      if (a.tensor != y) fused.push_back({a.tensor, access_mode::read});
    }
    fused.push_back({table_.of(fused_act->id).output, access_mode::write});
    accesses = fused;
  }
  // What it locked is unlocked however it ends (a failed allocation leaves the step free
  // to repack).
  struct unlock_all {
    tensor_cache& cache;
    std::vector<tensor_id> keys;
    ~unlock_all() {
      for (tensor_id t : keys) cache.unlock(t);
    }
  } locked{*cache_, {}};
  // What it allocates anew holds no value until its kernel is enqueued: should anything
  // fail before that, those tensors go back to what they were (dropped, or dead), so that
  // nothing is ever taken for rebuilt that was not.
  std::vector<std::pair<tensor_id, residency>> born;
  conv_step conv;
  void* workspace = nullptr;
  try {
    for (const auto& a : accesses) {
      const tensor_id t = a.tensor;
      if (!in_cache(t)) continue;
      // Parameters and running statistics are only read (a replay updates nothing).
      if (a.mode == access_mode::read || table_[t].persistent) {
        ensure_resident(t, step);
      } else if (residency_->state(t) != residency::resident) {
        const residency before = residency_->state(t);
        if (before != residency::dropped && before != residency::absent) {
          // It holds its value elsewhere (a saved statistic in host memory): fetched, the
          // replay writes the same bits over it.
          ensure_resident(t, step);
          forget_host(t);
        } else {
          // Written anew: it holds nothing.
          free_transient(t);
          born.emplace_back(t, before);
          allocate_transient(t, step);
          ++tensors_allocated_;
          rebuilt_.push_back(t);
        }
        last_write_[t] = step;
      }
      cache_->lock(t);
      locked.keys.push_back(t);
    }
    // A CONV replays the algorithm its forward step ran (another would round differently), with
    // that algorithm's workspace.
    if (l.type == layer_type::conv && position < forward_conv_.size()) {
      conv = forward_conv_[position];
      if (conv.workspace_bytes != 0) {
        workspace = take_workspace(conv.workspace_bytes, true);
        if (workspace == nullptr) {
          throw_out_of_budget(step, "the replay of " + l.name + ": the workspace of " + conv.name,
                              conv.workspace_bytes);
        }
        residency_->workspace_taken(conv.workspace_bytes);
      }
    }
    note_peak();
    launch_layer(l, true, accesses, conv, workspace, nullptr, true, fused_act);
  } catch (...) {
    if (workspace != nullptr) {
      (void)heap_->deallocate(workspace);
      residency_->workspace_returned(conv.workspace_bytes);
    }
    for (tensor_id t : locked.keys) cache_->unlock(t);
    locked.keys.clear();
    for (const auto& [t, before] : born) {
      if (residency_->state(t) == residency::resident) {
        free_transient(t);
        rebuilt_.erase(std::remove(rebuilt_.begin(), rebuilt_.end(), t), rebuilt_.end());
      }
      residency_->unborn(t, before);  // dropped again where it was (its allocation may have failed)
    }
    throw;
  }
  if (workspace != nullptr) {
    (void)heap_->deallocate(workspace);  // stream order: later kernels run after this one
    residency_->workspace_returned(conv.workspace_bytes);
  }
  ++recomputations_;
  ++marks_.replays;
}

// Makes a dropped tensor resident again by replaying the layers the plan says (its
// producer, and any dropped tensors that one reads, in route order). The schedule's rebuilds
// (a chain it planned and priced), those of what host memory running out gave back (a CONV's
// output too), and under TSPLIT every one (a staged producer replays staged) replay the
// chain; the rest, the recompute plan's.
void executor::rebuild(tensor_id t, std::size_t step) {
  if (schedule_ || any_staged_ || (t < host_dropped_.size() && host_dropped_[t])) {
    rebuild_chain(t, step);
    return;
  }
  const recompute_key wanted[] = {t};
  const auto order = recompute_->rebuild_order(
      wanted, [this](recompute_key k) { return residency_->state(k) == residency::resident; });
  for (recompute_pos p : order) replay_forward(p, step);
  if (residency_->state(t) != residency::resident) {
    throw std::logic_error("executor: rebuilding " + table_[t].name + " at step " +
                           std::to_string(step + 1) + " did not make it resident");
  }
}

// Whether a rebuild of `t` must first rebuild what `a` (an access of the layer it replays)
// names: a cached, non-persistent read other than `t` that is dropped, or dead by now.
bool executor::rebuilt_first(tensor_id t, const tensor_access& a) const {
  const tensor_id y = a.tensor;
  if (y == t || a.mode != access_mode::read || !in_cache(y) || table_[y].persistent) return false;
  const residency r = residency_->state(y);
  return r == residency::dropped || (r == residency::absent && rebuildable(net_, table_, y));
}

// Every unlocked tensor leaves the device (to host memory, or dropped).
void executor::evict_all() {
  for (tensor_key t : cache_->lru_order()) (void)cache_->evict(t);
}

// Replays `t`'s layer after rebuilding what it reads that is dropped, or dead by now; an
// ACT's output after a BN, under the schedule, fused: BN's forward with the ACT, from what BN
// reads. What the chain reads is guarded against host memory running out in one of its
// replays (drop_one_host_value).
void executor::rebuild_chain(tensor_id t, std::size_t step) {
  const layer_id fused = schedule_ && t < fused_source_.size() ? fused_source_[t] : invalid_layer;
  const layer& l = net_[fused != invalid_layer ? fused : table_[t].owner];
  const std::size_t position = route_.position(l.id);
  const std::size_t guarded = replaying_.size();
  for (const auto& a : table_.accesses(position)) replaying_.push_back(a.tensor);
  try {
    for (const auto& a : table_.accesses(position)) {
      if (rebuilt_first(t, a)) rebuild_chain(a.tensor, step);
    }
    replay_forward(position, step, fused != invalid_layer ? &net_[table_[t].owner] : nullptr);
  } catch (...) {
    replaying_.resize(guarded);
    throw;
  }
  replaying_.resize(guarded);
  const residency r = residency_->state(t);
  if (r != residency::resident && r != residency::staged) {
    throw std::logic_error("executor: replaying " + l.name + " at step " +
                           std::to_string(step + 1) + " did not make " + table_[t].name +
                           " resident");
  }
}

// Makes every tensor of step `step` that the cache holds resident and locked (appending it
// to `locked`): what it reads is fetched or rebuilt, what it writes anew is born here. In
// route order, or largest first (into an emptied arena that packs them without gaps).
void executor::acquire(std::size_t step, std::span<const tensor_access> accesses,
                       std::vector<tensor_id>& locked, bool largest_first) {
  auto take = [&](const tensor_access& a) {
    const tensor_id t = a.tensor;
    if (!in_cache(t)) return;
    if (!table_[t].persistent &&
        (residency_->state(t) == residency::absent ||
         (a.mode == access_mode::write && residency_->state(t) != residency::resident))) {
      // Born here (a tensor this step writes anew needs no rebuilding or fetching).
      free_transient(t);
      allocate_transient(t, step);
      ++tensors_allocated_;
    } else {
      ensure_resident(t, step);
    }
    // A tensor written, accumulated or updated here changes: a host copy of it is stale.
    if (a.mode != access_mode::read) {
      last_write_[t] = step;
      forget_host(t);
    }
    cache_->lock(t);
    locked.push_back(t);
  };
  if (!largest_first) {  // the step loop's usual path: no copy of the accesses
    // What it reads first (rebuilding what is dropped), then what it writes: what those
    // rebuilds re-created only for one another (dead before this step) goes in between, so
    // that the step's new tensors can take its place (VGG16 at a third of its peak held
    // conv1_1's 822 MB output through conv1_2's backward, splitting the workspace's room).
    for (const auto& a : accesses) {
      if (a.mode != access_mode::write) take(a);
    }
    if (replaying_.empty()) drop_dead_rebuilt(step, false);  // the step's own, not a replay's
    for (const auto& a : accesses) {
      if (a.mode == access_mode::write) take(a);
    }
    return;
  }
  std::vector<tensor_access> order(accesses.begin(), accesses.end());
  std::stable_sort(order.begin(), order.end(), [this](const auto& x, const auto& y) {
    return table_[x.tensor].bytes > table_[y.tensor].bytes;
  });
  for (const auto& a : order) take(a);
}

// utp/all, when a step's tensors cannot all be placed: the budget holds them (the
// constructor checked), but the ones placed so far split the free memory. Everything goes:
// what the step writes anew is given back (it holds nothing yet), prefetches in flight
// land, every resident tensor leaves for host memory (a tensor the step reads is copied,
// never dropped), then the dropped tensors it reads are rebuilt in the empty arena and leave
// too. acquire() then places the step's tensors into the empty arena, largest first.
// Costs a round trip of what was resident; it happens only near the smallest budget.
void executor::repack(std::size_t step, std::span<const tensor_access> accesses,
                      std::vector<tensor_id>& locked) {
  for (tensor_id t : locked) cache_->unlock(t);
  locked.clear();
  for (const auto& a : accesses) {
    const tensor_id t = a.tensor;
    if (in_cache(t) && !table_[t].persistent && a.mode == access_mode::write &&
        residency_->state(t) == residency::resident) {
      free_transient(t);
    }
  }
  stream& compute = dev_.get_stream(stream_role::compute);
  for (tensor_id t = 0; t < residency_->size(); ++t) {
    if (residency_->state(t) == residency::offloading) {
      // A scheduled offload holds its device copy aside until its release: release it now.
      finish_offload(t, &compute);
      continue;
    }
    if (residency_->state(t) != residency::prefetching) continue;
    transfers_->engine.make_ready(t, compute);
    cache_->insert(t, residency_->aside(t), table_[t].bytes);
    residency_->back_in_cache(t);
  }
  release_bucket_locks(step);  // reduced gradients waiting for their update move too
  evict_all();
  bool rebuilt = false;
  for (const auto& a : accesses) {
    if (in_cache(a.tensor) && residency_->state(a.tensor) == residency::dropped) {
      rebuild(a.tensor, step);
      rebuilt = true;
    }
  }
  if (rebuilt) evict_all();  // the rebuilt tensors too: they would split the arena again
}

}  // namespace memweave
