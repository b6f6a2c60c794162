// The executor's step loop. One thread drives it; kernels run on the device's compute
// stream (a worker thread on `host`), so the loop's own work (allocation, bookkeeping)
// overlaps the kernels, and the loop only waits at the end of an iteration, or when it
// must wait for a transfer.
//
// Memory: persistent tensors come straight from the heap, once. Every transient tensor's
// device memory is owned by the tensor cache (allocate/release), which under `utp`/`all`
// evicts unlocked tensors (to host memory, or dropped for a rebuild) when the heap cannot
// serve. A step locks every transient tensor it touches for its kernel, so nothing it uses
// moves. Transfers go through the transfer engine: offloads on the device-to-host stream
// after the event that ends the step which last wrote the tensor (so they read its final
// value, without waiting for later kernels), prefetches on the host-to-device stream after
// an event recorded on the compute stream (so they overwrite recycled memory only once
// earlier kernels are done with it), and the compute stream waits for a prefetch only right
// before the kernel that reads it. Recomputation re-runs cheap layers' forwards (replays)
// before the backward steps that need their dropped outputs. Under `all` with a budget that
// liveness exceeds, a memory schedule planned in the constructor (schedule_inputs.cpp, then
// memweave/schedule) says what leaves and comes back when: it is carried out before each
// step (releases) and after each kernel (drops, offloads, prefetches), and a dropped tensor
// is rebuilt by replaying its layer's forward; the cache's reactive eviction is then only
// the safety net.
//
// Determinism: every decision that changes the heap (allocations, frees, evictions,
// offload completions) is taken at a fixed point of the step loop, never when a background
// copy happens to finish, so the heap sees the same sequence on every run and on every
// device: `plan` (null) and `train` (host) agree step by step.
//
// Kernels: the loop decides what runs and where its memory is; a kernel_launcher (one per
// backend: host, null, cuda; engine/runtime/kernel_launcher.hpp) enqueues it and chooses
// among its backend's CONV algorithms. The loop and the memory logic are the same on every
// device.
//
// Invariants: residency_ says where each tensor the cache manages is, and counts what holds
// device memory (engine/runtime/residency_table.hpp); every move of a tensor is recorded
// there right after the executor makes it.
//
// Files: this one holds the step loop and the executor's wiring; executor_moves.cpp the moves
// of a tensor (fetch, evict, write back, offload, prefetch, drop, rebuild, repack);
// executor_schedule.cpp the memory schedule's planning, carrying out and re-planning.
#include "memweave/engine/executor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "engine/layers/layer_step.hpp"
#include "engine/random.hpp"
#include "engine/runtime/executor_checks.hpp"
#include "engine/runtime/executor_staging.hpp"
#include "engine/runtime/executor_transfers.hpp"
#include "engine/runtime/kernel_launcher.hpp"
#include "engine/runtime/recompute_inputs.hpp"
#include "engine/runtime/residency_table.hpp"
#include "engine/runtime/schedule_inputs.hpp"
#include "engine/solver/sgd.hpp"
#include "memweave/comm/communicator.hpp"
#include "memweave/core/config.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"
#include "memweave/device/stream_timeline.hpp"
#include "memweave/engine/split_plan.hpp"

