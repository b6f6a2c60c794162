// The executor's staged split steps (TSPLIT micro-tensors); see executor_staging.hpp.
#include "engine/runtime/executor_staging.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <stdexcept>
#include <string>

#include "engine/runtime/executor_transfers.hpp"
#include "engine/runtime/kernel_launcher.hpp"
#include "engine/runtime/residency_table.hpp"
#include "engine/runtime/schedule_inputs.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"
#include "memweave/engine/split_plan.hpp"
#include "memweave/swap/fp16.hpp"

namespace memweave {

int batch_parts_of(const executor_options& options, std::size_t s) noexcept {
  return s < options.split_parts.size() ? std::max(1, options.split_parts[s]) : 1;
}

int channel_groups_of(const executor_options& options, const network& net, const route& r,
                      std::size_t s) noexcept {
  if (s >= options.channel_parts.size() || s >= r.step_count()) return 1;
  const std::int64_t k = splittable_channels(net[r.at(s).layer]);
  return static_cast<int>(std::clamp<std::int64_t>(options.channel_parts[s], 1, k));
}

bool staged_split_step(const executor_options& options, const network& net, const route& r,
                       std::size_t s) noexcept {
  return options.policy.evict_to_host &&
         (batch_parts_of(options, s) > 1 || channel_groups_of(options, net, r, s) > 1) &&
         net[r.at(s).layer].type != layer_type::tiled;
}

bool first_input_has_grad(const tensor_table& table, const layer& l) noexcept {
  return !l.inputs.empty() && table.of(l.inputs[0]).output_grad != invalid_tensor;
}

bool staged_slice(const tensor_info& t, std::int64_t batch) noexcept {
  return batch_shaped(t, batch) && t.bytes != 0 && !t.persistent && !t.host_resident;
}

namespace {

std::int64_t batch_of(const network& net) {
  return net[net.data_layer()].output_shape.n;
}

}  // namespace

// executor_options::split_compress: which micro-tensors are held as fp16. Activations that
// only batch-split steps stage; not gradients (role gradient: their small values would fall
// into fp16's subnormals or to zero), the batch and labels (DATA's: the data layer writes them
// into staging memory as they are, and a label is an index), the loss's output (the accuracy
// reads it), a dropout mask (role auxiliary), a BN's input (bn_input_tensors), nor what a step
// in channel groups stages (its copies go by rows).
void executor::mark_fp16_staging() {
  const std::int64_t batch = batch_of(net_);
  const std::vector<bool> bn_input = bn_input_tensors(net_, table_);
  std::vector<bool> by_rows(table_.size(), false);
  for (std::size_t s = 0; s < route_.step_count(); ++s) {
    if (!staging_->step[s] || channel_groups_of(options_, net_, route_, s) <= 1) continue;
    for (const tensor_access& a : table_.accesses(s)) by_rows[a.tensor] = true;
  }
  for (tensor_id t = 0; t < table_.size(); ++t) {
    const tensor_info& info = table_[t];
    const layer_type owner = net_[info.owner].type;
    staging_->fp16[t] = staged_slice(info, batch) && !bn_input[t] && !by_rows[t] &&
                        info.role == tensor_role::data && owner != layer_type::data &&
                        owner != layer_type::softmax_loss;
  }
}

std::size_t executor::staging_bytes(tensor_id t) const noexcept {
  return staging_->fp16[t] ? table_[t].bytes / 2 : table_[t].bytes;
}

fp16_codec& executor::staging_codec() {
  if (staging_->codec == nullptr) {
    auto factory = launcher_->fp16_codec_factory();
    staging_->codec = factory ? factory(dev_) : make_host_fp16_codec(dev_);
  }
  return *staging_->codec;
}

// `count` values of `t` from `device_src` into its staging memory from value `first`, on the
// compute stream (after the kernels that wrote them): an fp16 one converted on the way.
void executor::copy_to_staging(tensor_id t, const void* device_src, std::size_t first,
                               std::size_t count) {
  stream& compute = dev_.get_stream(stream_role::compute);
  char* host = reinterpret_cast<char*>(staging_->buffer[t].get());
  if (!staging_->fp16[t]) {
    compute.copy_async(host == nullptr ? nullptr : host + first * sizeof(float), device_src,
                       count * sizeof(float), copy_kind::device_to_host);
    staging_->bytes_staged += count * sizeof(float);
    return;
  }
  staging& st = *staging_;
  staging_codec().encode(compute, host == nullptr ? nullptr : host + first * 2, device_src, count,
                         st.codec_error);
  // Stream order: after the encode's work, before the next (which sets codec_error anew).
  compute.launch([&st] {
    st.stream_error = std::max(st.stream_error, st.codec_error.load(std::memory_order_relaxed));
  });
  st.bytes_staged += count * 2;
  st.bytes_fp16 += count * 2;
}

// `t`'s whole value from its staging memory into `device_dst`, on the compute stream.
void executor::copy_from_staging(tensor_id t, void* device_dst) {
  stream& compute = dev_.get_stream(stream_role::compute);
  const std::size_t count = table_[t].bytes / sizeof(float);
  if (!staging_->fp16[t]) {
    compute.copy_async(device_dst, staging_->buffer[t].get(), table_[t].bytes,
                       copy_kind::host_to_device);
    staging_->bytes_staged += table_[t].bytes;
    return;
  }
  staging_codec().decode(compute, device_dst, staging_->buffer[t].get(), count);
  staging_->bytes_staged += count * 2;
  staging_->bytes_fp16 += count * 2;
}

// Staging buffers given back this iteration stay allocated until the stream is done with
// them, counted in the host pool (pinned ones by the pool itself, plain ones as
// `retired_held`): where room is short, the stream is waited for and they go. On null none
// is ever allocated, so plan decides with that room free and host and cuda decide the same
// once they are released. False when there were none.
bool executor::release_retired_staging() {
  if (staging_->retired.empty()) return false;
  dev_.get_stream(stream_role::compute).synchronize();
  staging_->retired.clear();
  if (staging_->retired_held != 0) {
    staging_->retired_held = 0;
    transfers_->engine.set_host_held_elsewhere(staging_->counted());
  }
  return true;
}

float* executor::new_staging(tensor_id t) {
  retire_staging(t);
  const std::size_t bytes = staging_bytes(t);
  const std::size_t pool = transfers_->pool.capacity();
  auto used = [&] { return transfers_->pool.bytes_in_use() + staging_->counted(); };
  const bool pinned = dev_.touches_memory() && launcher_->pins_staging();
  // Full: first what copies in flight still hold of buffers given back is waited for (as
  // offload_with_room), then host values that can be rebuilt make room.
  while (used() + bytes > pool && (transfers_->engine.reclaim_host() > 0 ||
                                   release_retired_staging() || drop_one_host_value())) {
  }
  // `largest`: the pool's largest free piece, where known.
  const auto full = [&](const std::string& how, std::size_t largest) {
    host_exhausted_ = true;  // not a matter of packing device memory: no repack
    return out_of_memory("host memory for the split steps' micro-tensors: " + table_[t].name +
                             " needs " + format_bytes(bytes) + "; the host pool of " +
                             format_bytes(pool) + how + " (raise " + options_.host_pool_knob + ")",
                         bytes, used() < pool ? pool - used() : 0, largest);
  };
  if (used() + bytes > pool) {
    // With pinned staging the pool counts the staged buffers itself (held stays 0).
    throw full(" holds " + format_bytes(transfers_->pool.bytes_in_use()) +
                   (pinned ? " of swapped and staged tensors"
                           : " of swapped tensors and " + format_bytes(staging_->held) +
                                 " of staged ones"),
               used() < pool ? pool - used() : 0);
  }
  auto& b = staging_->buffer[t];
  if (pinned) {
    // Counted by the pool itself. Where it has the bytes but not in one piece, what retired
    // buffers and copies in flight hold goes first.
    void* p = transfers_->pool.allocate(bytes);
    while (p == nullptr && (release_retired_staging() || transfers_->engine.reclaim_host() > 0)) {
      p = transfers_->pool.allocate(bytes);
    }
    if (p == nullptr) {
      throw full(" has " + format_bytes(pool - used()) + " free, not in one piece", 0);
    }
    b = staging_buffer(static_cast<float*>(p), staging_free{&transfers_->pool});
    return b.get();
  }
  staging_->held += bytes;
  staging_->holds[t] = true;
  transfers_->engine.set_host_held_elsewhere(staging_->counted());
  if (dev_.touches_memory()) {
    b = staging_buffer(new float[(bytes + sizeof(float) - 1) / sizeof(float)],
                       staging_free{nullptr, &staging_->plain_live, bytes});
    staging_->plain_live += bytes;
    // What plain staging memory really holds, retired buffers included, stays within the
    // room the pool's accounting gives it.
    if (transfers_->pool.bytes_in_use() + staging_->plain_live > pool) {
      throw std::logic_error("executor: plain staging memory " +
                             format_bytes(staging_->plain_live) + " beside the pool's " +
                             format_bytes(transfers_->pool.bytes_in_use()) +
                             " exceeds the host pool of " + format_bytes(pool));
    }
  }
  return b.get();
}

void executor::retire_staging(tensor_id t) noexcept {
  auto& b = staging_->buffer[t];
  const bool plain = staging_->holds[t];
  if (plain) {
    staging_->held -= staging_bytes(t);
    staging_->holds[t] = false;
  }
  if (b != nullptr) {
    try {
      staging_->retired.push_back(std::move(b));
      // Plain memory stays allocated while retired: still counted, as retired_held.
      if (plain) staging_->retired_held += staging_bytes(t);
    } catch (...) {
      // No room to defer the free: wait for the stream instead (it may still read b).
      try {
        dev_.get_stream(stream_role::compute).synchronize();
      } catch (...) {
        // The kernel's failure is reported by run_iteration; b's readers are done either way.
      }
      b.reset();
    }
  }
  if (plain) transfers_->engine.set_host_held_elsewhere(staging_->counted());
}

// Moves `t` into host staging memory before the staged step `step` (which accesses it as
// `mode`), copying its value when the step reads or adds to it.
void executor::stage(tensor_id t, access_mode mode, std::size_t step) {
  stream& compute = dev_.get_stream(stream_role::compute);
  const tensor_info& info = table_[t];
  const bool keep_value = mode != access_mode::write;
  if (residency_->state(t) == residency::offloading) finish_offload(t, &compute);
  if (residency_->state(t) == residency::prefetching) {
    transfers_->engine.make_ready(t, compute);
    cache_->insert(t, residency_->aside(t), info.bytes);
    residency_->back_in_cache(t);
  }
  if (residency_->state(t) == residency::dropped && keep_value) rebuild(t, step);
  switch (residency_->state(t)) {
    case residency::staged:
      return;
    case residency::resident: {
      new_staging(t);
      if (keep_value) copy_to_staging(t, cache_->ptr(t), 0, info.bytes / sizeof(float));
      forget_host(t);
      cache_->release(t);  // stream order: the copy above reads it first
      residency_->staged(t);
      return;
    }
    case residency::on_host: {
      float* h = new_staging(t);
      transfers_->engine.wait_offloaded(t);
      if (keep_value && h != nullptr) {
        // Host memory to host memory, here: an fp16 one rounded on the way.
        const auto* from = static_cast<const float*>(transfers_->engine.host_copy(t));
        if (staging_->fp16[t]) {
          staging_->host_error = std::max(
              staging_->host_error,
              fp16_encode(reinterpret_cast<std::uint16_t*>(h), from, info.bytes / sizeof(float)));
        } else {
          launcher_->copy_host_memory(h, from, info.bytes);
        }
      }
      forget_host(t);
      residency_->staged(t);
      return;
    }
    case residency::absent:
    case residency::dropped:
      if (keep_value) {
        throw std::logic_error("executor: staged step " + std::to_string(step + 1) + " reads " +
                               info.name + ", which is not alive");
      }
      new_staging(t);
      residency_->staged(t);
      return;
    case residency::offloading:
    case residency::prefetching:
      break;
  }
  throw std::logic_error("executor: " + info.name + " is still moving at staged step " +
                         std::to_string(step + 1));
}

// A step that runs whole needs staged `t` on the device: one copy in, as a fetch from host
// memory.
void executor::fetch_staged(tensor_id t, std::size_t step) {
  void* p = allocate_transient(t, step);
  copy_from_staging(t, p);
  retire_staging(t);
  // An offload of it must wait for this copy (enqueued in this step), not for the staged
  // step that wrote it last.
  last_write_[t] = step;
}

// Before staged step `s`'s kernel: which of its batch-shaped tensors stay whole on the device
// and which go to host staging memory, the rest of its accesses listed to be acquired whole.
// With `keep`, as many as the budget holds beside the micro-step stay whole (deterministic:
// from the budget and residency, not from what the heap happens to hold), first those already
// resident that the step reads (staging them would copy them out and their slices back in),
// then those it writes anew; the others are staged. Without `keep`, every one is staged.
// `workspace_bytes` (a convolution's, taken with the micro buffer) is room kept beside them.
void executor::stage_step(std::size_t s, std::span<const tensor_access> accesses, bool keep,
                          std::size_t workspace_bytes) {
  staging& st = *staging_;
  st.whole.clear();
  st.ids.clear();
  st.tensors.clear();
  const std::int64_t batch = batch_of(net_);
  const int parts = batch_parts_of(options_, s);
  const std::int64_t images = largest_micro_batch(batch, parts);
  const layer& l = net_[route_.at(s).layer];
  const int groups = channel_groups_of(options_, net_, route_, s);
  const std::int64_t K = splittable_channels(l);
  const std::int64_t channels = (K + groups - 1) / groups;  // the largest group
  // Cut by channel groups: the step's output, output gradient, parameters, their gradients
  // and momenta (persistent ones too).
  const auto by_channels = [&](tensor_id t) {
    return groups > 1 && channel_cut(table_[t], l) && !table_[t].host_resident;
  };
  const auto slice_bytes = [&](tensor_id t) {
    std::size_t b = table_[t].bytes;
    if (batch_shaped(table_[t], batch)) {
      b = b / static_cast<std::size_t>(batch) * static_cast<std::size_t>(images);
    }
    if (by_channels(t)) b = b / static_cast<std::size_t>(K) * static_cast<std::size_t>(channels);
    return heap_->round_up(b);
  };
  std::vector<const tensor_access*> sliced;
  // The micro-step: whole tensors plus every slice, and the workspace.
  std::size_t need = workspace_bytes == 0 ? 0 : heap_->round_up(workspace_bytes);
  for (const tensor_access& a : accesses) {
    if (!in_cache(a.tensor) || !(staged_slice(table_[a.tensor], batch) || by_channels(a.tensor))) {
      st.whole.push_back(a);
      if (in_cache(a.tensor)) need += heap_->round_up(table_[a.tensor].bytes);
      continue;
    }
    sliced.push_back(&a);
    need += slice_bytes(a.tensor);
  }
  const std::size_t budget =
      options_.budget_bytes != 0 ? options_.budget_bytes : heap_->stats().bytes_reserved;
  std::size_t room = budget > need ? budget - need : 0;
  std::vector<bool> kept(sliced.size(), false);
  if (schedule_ && !evaluating_) {
    const auto& whole = schedule_->steps[s].whole;
    for (std::size_t i = 0; i < sliced.size(); ++i) {
      kept[i] = std::find(whole.begin(), whole.end(), sliced[i]->tensor) != whole.end();
    }
  }
  const auto holds_device = [&](tensor_id t) {
    const residency r = residency_->state(t);
    return r == residency::resident || r == residency::offloading || r == residency::prefetching;
  };
  for (int pass = 0; keep && pass < 2; ++pass) {
    for (std::size_t i = 0; i < sliced.size(); ++i) {
      const tensor_access& a = *sliced[i];
      const bool candidate = pass == 0 ? holds_device(a.tensor) && a.mode != access_mode::write
                                       : a.mode == access_mode::write &&
                                             residency_->state(a.tensor) != residency::staged;
      const std::size_t extra = heap_->round_up(table_[a.tensor].bytes) - slice_bytes(a.tensor);
      if (kept[i] || !candidate || extra > room) continue;
      kept[i] = true;
      room -= extra;
    }
  }
  for (std::size_t i = 0; i < sliced.size(); ++i) {
    const tensor_access& a = *sliced[i];
    if (kept[i]) {
      st.whole.push_back(a);
      continue;
    }
    stage(a.tensor, a.mode, s);
    if (a.mode != access_mode::read) last_write_[a.tensor] = s;
    st.ids.push_back(a.tensor);
    st.tensors.push_back(micro_tensor(a, by_channels(a.tensor) ? K : 0, parts));
  }
}

// How a staged step reaches `a`'s tensor by slices: `channels` = K where channel groups cut
// it, 0 where micro-batches alone do; `parts` micro-batches.
layers::staged_tensor executor::micro_tensor(const tensor_access& a, std::int64_t channels,
                                             int parts) const {
  const std::int64_t batch = batch_of(net_);
  layers::staged_tensor m;
  m.n = batch_shaped(table_[a.tensor], batch) ? batch : 1;
  m.per_image = static_cast<std::int64_t>(table_[a.tensor].bytes / sizeof(float)) / m.n;
  m.read = a.mode != access_mode::write;
  m.written = a.mode != access_mode::read;
  m.channels = channels;
  m.fp16 = staging_->fp16[a.tensor];  // never one a channel group cuts (executor constructor)
  // A parameter gradient cut by channel groups sums over the micro-batches: the later ones
  // read what the earlier left.
  if (channels > 0 && parts > 1 && table_[a.tensor].role == tensor_role::parameter_gradient) {
    m.read = true;
  }
  return m;
}

// What the memory schedule is told of the staged steps (schedule_inputs::staged): each
// micro-tensor of a staged step is a use in host memory there unless the schedule keeps it
// whole (scheduled_step::whole: stage_step then keeps just those); its slice in the micro
// buffers is the largest micro-batch's (DATA's none: it writes into staging memory), and its
// copies are charged as the null device charges them, without the slices handed between
// steps (the most it copies). Steps in channel groups are not planned (executor
// constructor).
void executor::describe_staging(schedule_inputs& in) const {
  const std::size_t steps = route_.step_count();
  in.staged.assign(steps, {});
  in.split_parts.assign(steps, 1);
  for (std::size_t s = 0; s < steps; ++s) in.split_parts[s] = batch_parts_of(options_, s);
  in.staged_slice_bytes.assign(steps, {});
  in.staged_copy_bytes.assign(steps, {});
  in.staged_fp16 = staging_->fp16;
  const std::int64_t batch = batch_of(net_);
  for (std::size_t s = 0; s < steps; ++s) {
    if (!staging_->step[s]) continue;
    const route_step rs = route_.at(s);
    const layer& l = net_[rs.layer];
    const int parts = batch_parts_of(options_, s);
    const std::int64_t images = largest_micro_batch(batch, parts);
    // DATA writes into staging memory: no slice on the device, nothing copied.
    const bool slices = l.type != layer_type::data && table_.has_work(s);
    for (const tensor_access& a : table_.accesses(s)) {
      if (!in_cache(a.tensor) || !staged_slice(table_[a.tensor], batch)) continue;
      in.staged[s].push_back(a);
      const std::size_t slice = table_[a.tensor].bytes / static_cast<std::size_t>(batch) *
                                static_cast<std::size_t>(images);
      in.staged_slice_bytes[s].push_back(slices ? heap_->round_up(slice) : 0);
      // Each tensor's copies are its own (BN's extra passes copy in what the step reads).
      const layers::staged_tensor m = micro_tensor(a, 0, parts);
      in.staged_copy_bytes[s].push_back(
          slices ? layers::staged_copy_bytes(l.type, rs.direction == pass::forward, {&m, 1}, parts,
                                             first_input_has_grad(table_, l))
                 : 0);
    }
  }
}

// A staged step's tensors: its micro-tensors to host staging memory (or kept whole where the
// budget allows), the rest acquired and locked, then the micro buffer (with the step's
// convolution workspace of `workspace_bytes` in it, returned; nullptr where 0). When the heap
// cannot place them (the tensors kept whole split the free memory), every micro-tensor is
// staged (under a schedule, every one but those it keeps whole: the schedule planned the step
// with them) and, failing that too, the arena is emptied (repack) and the micro buffer taken
// first.
void* executor::acquire_staged(std::size_t s, std::span<const tensor_access> accesses,
                               std::vector<tensor_id>& locked, std::size_t workspace_bytes) {
  // What it reads that was dropped is rebuilt first (a staged replay uses the staging
  // bookkeeping that stage_step fills; the slices handed over give their memory to it).
  for (const tensor_access& a : accesses) {
    if (a.mode == access_mode::write || residency_->state(a.tensor) != residency::dropped) {
      continue;
    }
    release_handed();
    try {
      rebuild(a.tensor, s);
    } catch (const out_of_memory&) {
      if (host_exhausted_) throw;
      // What is resident splits the free memory (nothing of this step is held yet): it all
      // leaves, and the rebuild runs in the emptied arena.
      evict_all();
      rebuild(a.tensor, s);
    }
  }
  for (const bool keep : {true, false}) {
    // A schedule says what stays whole (scheduled_step::whole), the rest of the step around it;
    // an evaluation applies none (stage_step keeps from the budget then).
    if (keep && schedule_ && !evaluating_) continue;
    stage_step(s, accesses, keep, workspace_bytes);
    release_handed_whole();
    try {
      acquire(s, staging_->whole, locked, false);
      return take_micro_buffer(s, false, workspace_bytes);
    } catch (const out_of_memory&) {
      if (host_exhausted_) throw;  // host memory is not repacked
    }
    release_handed();  // their memory may be what the step lacks
    for (tensor_id t : locked) cache_->unlock(t);
    locked.clear();
  }
  repack(s, staging_->whole, locked);
  void* workspace = take_micro_buffer(s, false, workspace_bytes);
  acquire(s, staging_->whole, locked, true);
  return workspace;
}

// The micro-batch whose slices staged step `s` (its micro-tensors in staging_->tensors, what
// was handed to it marked held) leaves in its buffers when it ends, where the next step can
// start from them: staged too, in as many micro-batches, without channel groups on either
// side, and, where that micro-batch is the last, free to run its first pass last micro-batch
// first. -1 where not.
std::int64_t executor::micro_batch_left(std::size_t s) const {
  const std::size_t next = s + 1;
  if (next >= route_.step_count() || !staging_->step[next] || evaluating_) return -1;
  const int parts = batch_parts_of(options_, s);
  if (parts < 2 || batch_parts_of(options_, next) != parts) return -1;
  if (channel_groups_of(options_, net_, route_, s) > 1 ||
      channel_groups_of(options_, net_, route_, next) > 1) {
    return -1;
  }
  const auto splits = [](layer_type t) {
    return t != layer_type::data && t != layer_type::tiled && t != layer_type::softmax_loss;
  };
  const route_step here = route_.at(s), there = route_.at(next);
  const layer& l = net_[here.layer];
  if (!splits(l.type) || !splits(net_[there.layer].type)) return -1;
  const std::int64_t last = layers::final_micro_batch(l.type, here.direction == pass::forward,
                                                      first_input_has_grad(table_, l),
                                                      staging_->tensors, batch_of(net_), parts);
  // At the first micro-batch the next starts in order; at the last, last first.
  if (last > 0 &&
      !layers::any_order_first_pass(net_[there.layer].type, there.direction == pass::forward)) {
    return -1;
  }
  return last;
}

// The slices handed over and not taken go back (stream order: later kernels run after); one
// whose value is not in host memory (keeps_last) is written back there first.
void executor::release_handed() {
  staging& st = *staging_;
  for (const staging::slice_buffer& b : st.handed) {
    if (!b.unwritten) continue;
    const std::int64_t batch = batch_of(net_);
    const auto bounds = layers::micro_batch_bounds(batch, b.parts);
    const std::size_t image = table_[b.tensor].bytes / sizeof(float) /
                              static_cast<std::size_t>(batch);  // values per image
    const std::size_t from = static_cast<std::size_t>(bounds[b.micro_batch]) * image;
    const std::size_t count = static_cast<std::size_t>(bounds[b.micro_batch + 1]) * image - from;
    const std::uint64_t before = st.bytes_staged;
    copy_to_staging(b.tensor, b.ptr, from, count);
    st.bytes_handed -= st.bytes_staged - before;
  }
  drop_handed();
}

// A slice handed over for a tensor this step takes whole (the schedule keeps it so) goes
// back first, written back to host memory where it is not there (keeps_last): acquiring the
// tensor fetches it from there, and would otherwise miss that slice.
void executor::release_handed_whole() {
  staging& st = *staging_;
  const auto whole = [&](tensor_id t) {
    return std::any_of(st.whole.begin(), st.whole.end(),
                       [t](const tensor_access& a) { return a.tensor == t; });
  };
  const auto taken_whole =
      std::stable_partition(st.handed.begin(), st.handed.end(),
                            [&](const staging::slice_buffer& b) { return !whole(b.tensor); });
  if (taken_whole == st.handed.end()) return;
  std::vector<staging::slice_buffer> kept(st.handed.begin(), taken_whole);
  st.handed.erase(st.handed.begin(), taken_whole);
  release_handed();  // those of the tensors taken whole
  st.handed = std::move(kept);
}

void executor::staging::give_back(const slice_buffer& b, device_heap& heap,
                                  residency_table& residency) noexcept {
  (void)heap.deallocate(b.ptr);
  residency.workspace_returned(b.bytes);
}

void executor::drop_handed() noexcept {
  staging& st = *staging_;
  for (const staging::slice_buffer& b : st.handed) {
    staging::give_back(b, *heap_, *residency_);
  }
  st.handed.clear();
}

// With the step's whole tensors locked: device buffers for the largest micro-batch's slices
// (taken like a convolution workspace, evicting unlocked tensors when needed): the slices
// the step before handed over, one buffer each for what this step hands on (what the next
// step reads), and one for the rest, which ends with the step's convolution workspace of
// `workspace_bytes` (returned; nullptr where 0): one run of the heap, so that the two cannot
// split what is free between them (ResNet-50's conv1 under fixed:im2col_image failed for
// 147 KiB with 149 KiB free in two runs). A replay (`replay`) neither takes nor hands on.
void* executor::take_micro_buffer(std::size_t s, bool replay, std::size_t workspace_bytes) {
  staging& st = *staging_;
  for (const staging::slice_buffer& b : st.own) {  // none but after a step that failed
    staging::give_back(b, *heap_, *residency_);
  }
  st.own.clear();
  st.leaves = -1;
  if (net_[route_.at(s).layer].type == layer_type::data) {
    // DATA writes the batch straight into its staging memory: no slice is on the device.
    release_handed();
    st.tensors.clear();
    st.ids.clear();
    return nullptr;
  }
  const std::int64_t batch = batch_of(net_);
  const int parts = batch_parts_of(options_, s);
  const std::int64_t images = largest_micro_batch(batch, parts);
  const int groups = channel_groups_of(options_, net_, route_, s);
  const std::int64_t K = splittable_channels(net_[route_.at(s).layer]);
  std::vector<std::size_t> size;
  for (const layers::staged_tensor& m : st.tensors) {
    // The largest micro-batch's images (all of a tensor without images), and of a
    // channel-cut tensor the largest group's rows.
    std::int64_t floats = (m.n > 1 ? images : m.n) * m.per_image;
    if (m.channels > 0) floats = floats / K * ((K + groups - 1) / groups);
    size.push_back(heap_->round_up(static_cast<std::size_t>(floats) * sizeof(float)));
  }
  std::vector<std::size_t> own_of(st.tensors.size(), st.tensors.size());  // index into own
  // Gives every buffer of its own back, handed-in ones to `handed` (release_handed writes
  // back what is not in host memory), so that the step runs as if nothing were handed.
  const auto give_back_own = [&] {
    for (const staging::slice_buffer& b : st.own) {
      if (b.unwritten) {
        st.handed.push_back(b);
        continue;
      }
      staging::give_back(b, *heap_, *residency_);
    }
    st.own.clear();
    release_handed();
    std::fill(own_of.begin(), own_of.end(), st.tensors.size());
    for (layers::staged_tensor& m : st.tensors) m.held = -1, m.keeps_last = false;
    st.leaves = -1;
  };
  // What the step before handed over: its buffer becomes this step's for that tensor.
  if (!replay) {
    std::vector<staging::slice_buffer> untaken;
    for (const staging::slice_buffer& b : st.handed) {
      std::size_t i = 0;
      while (i < st.ids.size() && (st.ids[i] != b.tensor || st.tensors[i].channels != 0)) ++i;
      if (i == st.ids.size() || size[i] > b.bytes) {
        untaken.push_back(b);
        continue;
      }
      own_of[i] = st.own.size();
      st.own.push_back(b);
      st.own.back().hand_on = st.own.back().keeps_last = false;
      st.tensors[i].held = b.micro_batch;
    }
    st.handed = std::move(untaken);
    release_handed();
  }
  // What the next step reads of this one's micro-tensors gets a buffer of its own.
  const std::int64_t leaves = replay ? -1 : micro_batch_left(s);
  if (leaves >= 0) {
    for (const tensor_access& a : table_.accesses(s + 1)) {
      if (a.mode != access_mode::read) continue;
      const auto it = std::find(st.ids.begin(), st.ids.end(), a.tensor);
      if (it == st.ids.end()) continue;
      const auto i = static_cast<std::size_t>(it - st.ids.begin());
      if (own_of[i] == st.tensors.size()) {
        void* p = take_workspace(size[i], true);
        if (p == nullptr) continue;  // no room of its own: it goes the usual way
        residency_->workspace_taken(size[i]);
        own_of[i] = st.own.size();
        staging::slice_buffer b;
        b.tensor = a.tensor;
        b.ptr = p;
        b.bytes = size[i];
        b.parts = parts;
        st.own.push_back(b);
      }
      st.own[own_of[i]].hand_on = true;
      st.leaves = leaves;
      // Where the next step reads it last, in one pass (the slice is read once), and nothing
      // captures it after this step, the slice need not go out: it dies in that step.
      const route_step there = route_.at(s + 1);
      const layer& nl = net_[there.layer];
      const bool last_read = free_step_[a.tensor] == s + 1 && st.tensors[i].written &&
                             layers::split_passes(nl.type, there.direction == pass::forward,
                                                  first_input_has_grad(table_, nl)) == 1 &&
                             std::find(capture_after_[s].begin(), capture_after_[s].end(),
                                       a.tensor) == capture_after_[s].end();
      if (last_read) st.tensors[i].keeps_last = st.own[own_of[i]].keeps_last = true;
    }
  }
  // The rest in one buffer. Failing that, what has a buffer of its own gives it back and
  // everything goes in one, as if nothing were handed.
  std::size_t total = 0;
  std::vector<std::size_t> offset(st.tensors.size(), 0);
  std::size_t workspace_at = 0;
  const auto lay_out = [&] {
    total = 0;
    for (std::size_t i = 0; i < st.tensors.size(); ++i) {
      if (own_of[i] != st.tensors.size()) continue;
      offset[i] = total;
      total += size[i];
    }
    workspace_at = total;
    if (workspace_bytes != 0) total += heap_->round_up(workspace_bytes);
  };
  lay_out();
  void* micro = total == 0 ? nullptr : take_workspace(total, true);
  if (total != 0 && micro == nullptr && !st.own.empty()) {
    give_back_own();
    lay_out();
    micro = take_workspace(total, true);
  }
  if (total != 0 && micro == nullptr) {
    give_back_own();
    throw_out_of_budget(
        s,
        "the micro-batch buffers of " + std::to_string(st.tensors.size()) + " split tensors (" +
            std::to_string(images) + " of " + std::to_string(batch) + " images)" +
            (workspace_bytes != 0
                 ? " and the convolution workspace of " + format_bytes(workspace_bytes)
                 : std::string()),
        total);
  }
  // Recorded only once taken: end_staged_step gives back what these say.
  st.micro = micro;
  st.micro_bytes = total;
  residency_->workspace_taken(total);
  for (std::size_t i = 0; i < st.tensors.size(); ++i) {
    st.tensors[i].whole = staging_->buffer[st.ids[i]].get();
    void* base = own_of[i] != st.tensors.size() ? st.own[own_of[i]].ptr
                                                : static_cast<char*>(st.micro) + offset[i];
    st.tensors[i].micro = static_cast<float*>(base);
  }
  // What the micro-steps copy, as the null device charges it.
  const route_step rs = route_.at(s);
  const layer& l = net_[rs.layer];
  const bool input_grad = first_input_has_grad(table_, l);
  const bool forward = rs.direction == pass::forward;
  const std::size_t copied =
      layers::staged_copy_bytes(l.type, forward, st.tensors, parts, input_grad, evaluating_);
  staging_->bytes_staged += copied;
  std::vector<layers::staged_tensor> halves;  // each tensor's copies are its own: a sum
  std::copy_if(st.tensors.begin(), st.tensors.end(), std::back_inserter(halves),
               [](const layers::staged_tensor& m) { return m.fp16; });
  if (!halves.empty()) {
    staging_->bytes_fp16 +=
        layers::staged_copy_bytes(l.type, forward, halves, parts, input_grad, evaluating_);
  }
  if (!st.own.empty()) {
    std::vector<layers::staged_tensor> unheld(st.tensors.begin(), st.tensors.end());
    for (layers::staged_tensor& m : unheld) m.held = -1, m.keeps_last = false;
    staging_->bytes_handed +=
        layers::staged_copy_bytes(l.type, forward, unheld, parts, input_grad) - copied;
  }
  return workspace_bytes == 0 ? nullptr : static_cast<char*>(st.micro) + workspace_at;
}

// Re-runs the forward of the staged step at route position `position` (its output dropped
// when host memory ran out) as that step ran: micro-batch by micro-batch, what it reads
// and writes of batch shape in host staging memory, the rest whole on the device. Inside
// step `step`, before that step's own tensors are acquired (acquire_staged, or a whole
// step's ensure_resident), so the staging bookkeeping is free.
void executor::replay_staged(std::size_t position, std::size_t step) {
  release_handed();
  const layer& l = net_[route_.order()[position]];
  const auto accesses = table_.accesses(position);
  const std::size_t guarded = replaying_.size();
  // What it writes holds no value until its kernel is enqueued: should anything fail
  // before, those go back to what they were, so that nothing is taken for rebuilt that was
  // not.
  std::vector<std::pair<tensor_id, residency>> born;
  for (const tensor_access& a : accesses) replaying_.push_back(a.tensor);
  for (const tensor_access& a : accesses) {
    const tensor_id t = a.tensor;
    if (a.mode != access_mode::write || !in_cache(t) || table_[t].persistent) continue;
    const residency r = residency_->state(t);
    // One that holds its value elsewhere (a saved statistic in host memory) is fetched first:
    // the replay writes the same bits over it (on cuda, BN's statistics to the last bits of
    // their double sums: kernels/cuda/micro_batch.hpp), and a failure loses nothing.
    if (r == residency::on_host || r == residency::offloading || r == residency::prefetching) {
      ensure_resident(t, step);
    }
    born.emplace_back(t, residency_->state(t));
  }
  std::vector<tensor_id> locked;
  // A CONV replays the algorithm its step ran (another would round differently), with that
  // algorithm's workspace, in the micro buffer (end_staged_step gives it back).
  const conv_step conv = l.type == layer_type::conv ? forward_conv_.at(position) : conv_step{};
  struct restore {
    executor& ex;
    std::vector<tensor_id>& locked;
    std::size_t guarded;
    std::vector<std::pair<tensor_id, residency>>& born;
    bool launched = false;
    ~restore() {
      for (tensor_id t : locked) ex.cache_->unlock(t);
      ex.end_staged_step();
      ex.replaying_.resize(guarded);
      ex.replay_split_ = std::numeric_limits<std::size_t>::max();
      if (launched) return;
      for (const auto& [t, before] : born) {
        if (ex.residency_->state(t) == before) continue;
        ex.free_transient(t);
        if (before == residency::dropped) ex.residency_->host_value_dropped(t);
      }
    }
  } done{*this, locked, guarded, born};
  stage_step(position, accesses, false, conv.workspace_bytes);
  acquire(step, staging_->whole, locked, false);
  void* const workspace = take_micro_buffer(position, true, conv.workspace_bytes);
  for (const tensor_access& a : accesses) {
    if (a.mode != access_mode::read) last_write_[a.tensor] = step;
  }
  note_peak();
  replay_split_ = position;
  launch_layer(l, true, accesses, conv, workspace, nullptr, true);
  done.launched = true;
  // Intermediates whose life was over go again at the end of the step (run_step).
  for (const auto& [t, before] : born) rebuilt_.push_back(t);
  ++recomputations_;
  ++marks_.replays;
}

// The replays a rebuild of `t` would run now: its layer's, and those of what it reads that
// is dropped or dead (each once), counted up to 32.
std::size_t executor::chain_replays(tensor_id t, std::vector<tensor_id>& visited) const {
  if (std::find(visited.begin(), visited.end(), t) != visited.end()) return 0;
  // Counted up to a bound: past it, every chain is as long (and the count stays cheap).
  constexpr std::size_t k_longest = 32;
  if (visited.size() >= k_longest) return 0;
  visited.push_back(t);
  std::size_t n = 1;
  for (const auto& a : table_.accesses(route_.position(table_[t].owner))) {
    if (rebuilt_first(t, a)) n += chain_replays(a.tensor, visited);
  }
  return n;
}

// Host memory is full (staging, or a host copy): one tensor whose value is in host memory and
// that a replay of its layer rebuilds gives it back: the one whose rebuild would replay least
// now (what it reads still had), then the earliest layer's (read last in backward); never one
// the running step or a replay under way touches, nor in forward one still read later in
// forward. Decided from our own bookkeeping, so `plan` and `train` decide alike. False when
// none is left.
bool executor::drop_one_host_value() {
  if (!options_.policy.planned || host_droppable_.empty()) return false;
  const bool forward = current_step_ < route_.layer_count();
  tensor_id best = invalid_tensor;
  std::size_t best_position = 0, best_chain = 0;
  std::vector<tensor_id> visited;
  for (tensor_id t = 0; t < residency_->size(); ++t) {
    const residency r = residency_->state(t);
    if ((r != residency::staged && r != residency::on_host) || !host_droppable_[t]) continue;
    if (forward && last_forward_use_[t] >= current_step_) continue;
    if (read_by_running_step(t) ||
        std::find(replaying_.begin(), replaying_.end(), t) != replaying_.end()) {
      continue;
    }
    // The shortest rebuild first (what it reads still had), then the earliest layer.
    const std::size_t p = route_.position(table_[t].owner);
    visited.clear();
    const std::size_t chain = chain_replays(t, visited);
    if (best == invalid_tensor || chain < best_chain ||
        (chain == best_chain && p < best_position)) {
      best = t, best_position = p, best_chain = chain;
    }
  }
  if (best == invalid_tensor) return false;
  if (residency_->state(best) == residency::staged) {
    retire_staging(best);
  } else {
    transfers_->engine.wait_offloaded(best);
    forget_host(best);
  }
  residency_->host_value_dropped(best);
  host_dropped_[best] = true;
  ++host_drops_;
  return true;
}

// After the staged step's kernel is enqueued: its buffer goes back (stream order: later
// kernels run after this one).
void executor::end_staged_step() noexcept {
  staging& st = *staging_;
  if (st.micro != nullptr) (void)heap_->deallocate(st.micro);
  residency_->workspace_returned(st.micro_bytes);
  st.micro = nullptr;
  st.micro_bytes = 0;
  // The buffers the next step reads from stay; a replay's go. (Nothing handed is left here:
  // take_micro_buffer took or released it, and a replay released it first.)
  drop_handed();
  for (const staging::slice_buffer& b : st.own) {
    if (b.hand_on && st.leaves >= 0) {
      staging::slice_buffer h = b;
      h.unwritten = b.keeps_last;
      h.micro_batch = st.leaves;
      st.handed.push_back(h);
      continue;
    }
    staging::give_back(b, *heap_, *residency_);
  }
  st.own.clear();
  st.leaves = -1;
  st.tensors.clear();
  st.ids.clear();
  st.whole.clear();
}

}  // namespace memweave