namespace memweave {

namespace {

using clock_type = std::chrono::steady_clock;

using detail::mix64;

}  // namespace

executor_policy executor_policy::parse(const std::string& name) {
  executor_policy p;
  p.name = name;
  if (name == "baseline") {
    p.plan = memory_policy::baseline;
  } else if (name == "liveness") {
  } else if (name == "offload") {
    p.offload_checkpoints = true;
  } else if (name == "utp") {
    p.evict_to_host = true;
  } else if (name == "recompute") {
    p.recompute = p.drop_after_forward = true;
  } else if (name == "all") {
    p.evict_to_host = p.recompute = p.planned = true;
  } else {
    throw invalid_argument("unknown memory policy '" + name +
                           "': expected baseline, liveness, offload, utp, recompute or all");
  }
  return p;
}

namespace {

// Data parallelism defers the solver's updates to gradient buckets (tensor_table.hpp).
// The options as given, checked before anything runs with them (`all`'s weighing runs trials
// with them first: a NaN schedule headroom was taken there as "does not fit" and `all` ran
// as recompute without a word).
const executor_options& checked(const network& net, const executor_options& o) {
  check_executor_options(o);
  if (o.policy.planned) o.schedule.validate();
  check_split_options(net, route(net), o);
  return o;
}

std::vector<gradient_bucket> buckets_for(const network& net, const route& r,
                                         const executor_options& o) {
  const int ranks = o.comm != nullptr ? o.comm->size() : o.ranks;
  if (ranks <= 1) return {};
  return make_gradient_buckets(net, r, o.bucket_bytes);
}

}  // namespace

executor::executor(const network& net, device& dev, const executor_options& requested)
    : net_(net),
      dev_(dev),
      options_(weigh_policy(net, checked(net, requested), choice_)),
      route_(net),
      table_(net, route_, buckets_for(net, route_, requested)) {
  const executor_options& options = options_;  // as weighed: `all` may run as recompute
  check_executor_options(options);
  if (options.policy.planned) options.schedule.validate();
  liveness_ = std::make_unique<liveness>(table_);
  layer_memory_ = std::make_unique<layer_memory>(table_);
  plan_ = liveness_->plan(options.policy.plan);
  if (options.evaluation_only) {
    // An executor that only evaluates keeps no solver state: the momenta are neither
    // allocated nor listed (writing one, as loading a checkpoint does, is discarded).
    discarded_.assign(table_.size(), false);
    for (const layer& l : net.layers()) {
      for (tensor_id m : table_.of(l.id).momenta) discarded_[m] = true;
    }
    std::erase_if(plan_.persistent, [this](tensor_id t) { return discarded_[t]; });
    plan_.persistent_bytes = 0;
    for (tensor_id t : plan_.persistent) plan_.persistent_bytes += table_[t].bytes;
  }

  check_budget(net, route_, table_, plan_, dev, options);

  heap_options h = options.heap;
  if (options.budget_bytes != 0) {
    h.pool_bytes = options.budget_bytes;
    h.pool_knob = "the budget, --budget";
  }
  try {
    heap_ = std::make_unique<device_heap>(dev, h);
  } catch (const out_of_memory& e) {
    // Not "does not fit": no arena that size can be had at all (on null, a budget or
    // MEMWEAVE_POOL_BYTES beyond the address space this process can reserve, 100 TiB say).
    // The message names what sized it (heap_options::pool_knob).
    throw invalid_argument(e.what());
  }
  launcher_context lc;
  lc.net = &net;
  lc.table = &table_;
  lc.memory = layer_memory_.get();
  lc.dev = &dev;
  lc.heap = heap_.get();
  lc.model = options.model;
  lc.threads = options.threads;
  solver_ = {options.learning_rate, options.momentum, options.weight_decay};
  seed_ = options.seed;
  lc.sgd = sgd_options{options.learning_rate, options.momentum, options.weight_decay};
  lc.seed = options.seed;
  lc.first_sample = options.first_sample;
  lc.device_ptr = [this](tensor_id t) { return device_ptr(t); };
  lc.loss = &loss_;
  launcher_ = make_kernel_launcher(lc);
  // Timings are valid for one backend and device or thread count; the null device uses its
  // model, and neither reads nor writes the cache file (`plan` replaced a host's timings with
  // computed ones).
  conv_ws_options conv_ws = options.conv_ws;
  if (!launcher_->measures_convolutions()) conv_ws.cache_path.clear();
  selector_ = std::make_unique<conv_workspace_selector>(conv_ws, launcher_->fingerprint());
  // Before anything is placed: measured in a step, the measurement's heap scratch would
  // change where later tensors go (kernel_launcher::measure_conv_candidates).
  launcher_->measure_conv_candidates(*selector_, options.evaluation_only);
  auto name_of = [this](tensor_key t) { return table_[t].name; };
  tensor_cache::eviction_callback evict_fn;
  if (options.policy.evict_to_host) {
    evict_fn = [this](tensor_key t, void* p, std::size_t b) { return evict(t, p, b); };
  }
  cache_ = std::make_unique<tensor_cache>(*heap_, evict_fn, name_of);
  if (options.policy.moves_tensors()) {
    transfer_options to;
    to.verify = options.verify_transfers || option_bool("MEMWEAVE_VERIFY_TRANSFERS");
    to.name_fn = [this](std::uint32_t t) { return table_[t].name; };
    to.fp16_codec_factory = launcher_->fp16_codec_factory();  // cuda's; empty: swap/'s
    to.pool_knob = options.host_pool_knob;
    try {
      transfers_ = std::make_unique<transfers>(dev, options.host_pool_bytes, std::move(to));
    } catch (const out_of_memory& e) {
      // Not "does not fit", as the heap's arena above: a pool that size cannot be had at all
      // (beyond the address space or memory this process may map). Named by its knob: the
      // device's message knows only the mapping that failed.
      throw invalid_argument("the pinned host pool (" + options.host_pool_knob +
                             ") cannot be had: " + e.what() + "; lower it");
    }
  }

  const std::size_t n = table_.size();
  persistent_ptr_.assign(n, nullptr);
  parked_.assign(n, false);
  host_resident_.resize(n);
  for (tensor_id t = 0; t < n; ++t) {
    if (table_[t].host_resident && dev.touches_memory()) {
      host_resident_[t] = std::make_unique_for_overwrite<float[]>(table_[t].bytes / sizeof(float));
    }
  }
  residency_ = std::make_unique<residency_table>(table_);
  // The last forward step touching each tensor: after it, a tensor needed again only in
  // backward can leave the device.
  last_forward_use_.assign(n, 0);
  const std::size_t layers = route_.layer_count();
  for (std::size_t s = 0; s < layers; ++s) {
    for (const auto& a : table_.accesses(s)) last_forward_use_[a.tensor] = s;
  }
  offload_candidate_.assign(n, false);
  offloads_due_.assign(route_.step_count() + 1, {});
  if (options.policy.offload_checkpoints) {
    // What a checkpoint's backward reads of the forward pass: the input of each CONV (as
    // vDNN offloads; in frameworks with in-place ReLU it is the previous CONV's output,
    // the paper's "checkpoint output").
    for (const layer& l : net.layers()) {
      if (l.type != layer_type::conv) continue;
      const tensor_id x = table_.of(l.inputs[0]).output;
      if (liveness_->last_use(x) >= layers) offload_candidate_[x] = true;
    }
  }
  // When each transient tensor's device memory is given back: after its last use (the
  // plan), or later when a rebuild reads it (recompute, all).
  free_step_.assign(n, route_.step_count());
  hold_until_.assign(n, 0);
  for (std::size_t st = 0; st < route_.step_count(); ++st) {
    for (tensor_id t : plan_.steps[st].free) free_step_[t] = st;
  }
  droppable_.assign(n, false);
  if (options.policy.recompute) {
    recompute_options ro;
    ro.strategy = parse_recompute_strategy(options.recompute_strategy);
    recompute_ = std::make_unique<recompute_plan>(
        make_recompute_graph(net, route_, table_, *layer_memory_), ro);
    auto extend = [&](tensor_id t, std::size_t until) {
      free_step_[t] = std::max(free_step_[t], until);
    };
    std::vector<bool> kept(n, false);
    for (const recompute_tensor_info& info : recompute_->tensors()) {
      const tensor_id t = static_cast<tensor_id>(info.key);
      droppable_[t] = info.fate == tensor_fate::dropped;
      kept[t] = info.fate == tensor_fate::kept;
      // recompute: a kept tensor that a planned replay before backward step `last_use`
      // reads must outlive that step, even if the plain plan frees it sooner.
      if (options.policy.drop_after_forward && kept[t] && info.last_use != no_position) {
        extend(t, route_.step_count() - 1 - info.last_use);
      }
    }
    if (!options.policy.drop_after_forward) {
      // all: lives are never extended (so nothing is held that utp would not hold). A tensor
      // may be dropped on eviction only when what its rebuild reads is alive anyway until the
      // tensor's last use: `avail` is the last step up to which a tensor can be had, its
      // own last use for a kept one, the least over its producer's reads for the others.
      std::vector<std::size_t> avail(n, route_.step_count());
      for (std::size_t p = 0; p < layers; ++p) {
        std::size_t from_reads = route_.step_count();
        for (const auto& a : table_.accesses(p)) {
          if (a.mode == access_mode::read && recompute_->find(a.tensor) != nullptr) {
            from_reads = std::min(from_reads, avail[a.tensor]);
          }
        }
        for (const auto& a : table_.accesses(p)) {
          if (a.mode == access_mode::read || recompute_->find(a.tensor) == nullptr) continue;
          avail[a.tensor] = kept[a.tensor] ? liveness_->last_use(a.tensor) : from_reads;
        }
      }
      for (tensor_id t = 0; t < n; ++t) {
        droppable_[t] = droppable_[t] && avail[t] >= liveness_->last_use(t);
      }
    }
  }
  if (options.policy.planned) {
    // The schedule may drop any rebuildable tensor, whatever the recompute plan's fates: what
    // a replay reads can be had up to its own last use where no replay makes it (the batch),
    // else as long as it can be rebuilt in turn.
    rebuildable_until_.assign(n, route_.step_count());
    for (std::size_t p = 0; p < layers; ++p) {
      std::size_t from_reads = route_.step_count();
      for (const auto& a : table_.accesses(p)) {
        const tensor_id r = a.tensor;
        if (a.mode != access_mode::read || !in_cache(r) || table_[r].persistent) continue;
        from_reads = std::min(from_reads, rebuildable(net, table_, r) ? rebuildable_until_[r]
                                                                      : liveness_->last_use(r));
      }
      for (const auto& a : table_.accesses(p)) {
        if (a.mode != access_mode::read && !table_[a.tensor].persistent) {
          rebuildable_until_[a.tensor] = from_reads;
        }
      }
    }
  }
  // TSPLIT: the split steps whose micro-tensors stay in host memory.
  staging_ = std::make_unique<staging>();
  channel_cut_.assign(n, false);
  staging_->buffer.resize(n);
  staging_->holds.assign(n, false);
  staging_->step.assign(route_.step_count(), false);
  bool any_staged = false;
  for (std::size_t st = 0; st < route_.step_count(); ++st) {
    staging_->step[st] = staged_split_step(options, net, route_, st);
    if (!staging_->step[st]) continue;
    any_staged = true;
    // What a staged step reads is never dropped: rebuilding it would replay its producer
    // whole, which is what the split avoids. Nor is what a step in channel groups cuts (its
    // replay would need its weights whole); a persistent one lives in host memory.
    const layer& sl = net[route_.at(st).layer];
    const bool groups = channel_groups_of(options, net, route_, st) > 1;
    for (const auto& a : table_.accesses(st)) {
      const tensor_info& info = table_[a.tensor];
      const bool cut = groups && channel_cut(info, sl) && !info.host_resident;
      if (staged_slice(info, net[net.data_layer()].output_shape.n) || cut) {
        droppable_[a.tensor] = false;
      }
      if (cut) channel_cut_[a.tensor] = true;
    }
  }
  any_staged_ = any_staged;
  staging_->fp16.assign(n, false);
  if (options.split_compress && any_staged) {
    mark_fp16_staging();
    launcher_->prepare_fp16_staging();
    // The whole-tensor copies' codec too (cuda's takes 4 MiB of device memory): taken in the
    // first staged step, a full device failed that step half through.
    staging_codec().reserve();
  }
  MEMWEAVE_EXPECTS(
      table_.buckets().empty() ||
          std::find(channel_cut_.begin(), channel_cut_.end(), true) == channel_cut_.end(),
      "output-channel groups with their tensors in host memory (channel_parts under " +
          options.policy.name +
          ") are not run with data parallelism: its gradient buckets reduce whole gradients; "
          "split along the batch only, or run on one rank");
  if (options.policy.planned && options.policy.evict_to_host) {
    // all: when host memory runs out, any tensor a replay of its layer rebuilds may give its
    // host memory back (drop_one_host_value), a CONV's output too: its replay runs the
    // algorithm its step ran (forward_conv_).
    host_droppable_.assign(n, false);
    host_dropped_.assign(n, false);
    for (tensor_id t = 0; t < n; ++t) {
      host_droppable_[t] = in_cache(t) && rebuildable(net, table_, t) && !channel_cut_[t];
    }
    forward_conv_.assign(route_.layer_count(), conv_step{});
  }
  last_write_.assign(n, 0);
  // Write-back starts below twice the most any step allocates anew.
  for (std::size_t st = 0; st < route_.step_count(); ++st) {
    std::size_t fresh = 0;
    for (const auto& a : table_.accesses(st)) {
      if (a.mode == access_mode::write && !table_[a.tensor].persistent) {
        fresh += heap_->round_up(table_[a.tensor].bytes);
      }
    }
    watermark_ = std::max(watermark_, 2 * fresh);
  }
  step_done_.resize(route_.step_count());
  step_done_iteration_.assign(route_.step_count(), 0);
  free_after_.assign(route_.step_count(), {});
  for (tensor_id t = 0; t < n; ++t) {
    if (free_step_[t] < route_.step_count()) free_after_[free_step_[t]].push_back(t);
  }
  watched_.assign(n, {});
  capture_after_.assign(route_.step_count(), {});
  captured_in_.assign(n, 0);
  initialize_persistent();
  broadcast_parameters();
  if (options.exact) {
    require_exact(options_.schedule, "executor_options::exact (bit-identical results)");
    MEMWEAVE_EXPECTS(!options.split_compress,
                     "executor_options::exact (bit-identical results): the split steps' "
                     "micro-tensors held as fp16 (MEMWEAVE_SPLIT_COMPRESS=fp16) are rounded on "
                     "their way out, so results are not bit-identical to baseline; unset "
                     "MEMWEAVE_SPLIT_COMPRESS (or set it to none, "
                     "executor_options::split_compress = false) for an exact run");
  }
  // all: where the backend fuses, an ACT output after a BN is rebuilt in one pass from BN's
  // input (the BN output in between is dead by then); the plan prices and counts that.
  if (options.policy.planned && launcher_->fuses_bn_act()) {
    fused_source_ = fused_bn_act_sources(net, table_, route_, true);
  }
  // Staged split steps are planned with their micro-tensors in host memory
  // (describe_staging); steps in channel groups are not in the schedule's model (their
  // persistent tensors live in host memory): `all` then evicts reactively, as utp does.
  const bool any_groups =
      std::find(channel_cut_.begin(), channel_cut_.end(), true) != channel_cut_.end();
  // With neither swaps nor drops allowed (the weighing's run on the cache alone) there is
  // nothing to plan: the cache alone it is.
  const bool actions = options.schedule.allow_swap || options.schedule.allow_drop;
  if (options.policy.planned && options.budget_bytes != 0 && !options.evaluation_only &&
      !any_groups && actions) {
    // The weighing run planned the same schedule (same network, budget and model), on the
    // null device, which fuses replays: a backend that does not plans again.
    std::optional<memory_schedule> planned = choice_.weighed && launcher_->fuses_bn_act()
                                                 ? std::move(choice_.schedule)
                                                 : plan_schedule();
    // The weighing's runs leave the bound to the plan kept (null_run_options).
    if (planned && options.schedule.bound && planned->bound_seconds == 0) {
      planned->bound_seconds = bound_executor_schedule(schedule_inputs_of({}, 0, 0));
    }
    if (planned) use_schedule(std::move(*planned));
  }
  launcher_->check_ready();
}

executor::~executor() {
  try {
    dev_.get_stream(stream_role::compute).synchronize();
  } catch (...) {
    // A failed kernel was already reported by run_iteration; memory goes back regardless.
  }
  // A reduction still writing into the gradients ends before their memory goes.
  reductions_.clear();
  if (transfers_) {
    try {
      transfers_->engine.wait_all_offloads();
    } catch (...) {
      // Reported by the call that saw it; the device copies are still ours to free.
    }
  }
  for (tensor_id t = 0; t < residency_->size(); ++t) {
    if (residency_->aside(t) != nullptr) (void)heap_->deallocate(residency_->aside(t));
    if (persistent_ptr_[t] != nullptr) (void)heap_->deallocate(persistent_ptr_[t]);
  }
  // Staging buffers from the pinned pool (cuda) go back to it before it goes: a failed
  // iteration leaves them held (and retired ones unreleased).
  staging_.reset();
  transfers_.reset();
  cache_.reset();  // frees every resident tensor
}

void executor::throw_out_of_budget(std::size_t step, const std::string& what,
                                   std::size_t bytes) const {
  const heap_stats st = heap_->stats();
  std::string where = "before the first iteration";
  if (step < route_.step_count()) {
    const route_step rs = route_.at(step);
    where = "at step " + std::to_string(step + 1) + " (" + net_[rs.layer].name + " " +
            to_string(rs.direction) + ")";
  }
  throw out_of_memory("out of budget " + where + ": " + what + " needs " + format_bytes(bytes) +
                          "; " + heap_->describe_failure(bytes),
                      bytes, st.free_bytes, st.largest_free_run);
}

void executor::allocate_persistent(tensor_id t) {
  const tensor_info& info = table_[t];
  if (cache_persistent()) {
    // Taken through the cache, which evicts the earlier ones to host memory when the
    // budget cannot hold them all (their initial values are copied in first: an offload
    // waits for the compute stream).
    try {
      (void)cache_->allocate(t, info.bytes);
    } catch (const out_of_memory& e) {
      // As allocate_transient: the cache's message already describes the heap, or the host
      // memory an eviction found full, which the budget does not help (it read "out of budget"
      // with a second heap description spliced into the first; session 47's hostile run).
      throw out_of_memory(std::string(host_exhausted_ ? "host memory ran out " : "out of budget ") +
                              (iterations_run_ == 0 ? "before the first iteration"
                                                    : "placing the persistent tensors back") +
                              ": tensor " + info.name + " (" + to_string(info.role) +
                              "): " + e.what(),
                          e.requested(), e.free_bytes(), e.largest_free_run());
    }
    residency_->allocated(t);
  } else {
    void* p = heap_->try_allocate(info.bytes);
    if (p == nullptr) {
      throw_out_of_budget(route_.step_count(),
                          "tensor " + info.name + " (" + to_string(info.role) + ")", info.bytes);
    }
    persistent_ptr_[t] = p;
    residency_->persistent_allocated(t);
  }
}

void executor::initialize_persistent() {
  // Values are a pure function of (seed, tensor name, element), so every policy starts
  // equal, and so does the same network with its layers fused into tiled segments (whose
  // tensors keep their names but not their ids).
  // Each tensor gets its values before the next is allocated: under utp/all that allocation
  // may evict it to host memory (the copy out waits for the copy in, on the compute stream).
  // Last layer first, so that when the budget cannot hold them all, the first layers' stay.
  stream& compute = dev_.get_stream(stream_role::compute);
  std::vector<std::vector<float>> host(plan_.persistent.size());  // alive until synchronize
  // The copies queued read `host` and write the heap's arena: when an allocation fails
  // midway, they must land before either is given back (the constructor's unwinding frees
  // both).
  struct drain_on_failure {
    stream& s;
    int uncaught = std::uncaught_exceptions();
    ~drain_on_failure() {
      if (std::uncaught_exceptions() == uncaught) return;
      try {
        s.synchronize();
      } catch (...) {
        // The allocation failure is the error to report; the copies have stopped either way.
      }
    }
  } drain{compute};
  for (std::size_t i = plan_.persistent.size(); i-- > 0;) {
    // Cut by a step's channel groups (TSPLIT): it lives in host staging memory, and only a
    // group's rows come to the device, so it may be larger than the budget.
    const bool staged = channel_cut_[plan_.persistent[i]];
    if (staged) {
      (void)new_staging(plan_.persistent[i]);
      residency_->staged(plan_.persistent[i]);
    } else {
      allocate_persistent(plan_.persistent[i]);
    }
    if (!dev_.touches_memory()) continue;
    const tensor_info& info = table_[plan_.persistent[i]];
    std::vector<float>& v = host[i];
    v.assign(info.bytes / sizeof(float), 0.0f);
    const std::string suffix = info.name.substr(info.name.rfind('.') + 1);
    if (suffix == "weight") {
      // He-uniform: bound sqrt(6 / fan_in), fan_in = inputs per output element.
      const std::uint64_t name_key = detail::name_key(info.name);
      const double fan_in = static_cast<double>(info.shape.per_image());
      const double bound = std::sqrt(6.0 / std::max(1.0, fan_in));
      for (std::size_t j = 0; j < v.size(); ++j) {
        const std::uint64_t key = mix64(options_.seed * 1000003u + name_key) + j;
        v[j] = static_cast<float>(detail::symmetric_unit(key) * bound);
      }
    } else if (suffix == "gamma" || suffix == "running_var") {
      std::fill(v.begin(), v.end(), 1.0f);
    }
    if (staged) {
      std::memcpy(staging_->buffer[info.id].get(), v.data(), info.bytes);
      continue;
    }
    compute.copy_async(device_ptr(info.id), v.data(), info.bytes, copy_kind::host_to_device);
  }
  compute.synchronize();
  persistent_moved_ = false;
}

// utp/all, after an iteration that moved persistent tensors: put them back where the
// constructor left them (all to host memory, then allocated again in the same order into
// the then empty arena, evicting as it did, and filled from their host copies; the host
// copies of the resident ones are dropped, as after the constructor). Every iteration then
// starts from the same heap and cache, so each runs as the first did: the one iteration
// that `plan` runs stands for them all. Costs a round trip of the parameters, only when the
// budget was short of them anyway. The tensors the schedule parks across the iteration's end
// stay on the host, holding no place in the arena (placed there, then parked, they would
// leave holes between the others that only small tensors fit), and the compute stream waits
// for their copies out: the iteration that follows finds the link as the previous one left it.
void executor::restore_persistent_placement() {
  bool placed = !persistent_moved_;
  for (tensor_id t : plan_.persistent) {
    if (parked_[t] && residency_->state(t) != residency::on_host) placed = false;
    if (channel_cut_[t] && residency_->state(t) != residency::staged) placed = false;
  }
  if (placed) return;
  for (tensor_id t : plan_.persistent) {
    if (residency_->state(t) == residency::resident) (void)cache_->evict(t);
  }
  stream& compute = dev_.get_stream(stream_role::compute);
  compute.record(*transfers_->ready);
  for (std::size_t i = plan_.persistent.size(); i-- > 0;) {
    const tensor_id t = plan_.persistent[i];
    if (parked_[t]) continue;
    // Cut by channel groups: back in host staging memory, where the constructor put it.
    // Fetched by a step that ran whole and evicted above, it was left as a host copy, and the
    // next iteration found it there instead (a prefetch where the first iteration, and
    // `plan`, had a staging copy: session 43's hostile run, bytes moved differing from the
    // second iteration on).
    if (channel_cut_[t]) {
      if (residency_->state(t) != residency::staged)
        stage(t, access_mode::read, route_.step_count());
      continue;
    }
    allocate_persistent(t);
    transfers_->engine.prefetch(t, cache_->ptr(t), transfers_->ready.get());
    transfers_->engine.make_ready(t, compute);
  }
  for (tensor_id t : plan_.persistent) {
    if (residency_->state(t) == residency::resident) forget_host(t);
  }
  dev_.get_stream(stream_role::device_to_host).record(*transfers_->ready);
  compute.wait(*transfers_->ready);
  persistent_moved_ = false;
}

// Resets what an iteration (or an evaluation batch) counts and records.
void executor::begin_iteration() {
  steps_.clear();
  steps_.reserve(route_.step_count());
  step_open_ = false;
  tensors_allocated_ = 0;
  recomputations_ = 0;
  schedule_misses_ = 0;
  bookkeeping_s_ = 0;
  loss_ = 0;
  cache_->reset_stats();
  if (transfers_) transfers_->engine.reset_stats();
  release_held(route_.step_count(), true);  // none but after a failed iteration
  std::fill(hold_until_.begin(), hold_until_.end(), 0);
  // A tensor a replay rebuilt and dropped again after its last use holds nothing.
  residency_->forget_dropped();
  std::fill(host_dropped_.begin(), host_dropped_.end(), false);
  host_drops_ = 0;
  // Host memory found full fails the iteration that found it; the next one (a retry) starts
  // with what is held then, so it may repack again and names what runs out anew.
  host_exhausted_ = false;
  ++iterations_run_;
  deferred_prefetches_.clear();
  drop_handed();  // none but after a failed iteration (whose values are not kept)
  staging_->bytes_staged = 0;
  staging_->bytes_handed = 0;
  staging_->bytes_fp16 = 0;
  staging_->stream_error = staging_->host_error = 0;  // the stream's work is done by now
}

// After the last step: copies landed, persistent tensors back in place, the streams
// drained, and the checks that every transient tensor's life ended within the iteration.
void executor::finish_iteration() {
  stream& compute = dev_.get_stream(stream_role::compute);
  current_step_ = route_.step_count();
  reap_offloads(0, true);
  restore_persistent_placement();
  // What the iteration's end brought back to the device counts in the last step's peak (the
  // heap's peak was last reset when that step began).
  if (!steps_.empty()) steps_.back().heap_bytes = step_heap_peak();
  compute.synchronize();
  (void)release_retired_staging();  // the stream no longer reads them
  loss_ = finish_reductions(loss_);
  if (transfers_) {
    // Write-backs of tensors that died meanwhile land (and are discarded) before the check.
    transfers_->engine.wait_all_offloads();
    transfers_->engine.check();
  }
  // Every transient tensor's life ended within the iteration: anything still holding device
  // or host memory now is a leak of the step loop.
  std::size_t persistent_resident = 0, persistent_bytes = 0, persistent_copies = 0;
  for (tensor_id t : plan_.persistent) {
    if (residency_->state(t) == residency::resident) ++persistent_resident;
    // A staged one (cut by channel groups) is in host memory: device_ptr names its buffer.
    if (residency_->state(t) != residency::staged && device_ptr(t) != nullptr) {
      persistent_bytes += table_[t].bytes;
    }
    if (residency_->copied(t)) ++persistent_copies;
  }
  for (tensor_id t = 0; t < residency_->size(); ++t) {
    const residency st = residency_->state(t);
    if (table_[t].persistent) continue;
    if (st != residency::absent && st != residency::dropped) {
      throw std::logic_error("executor: " + table_[t].name + " outlived the iteration (state " +
                             std::to_string(static_cast<int>(st)) + ", freed after step " +
                             std::to_string(free_step_[t] + 1) + ")");
    }
  }
  for (tensor_id t = 0; t < residency_->size(); ++t) {
    if (residency_->aside(t) != nullptr) {
      throw std::logic_error("executor: " + table_[t].name + " holds device memory aside (state " +
                             std::to_string(static_cast<int>(residency_->state(t))) +
                             ") after the iteration");
    }
  }
  const std::size_t bytes_live = residency_->bytes_live();
  if (cache_->resident_count() != persistent_resident || bytes_live != persistent_bytes) {
    throw std::logic_error(
        "executor: " + std::to_string(cache_->resident_count() - persistent_resident) +
        " transient tensors (" + format_bytes(bytes_live - persistent_bytes) +
        ") still hold device memory after the iteration");
  }
  // Host copies that may stay: those of persistent tensors (utp/all).
  if (transfers_ && transfers_->engine.stats().host_copies != persistent_copies) {
    throw std::logic_error(
        "executor: " + std::to_string(transfers_->engine.stats().host_copies - persistent_copies) +
        " host copies of transient tensors outlived the iteration");
  }
}

bool executor::replans_this_iteration() const noexcept {
  // trained_iterations_ counts the one begun.
  return replan_pending() &&
         trained_iterations_ > static_cast<std::uint64_t>(launcher_->cold_iterations());
}

double executor::run_iteration(data_source* data, std::int64_t iteration) {
  const bool touches = dev_.touches_memory();
  MEMWEAVE_EXPECTS(!touches || data != nullptr,
                   "run_iteration needs a data source on a device that computes");
  MEMWEAVE_EXPECTS(!options_.evaluation_only,
                   "run_iteration: this executor was made with evaluation_only (evaluate only)");
  MEMWEAVE_EXPECTS(iteration >= 0, "run_iteration: iteration = " + std::to_string(iteration) +
                                       ": expected at least 0 (it numbers the batch)");
  if (data != nullptr) check_data_source(*data, net_, "run_iteration");
  const settled_batches settled(*launcher_);
  const std::unique_ptr<launch_scope> scope = launcher_->enter_iteration();
  stream& compute = dev_.get_stream(stream_role::compute);
  const double sim_start = compute.simulated_time_s();
  const auto wall_start = std::chrono::steady_clock::now();
  begin_iteration();
  ++trained_iterations_;
  // What this iteration records: the caller's timeline, or, for the iteration a schedule is
  // re-planned from (the first warm one), the executor's own.
  const bool measure = replans_this_iteration();
  if (measure && options_.timeline == nullptr) measuring_ = std::make_unique<stream_timeline>(dev_);
  if (recording() != nullptr) recording()->clear();
  if (transfers_) transfers_->engine.set_timeline(recording());
  reductions_.clear();
  reductions_.resize(table_.buckets().size());
  bucket_released_.assign(table_.buckets().size(), false);
  run_steps(route_.step_count(), data, iteration);
  finish_iteration();
  simulated_s_ = compute.simulated_time_s() - sim_start;
  // Kept where the end of this iteration puts another schedule in place (a helper's run
  // found the report describing the next iteration's: 5 swaps and 6 drops "in the measured
  // times" beside a row of the re-planned schedule's, which drops none).
  ran_schedule_.reset();
  if (schedule_ && (measure || trial_iterations_ >= 0)) {
    ran_schedule_ = std::make_unique<memory_schedule>(*schedule_);
    // The trial's even turns run the re-planned schedule; outside it, schedule_ is the
    // re-planned one once kept.
    ran_measured_ = trial_iterations_ >= 0 ? trial_iterations_ % 2 == 0 : replan_.replanned;
  }
  if (measure) {
    replan_from(measuring_ ? measuring_->spans() : options_.timeline->spans());
    // The new schedule's placement of the persistent tensors may have enqueued copies that
    // record into the timeline: they land before it goes.
    compute.synchronize();
    measuring_.reset();
    if (transfers_) transfers_->engine.set_timeline(recording());
  } else if (trial_iterations_ >= 0) {
    compute.synchronize();  // the iteration's work is done when it is timed
    continue_replan_trial(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count());
    compute.synchronize();  // the next schedule's placement of persistent tensors lands first
  }
  return loss_;
}

void executor::run_steps(std::size_t count, data_source* data, std::int64_t iteration) {
  try {
    for (std::size_t s = 0; s < count; ++s) run_step(s, data, iteration);
  } catch (...) {
    // The steps before the failure enqueued work that still runs on the compute stream and
    // writes what report() reads (a staged step's fp16 error): on the host backend another
    // thread, which ThreadSanitizer saw race a report of a run out of memory. It lands before
    // the caller hears of the failure; the step's error is the one to tell, not the stream's.
    try {
      dev_.get_stream(stream_role::compute).synchronize();
    } catch (...) {
    }
    try {
      throw;
    } catch (const out_of_memory& e) {
      // Said as the step's own checks say it, where a path under the step did not (a
      // workspace's eviction that found host memory full read "transfer_engine: cannot
      // offload ..." alone, naming no step; session 47's hostile run).
      const std::string m = e.what();
      if (m.starts_with("out of budget") || m.starts_with("host memory ran out") ||
          current_step_ >= route_.step_count()) {
        throw;
      }
      const route_step rs = route_.at(current_step_);
      const bool host = host_exhausted_ || dynamic_cast<const host_out_of_memory*>(&e) != nullptr;
      throw out_of_memory(std::string(host ? "host memory ran out" : "out of budget") +
                              " at step " + std::to_string(current_step_ + 1) + " (" +
                              net_[rs.layer].name + " " + to_string(rs.direction) + "): " + m,
                          e.requested(), e.free_bytes(), e.largest_free_run());
    }
  }
}

// The re-planned schedule ran this iteration, or the model's did, timed: run the other next,
// or, the trial over, keep the faster in total for good.
void executor::continue_replan_trial(double iteration_seconds) {
  trial_seconds_[trial_iterations_ % 2] += iteration_seconds;
  if (++trial_iterations_ < k_trial_iterations) {
    std::unique_ptr<memory_schedule> ran = std::move(schedule_);
    use_schedule(std::move(*other_schedule_));
    other_schedule_ = std::move(ran);
    return;
  }
  // The model's ran last (an even number of turns, the re-planned one's first).
  trial_iterations_ = -1;
  replan_.replanned_iteration_seconds = trial_seconds_[0] / (k_trial_iterations / 2);
  replan_.model_iteration_seconds = trial_seconds_[1] / (k_trial_iterations / 2);
  if (trial_seconds_[0] < trial_seconds_[1]) {
    use_schedule(std::move(*other_schedule_));
  } else {
    replan_.replanned = false;
    replan_.note =
        "the re-planned schedule ran slower than the model's, the two run in turn: "
        "the model's is kept";
  }
  other_schedule_.reset();
}

void executor::note_peak() noexcept {
  residency_->note_peak(heap_->stats().bytes_in_use);
}

std::size_t executor::step_heap_peak() const noexcept {
  return std::max(residency_->step_peak_heap(), heap_->stats().peak_bytes_in_use);
}

void executor::run_step(std::size_t s, data_source* data, std::int64_t iteration) {
  const auto t0 = clock_type::now();
  const route_step rs = route_.at(s);
  const layer& l = net_[rs.layer];
  const step_plan& sp = plan_.steps[s];
  const bool forward = rs.direction == pass::forward;
  iteration_ = iteration;
  current_step_ = s;
  marks_ = {};
  residency_->begin_step();
  // The heap's own peak from here to the step's end is the step's (step_heap_peak): what
  // the step allocates after its record (a split step's slices, prefetches for later steps)
  // counts too; sampled points alone left the peak under the heap's (session 47's hostile
  // run: 31.71 MiB reported where the heap reached 31.76).
  heap_->reset_peak();
  step_open_ = true;
  reap_offloads(s, false);
  if (schedule_ && !evaluating_) {
    apply_releases(s);
    // What this step's rebuilds re-create though dead, kept for later replays.
    for (const auto& [t, until] : schedule_->steps[s].hold) hold_until_[t] = until;
    rebuild_scheduled(s);
  }

  // 0. recompute: the plan's replays before this backward step.
  const std::size_t position = route_.position(l.id);
  if (recompute_ && !forward && options_.policy.drop_after_forward) {
    const backward_step_plan& bp = recompute_->backward(position);
    for (const replay_action& a : recompute_->replays(bp)) {
      replay_forward(a.layer, s);
      for (recompute_key k : recompute_->frees(a)) drop(static_cast<tensor_id>(k));
    }
  }

  // 1. What the step reads must be on the device; what it writes first is born here. Each
  //    is locked at once, so making room for the next cannot evict it. utp/all: when the
  //    heap cannot serve although everything unlocked has left, what the step already
  //    holds is in the way (scattered over the arena): repack and try once more.
  //    A staged split step (TSPLIT) first moves its micro-tensors to host memory; only the
  //    rest is acquired whole, and a buffer for one micro-batch's slices is taken after.
  std::vector<tensor_id> locked;
  const auto accesses = table_.accesses(s);
  const bool staged = staging_->step[s];
  conv_step conv;
  void* workspace = nullptr;
  // A step that throws (a failed kernel, a data source that failed) gives back what it holds
  // on the way out: its locks, above all, which the next iteration's frees would otherwise
  // find held (tensor_cache::release throws on a locked tensor, in a noexcept path: a retry
  // after any failed iteration aborted). Step 4 does the same on success and disarms it.
  struct on_throw {
    executor& ex;
    std::vector<tensor_id>& locked;
    void*& workspace;
    const conv_step& conv;
    bool staged;
    bool armed = true;
    ~on_throw() {
      if (!armed) return;
      for (tensor_id t : locked) {
        try {
          ex.cache_->unlock(t);
        } catch (...) {
          // Not locked after all (a repack unlocked it): nothing to give back.
        }
      }
      if (workspace != nullptr) {
        (void)ex.heap_->deallocate(workspace);
        ex.residency_->workspace_returned(conv.workspace_bytes);
      }
      if (staged) ex.end_staged_step();
    }
  } give_back_on_throw{*this, locked, workspace, conv, staged};
  const bool has_conv = l.type == layer_type::conv && table_.has_work(s);
  const bool data_grad = has_conv && table_.of(l.inputs[0]).output_grad != invalid_tensor;
  // max and fixed name an algorithm rather than fit one to what is free: its workspace is
  // needed whatever the heap holds.
  const bool promised =
      options_.conv_ws.mode == conv_ws_mode::max || options_.conv_ws.mode == conv_ws_mode::fixed;
  // A staged step's promised workspace is taken in one piece with its micro buffer (what
  // the split plan counted beside the micro-step), known before: the choice does not depend
  // on what is free.
  const bool staged_workspace = staged && has_conv && promised;
  if (staged_workspace) {
    conv = launcher_->choose_conv(*selector_, l, forward, data_grad, heap_->largest_free_run());
  }
  // That workspace, in the micro buffer: counted and given back with it (end_staged_step).
  void* in_micro = nullptr;
  if (staged) {
    in_micro = acquire_staged(s, accesses, locked, conv.workspace_bytes);
  } else {
    release_handed();  // slices a staged step handed over are for staged steps only
    try {
      acquire(s, accesses, locked, false);
    } catch (const out_of_memory&) {
      // Only device memory is repacked; host memory running out is an error to report.
      if (!options_.policy.evict_to_host || host_exhausted_) throw;
      repack(s, accesses, locked);
      acquire(s, accesses, locked, true);
    }
  }
  // Under baseline, everything of the iteration is born at the first step (an evaluation
  // keeps to forward-only liveness under every policy).
  if (!evaluating_) {
    for (tensor_id t : sp.allocate) {
      if (residency_->state(t) == residency::absent) allocate_transient(t, s), ++tensors_allocated_;
    }
  }
  // What the step's rebuilds re-created only for another replay to read (dead before this
  // step) goes before the workspace is sized (acquire drops it before the step's new tensors;
  // a repack's or a staged step's acquire does not): stream order runs those replays first.
  drop_dead_rebuilt(s, false);

  // 2. Functional tensors first; then the convolution's workspace from what is left.
  if (has_conv && !staged_workspace) {
    conv = launcher_->choose_conv(*selector_, l, forward, data_grad, heap_->largest_free_run());
    if (conv.workspace_bytes != 0) {
      // Under utp/all a promised workspace may push unlocked tensors out, as a tensor would.
      workspace = take_workspace(conv.workspace_bytes, promised);
      if (workspace == nullptr && promised && options_.policy.evict_to_host && !host_exhausted_ &&
          !staged) {
        // Everything unlocked has left, and the step's own tensors split what is free (ResNet-50
        // at a third of its smallest budget failed on conv1's 147 KiB im2col workspace with
        // 149 KiB free in two runs): place them again, packed, as for a tensor (step 1).
        repack(s, accesses, locked);
        acquire(s, accesses, locked, true);
        workspace = take_workspace(conv.workspace_bytes, promised);
      }
      if (workspace == nullptr) {
        // max and fixed promise an algorithm: falling back would silently change it (and
        // with it the results' last bits, which the oracle compares).
        if (promised) {
          throw_out_of_budget(s,
                              knob_value(options_.conv_ws.source, options_.conv_ws.mode_name()) +
                                  ": the workspace of " + conv.name,
                              conv.workspace_bytes);
        }
        // A no-workspace algorithm always runs.
        conv = launcher_->no_workspace_conv(*selector_, l, forward, data_grad);
      }
    }
    residency_->workspace_taken(conv.workspace_bytes);
  }
  if (has_conv && forward && !forward_conv_.empty()) forward_conv_[s] = conv;  // a replay's
  note_peak();
  step_record rec;
  rec.step = static_cast<int>(s + 1);
  rec.layer = l.name;
  rec.pass = forward ? 'F' : 'B';
  rec.bytes_live = residency_->step_peak_live();
  rec.heap_bytes = step_heap_peak();
  rec.tensors_live = static_cast<int>(residency_->tensors_live());
  rec.workspace_bytes = conv.workspace_bytes;
  rec.algorithm = conv.name;
  rec.parts = batch_parts_of(options_, s);
  rec.groups = channel_groups_of(options_, net_, route_, s);
  rec.staged = staged;
  steps_.push_back(std::move(rec));
  step_open_ = false;

  // 3. The kernel, and the event marking its end (what offloads of its outputs wait for).
  if (table_.has_work(s)) {
    launch_layer(l, forward, accesses, conv, staged_workspace ? in_micro : workspace, data, false);
  }
  if (!table_.buckets().empty()) reduce_buckets(s);
  if (!capture_after_[s].empty()) capture_watched(s);
  if (evaluating_ && l.type == layer_type::softmax_loss) copy_out_predictions(l);
  if (transfers_) {
    if (step_done_[s] == nullptr) step_done_[s] = dev_.create_event();
    dev_.get_stream(stream_role::compute).record(*step_done_[s]);
    step_done_iteration_[s] = iterations_run_;
  }

  // 4. Unlock; give back the workspace and what dies here (stream order keeps it safe).
  give_back_on_throw.armed = false;
  for (tensor_id t : locked) cache_->unlock(t);
  if (workspace != nullptr) (void)heap_->deallocate(workspace);
  if (!staged_workspace) residency_->workspace_returned(conv.workspace_bytes);
  if (staged) end_staged_step();
  for (tensor_id t : evaluating_ ? eval_free_after_[s] : free_after_[s]) free_transient(t);
  // A rebuild may have re-created intermediates whose life was already over (inputs of the
  // replay that was wanted): they go again now.
  drop_dead_rebuilt(s, true);
  rebuilt_.clear();

  // 5. Move or drop what the policy moves or drops (an evaluation frees what it is done
  //    with at once: nothing is kept for a backward pass).
  if (!evaluating_) apply_policy_moves(s, forward, position, accesses);
  steps_.back().offloads = marks_.offloads;
  steps_.back().prefetches = marks_.prefetches;
  steps_.back().replays = marks_.replays;
  steps_.back().heap_bytes = step_heap_peak();
  bookkeeping_s_ += std::chrono::duration<double>(clock_type::now() - t0).count();
}

// After step s (not in an evaluation): the policy's drops, offloads, the schedule's moves,
// write-backs and prefetches.
void executor::apply_policy_moves(std::size_t s, bool forward, std::size_t position,
                                  std::span<const tensor_access> accesses) {
  if (recompute_ && options_.policy.drop_after_forward) {
    if (forward) {
      for (recompute_key k : recompute_->drops_after_forward(position)) {
        drop(static_cast<tensor_id>(k));
      }
    } else {
      for (recompute_key k : recompute_->frees(recompute_->backward(position))) {
        drop(static_cast<tensor_id>(k));
      }
    }
  }
  if (options_.policy.offload_checkpoints && forward) {
    for (const auto& a : accesses) {
      const tensor_id t = a.tensor;
      if (offload_candidate_[t] && last_forward_use_[t] == s &&
          residency_->state(t) == residency::resident) {
        start_offload(t);
        offloads_due_[std::min(s + static_cast<std::size_t>(std::max(1, options_.offload_lag)),
                               offloads_due_.size() - 1)]
            .push_back(t);
      }
    }
  }
  if (schedule_) {
    apply_scheduled(s);
  } else {
    if (options_.policy.evict_to_host) write_back();
    if (!forward) prefetch_ahead(s);
  }
}

// Drops what replays re-created in step `s` whose life is over: before the step's kernel
// (`after_kernel` false) those dead before it, which the step does not touch; after it,
// those whose last use it was too.
void executor::drop_dead_rebuilt(std::size_t s, bool after_kernel) {
  release_held(s, after_kernel);
  std::erase_if(rebuilt_, [&](tensor_id t) {
    if (after_kernel ? free_step_[t] > s : free_step_[t] >= s) return false;
    if (hold_until_[t] > s) {
      // Kept for the replays of later steps (scheduled_step::hold): dropped at its last.
      if (std::find(held_.begin(), held_.end(), t) == held_.end()) held_.push_back(t);
      return true;
    }
    if (!after_kernel) {
      // Before the kernel only what sits unlocked on the device, and no replay under way
      // reads (a staged replay's inputs are in host memory, not locked).
      if (residency_->state(t) != residency::resident || cache_->locked(t) ||
          std::find(replaying_.begin(), replaying_.end(), t) != replaying_.end()) {
        return false;
      }
    }
    if (residency_->state(t) == residency::resident) {
      drop(t);
    } else if (residency_->state(t) != residency::dropped) {
      free_transient(t);  // evicted meanwhile: its host copy goes too
    }
    return true;
  });
}

void executor::release_held(std::size_t s, bool after_kernel) {
  std::erase_if(held_, [&](tensor_id t) {
    if (hold_until_[t] > s) return false;
    const residency r = residency_->state(t);
    if (!after_kernel && r == residency::resident &&
        (cache_->locked(t) ||
         std::find(replaying_.begin(), replaying_.end(), t) != replaying_.end())) {
      return false;
    }
    hold_until_[t] = 0;
    if (r == residency::resident) {
      drop(t);
    } else if (r != residency::dropped) {
      free_transient(t);  // evicted meanwhile: its host copy goes too
    }
    return true;
  });
}

// Enqueues layer `l`'s forward or backward kernel (and, in backward, the solver's updates)
// on the compute stream; on `null`, only its modelled time.
void executor::launch_layer(const layer& l, bool forward, std::span<const tensor_access> accesses,
                            const conv_step& conv, void* workspace, data_source* data, bool replay,
                            const layer* fused_act) {
  layer_launch step;
  step.l = &l;
  step.forward = forward;
  step.accesses = accesses;
  step.conv = &conv;
  step.workspace = workspace;
  step.data = data;
  step.iteration = iteration_;
  step.replay = replay;
  step.inference = evaluating_;
  step.fused_act = fused_act;
  // TSPLIT: a split step runs micro-batch by micro-batch (the same bits; a replay needs no
  // split to give them).
  const std::size_t split_at = replay ? replay_split_ : current_step_;
  if (split_at < route_.step_count()) {
    step.parts = batch_parts_of(options_, split_at);
    step.channel_parts = channel_groups_of(options_, net_, route_, split_at);
    step.staged = staging_->tensors;  // empty but in a staged step (or replay)
    step.fp16_error = &staging_->stream_error;
  }
  if (recording() == nullptr) {
    launcher_->launch(step);
    return;
  }
  const std::string name = fused_act != nullptr ? l.name + "+" + fused_act->name : l.name;
  recording()->span(dev_.get_stream(stream_role::compute), name + (forward ? " F" : " B"),
                    replay ? "replay" : "kernel", 0, static_cast<int>(current_step_),
                    [&] { launcher_->launch(step); });
}

policy_report executor::report() const {
  policy_report r;
  r.policy = options_.policy.name;
  r.image_side = net_[net_.data_layer()].output_shape.h;
  r.max_layer_bytes = layer_memory_->max_layer_bytes();
  if (options_.evaluation_only) {
    // An evaluation runs the forward steps alone: its max(l_i) is theirs (training's backward
    // steps set one above an evaluation's peak; session 47's hostile run).
    r.max_layer_bytes = 0;
    for (const layer_memory_row& row : layer_memory_->rows()) {
      r.max_layer_bytes = std::max(r.max_layer_bytes, row.forward_bytes);
    }
  }
  r.persistent_bytes = plan_.persistent_bytes;
  r.tensors_allocated = tensors_allocated_;
  r.recomputations = recomputations_;
  r.model = options_.model;
  r.bytes_staged = staging_->bytes_staged;
  r.bytes_handed = staging_->bytes_handed;
  r.bytes_staged_fp16 = staging_->bytes_fp16;
  r.staged_fp16_error = std::max(staging_->stream_error, staging_->host_error);
  r.host_drops = host_drops_;
  r.staged_steps =
      static_cast<std::size_t>(std::count(staging_->step.begin(), staging_->step.end(), true));
  for (std::size_t s = 0; s < route_.step_count(); ++s) {
    if (staging_->step[s] && channel_groups_of(options_, net_, route_, s) > 1) {
      ++r.channel_group_steps;
    }
  }
  for (const step_record& s : steps_) {
    if (s.heap_bytes > r.peak_bytes) r.peak_bytes = s.heap_bytes, r.peak_step = s.step;
    r.peak_live_bytes = std::max(r.peak_live_bytes, s.bytes_live);
  }
  if (step_open_) {
    // The step that ran out of memory has no record: its peak is what the heap and the
    // residency held when it failed (a baseline failing at its first step said peak 0 B).
    const std::size_t heap_now = step_heap_peak();
    if (heap_now > r.peak_bytes) {
      r.peak_bytes = heap_now;
      r.peak_step = static_cast<int>(current_step_ + 1);
    }
    r.peak_live_bytes =
        std::max({r.peak_live_bytes, residency_->step_peak_live(), residency_->bytes_live()});
  }
  if (!steps_.empty()) {
    r.bookkeeping_us_per_step = 1e6 * bookkeeping_s_ / static_cast<double>(steps_.size());
  }
  if (transfers_) {
    const transfer_stats ts = transfers_->engine.stats();
    r.bytes_offloaded = ts.bytes_offloaded;
    r.bytes_prefetched = ts.bytes_prefetched;
    r.transfer_wait_s = ts.wait_seconds;
    r.bytes_compressed = ts.bytes_compressed;
    r.schedule_compress = options_.policy.planned && options_.schedule.compress;
    r.max_compression_error = ts.max_compression_error;
  }
  const tensor_cache_stats cs = cache_->stats();
  r.cache_hits = cs.hits;
  r.cache_misses = cs.misses;
  r.evictions = cs.evictions;
  if (!dev_.touches_memory()) r.seconds_per_iteration = simulated_s_;
  if (const memory_schedule* ran = ran_schedule_ ? ran_schedule_.get() : schedule_.get()) {
    for (const scheduled_gap& g : ran->gaps) {
      (g.action == gap_action::swap ? r.scheduled_swaps : r.scheduled_drops) += 1;
      if (g.wraps) {
        ++r.scheduled_parks;
        r.parked_bytes += table_[g.tensor].bytes;
      }
      if (g.to_host) ++r.scheduled_to_host;
    }
    for (const scheduled_step& st : ran->steps) r.scheduled_whole += st.whole.size();
    r.predicted_seconds = ran->predicted_seconds;
    r.schedule_measured = ran_schedule_ ? ran_measured_ : replan_.replanned;
    r.bound_seconds = ran->bound_seconds;
    r.schedule_misses = schedule_misses_;
    r.replan = replan_;
  }
  if (choice_.weighed) {
    r.weighed_all_seconds = choice_.all_s;
    r.weighed_recompute_seconds = choice_.recompute_s;
    r.ran_as_recompute = !options_.policy.planned;
    r.ran_without_schedule = choice_.reactive;
    r.weighed_reactive_seconds = choice_.reactive_s;
    r.weighed_split_share = choice_.split_share;
    r.weighed_split_steps = choice_.split_steps;
    r.fewest_split_steps = choice_.fewest_split_steps;
    r.weighed_fewest_split_seconds = choice_.fewest_split_s;
    r.mixed_split_steps = choice_.mixed_split_steps;
    r.weighed_whole_split_seconds = choice_.whole_split_s;
    // The schedule's own: where it fit only without headroom, 0, not the option's.
    r.weighed_headroom = schedule_ ? schedule_->headroom : options_.schedule.headroom;
    r.weighed_workspace_share = options_.schedule.workspace_share;
    r.weighed_keep_rebuilt = options_.schedule.keep_rebuilt;
    r.weighed_min_bytes = options_.schedule.min_bytes;
    // Only where a schedule planned so ran (not the cache alone, nor recompute).
    r.weighed_conv_mode_workspaces = options_.schedule.conv_mode_workspaces &&
                                     options_.conv_ws.mode != conv_ws_mode::dynamic &&
                                     schedule_ != nullptr;
  }
  r.ranks = ranks();
  r.allreduce_bytes = reduce_bytes_;
  r.allreduce_seconds = reduce_s_;
  r.allreduce_wait_seconds = reduce_wait_s_;
  r.steps = steps_;
  return r;
}

void executor::set_solver(const solver_settings& settings) {
  settings.validate("executor::set_solver");
  solver_ = settings;
  launcher_->set_sgd({settings.learning_rate, settings.momentum, settings.weight_decay});
}

void executor::set_seed(std::uint64_t seed) {
  seed_ = seed;
  launcher_->set_seed(seed);
}

void executor::set_transfer_faults(const transfer_faults& faults) {
  MEMWEAVE_EXPECTS(transfers_ != nullptr,
                   "policy " + options_.policy.name + " moves no tensors: no transfers to fail");
  transfers_->engine.set_faults(faults);
}

std::vector<float> executor::read_tensor(tensor_id t) const {
  MEMWEAVE_EXPECTS(t < residency_->size(), "tensor id " + std::to_string(t) + " is out of range");
  MEMWEAVE_EXPECTS(dev_.touches_memory(), "the " + std::string(to_string(dev_.kind())) +
                                              " device holds no values to read");
  std::vector<float> out(table_[t].bytes / sizeof(float));
  if (residency_->state(t) == residency::staged) {
    // In host staging memory (cut by channel groups; persistent, so never fp16): the steps
    // enqueued may still write it.
    dev_.get_stream(stream_role::compute).synchronize();
    std::memcpy(out.data(), staging_->buffer[t].get(), table_[t].bytes);
    return out;
  }
  if (residency_->state(t) == residency::on_host) {
    // Evicted (a persistent tensor under utp/all between iterations): its host copy is it.
    const void* h = transfers_->engine.host_copy(t);
    MEMWEAVE_EXPECTS(h != nullptr, "tensor " + table_[t].name + " has no host copy");
    std::memcpy(out.data(), h, table_[t].bytes);
    return out;
  }
  void* p = device_ptr(t);
  MEMWEAVE_EXPECTS(p != nullptr, "tensor " + table_[t].name + " is not resident");
  stream& compute = dev_.get_stream(stream_role::compute);
  compute.copy_async(out.data(), p, table_[t].bytes, copy_kind::device_to_host);
  compute.synchronize();
  return out;
}

std::vector<std::vector<float>> executor::read_persistent() const {
  std::vector<std::vector<float>> out;
  for (tensor_id t : plan_.persistent) out.push_back(read_tensor(t));
  return out;
}

}  // namespace memweave
