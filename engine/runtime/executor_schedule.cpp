// The executor's side of the memory schedule (`all` under a budget liveness exceeds):
// planning it from the executor's iteration (schedule_inputs.cpp), carrying it out at the
// step loop's fixed points (releases before a step; drops, offloads and prefetches after its
// kernel), and planning it again once from a first iteration's measured times (Capuchin).
#include "memweave/engine/executor.hpp"

#include <algorithm>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "engine/runtime/executor_checks.hpp"
#include "engine/runtime/executor_transfers.hpp"
#include "engine/runtime/kernel_launcher.hpp"
#include "engine/runtime/null_run.hpp"
#include "engine/runtime/residency_table.hpp"
#include "engine/runtime/schedule_inputs.hpp"
#include "memweave/comm/communicator.hpp"
#include "memweave/core/config.hpp"
#include "memweave/core/error.hpp"
#include "memweave/device/device.hpp"
#include "memweave/device/stream_timeline.hpp"
#include "memweave/engine/split_plan.hpp"

namespace memweave {
namespace {

// The host link the schedule's timing assumes, GB/s: the options', MEMWEAVE_HOST_LINK_GBPS,
// or the cost model's.
double schedule_link_gbps(const executor_options& options) {
  double link = options.link_gbps;
  if (link <= 0) link = *option_double("MEMWEAVE_HOST_LINK_GBPS");
  if (link <= 0) link = options.model.link_bytes_per_s / 1e9;
  return link;
}

}  // namespace

executor_options null_run_options(const executor_options& options) {
  executor_options o = options;
  o.weigh_alternatives = false;
  o.comm = nullptr;
  // Kept: asked before each run (null_run_seconds) and by its schedule planner, which on a
  // deep ResNet takes minutes (a SIGTERM waited 186 s for it; session 48's hostile run).
  o.ranks = options.comm != nullptr ? options.comm->size() : options.ranks;
  o.timeline = nullptr;
  o.heap.trace_path.clear();
  o.replan_from_measured = false;
  // The lower bound only describes the plan kept: the executor that keeps it takes it once
  // (it was a sixth of planning a 1116-layer ResNet, taken in each of the weighing's runs).
  o.schedule.bound = false;
  return o;
}

device_options null_run_device(const executor_options& options) {
  device_options d;
  d.kind = "null";
  d.capacity_bytes = std::max(options.budget_bytes, std::size_t{1} << 40);
  d.host_link_gbps = schedule_link_gbps(options);
  return d;
}

double null_run_seconds(const network& net, const executor_options& options,
                        std::optional<memory_schedule>* schedule) {
  if (options.stop && options.stop()) {
    throw interrupted("stopped while weighing its configurations on the null device");
  }
  try {
    auto null_device = make_device(null_run_device(options));
    executor ex(net, *null_device, null_run_options(options));
    ex.run_iteration(nullptr, 0);
    if (schedule != nullptr && ex.schedule() != nullptr) *schedule = *ex.schedule();
    return ex.report().seconds_per_iteration;
  } catch (const interrupted&) {
    throw;  // a stop, not a configuration that does not run
  } catch (const error&) {
    return 0.0;  // does not run there (the executor itself will say why, if it cannot)
  }
}

// all: plans the iteration's memory schedule under the budget (engine/runtime/schedule_inputs,
// memweave/schedule); none when no plan fits.
std::optional<memory_schedule> executor::plan_schedule(const std::vector<double>& measured_seconds,
                                                       double link_bytes_per_s,
                                                       double copy_latency_s) const {
  return plan_executor_schedule(
      schedule_inputs_of(measured_seconds, link_bytes_per_s, copy_latency_s), options_.schedule);
}

schedule_inputs executor::schedule_inputs_of(const std::vector<double>& measured_seconds,
                                             double link_bytes_per_s, double copy_latency_s) const {
  schedule_inputs in;
  in.net = &net_;
  in.steps = &route_;
  in.table = &table_;
  in.memory = layer_memory_.get();
  in.heap = heap_.get();
  in.model = options_.model;
  in.link_bytes_per_s =
      link_bytes_per_s > 0 ? link_bytes_per_s : schedule_link_gbps(options_) * 1e9;
  in.budget_bytes = options_.budget_bytes;
  in.in_cache = [this](tensor_id t) { return in_cache(t); };
  // On the planning device only: there a stop ends a run with no figures yet (its first
  // iteration), where on a real device a re-plan after some iterations would lose them.
  if (!dev_.touches_memory()) in.stop = options_.stop;
  if (options_.schedule.conv_mode_workspaces) in.conv_mode = &options_.conv_ws;
  in.conv_run = &options_.conv_ws;
  in.measured_seconds = measured_seconds;
  in.copy_latency_s = copy_latency_s;
  // The plan fuses BN+ACT replays only (fused_bn_act_sources: CONV+ACT ones run fused but
  // are planned as two).
  in.fused = fused_source_;
  in.fused_conv.assign(in.fused.size(), invalid_layer);
  for (tensor_id t = 0; t < in.fused.size(); ++t) {
    layer_id& l = in.fused[t];
    if (l == invalid_layer || net_[l].type == layer_type::bn) continue;
    in.fused_conv[t] = l;
    l = invalid_layer;
  }
  if (any_staged_) describe_staging(in);
  return in;
}

executor_options on_cache_alone(executor_options options) {
  options.schedule.allow_swap = options.schedule.allow_drop = false;
  return options;
}

// Every run is on the null device (null_run_options): what `memweave plan` reports for each.
executor_options executor::weigh_policy(const network& net, const executor_options& options,
                                        policy_choice& choice) {
  if (!options.policy.planned || !options.weigh_alternatives || options.budget_bytes == 0 ||
      options.evaluation_only) {
    return options;
  }
  if (options.split_weighed) return weigh_split_plans(net, options, choice);
  executor_options o = options;  // each run is null_run_seconds' (null_run_options)
  choice.weighed = true;
  executor_options chosen = options;
  // Equal runs (a budget with room for every workspace) go to the better prediction (the
  // report's), then to the smaller reservation.
  auto predicted = [](const std::optional<memory_schedule>& x) {
    return x ? x->predicted_seconds : std::numeric_limits<double>::infinity();
  };
  // Runs `all` at one headroom and workspace share, kept if the fastest.
  auto run_all = [&](double headroom, std::size_t share, bool keep_rebuilt, std::size_t min_bytes) {
    o.schedule.headroom = headroom;
    o.schedule.workspace_share = share;
    o.schedule.keep_rebuilt = keep_rebuilt;
    o.schedule.min_bytes = min_bytes;
    std::optional<memory_schedule> schedule;
    const double s = null_run_seconds(net, o, &schedule);
    const bool tie = s == choice.all_s && predicted(schedule) < predicted(choice.schedule);
    if (s > 0 && (choice.all_s == 0 || s < choice.all_s || tie)) {
      choice.all_s = s;
      choice.schedule = std::move(schedule);
      // Re-planning from measured times keeps both.
      chosen.schedule.headroom = headroom;
      chosen.schedule.workspace_share = share;
      chosen.schedule.keep_rebuilt = keep_rebuilt;
      chosen.schedule.min_bytes = min_bytes;
      chosen.schedule.conv_mode_workspaces = o.schedule.conv_mode_workspaces;
    }
  };
  // The headroom left for fragmentation is a guess the heap settles: where half of it does
  // not fragment into safety-net evictions, the schedule needs fewer actions (Inception v4 at
  // a third of its peak: 0.757 -> 0.915 of liveness's speed). Both are run; the faster stays.
  // So is the share of the budget planned for CONV workspaces, which the planner would choose
  // by prediction: the heap can overturn it (VGG16 at a third of its peak: a quarter
  // fragments and runs 0.655 of liveness's speed, a sixteenth 0.767; the prediction once
  // chose the quarter).
  std::vector<double> headrooms{options.schedule.headroom};
  if (options.schedule.headroom_auto && options.schedule.headroom > 0) {
    headrooms.push_back(options.schedule.headroom / 2);
  }
  const std::size_t user_share = options.schedule.workspace_share;
  const bool keep = options.schedule.keep_rebuilt;
  const std::size_t min_bytes = options.schedule.min_bytes;
  // The schedule against the cache alone (no schedule): with staged split steps the cache can
  // be the faster (AlexNet b16 at 0.95 of its max(l_i): 0.454 ms per iteration against 0.696
  // scheduled), so both run.
  bool reactive_ran = false;  // reactive_s 0: not run, or it did not fit
  auto run_reactive = [&] {
    if (reactive_ran) return;
    reactive_ran = true;
    choice.reactive_s = null_run_seconds(net, on_cache_alone(o));
  };
  // Under a mode that names each convolution's algorithm (fixed, max, none) the run takes
  // that algorithm's workspace whatever the schedule planned, evicting for it. Planned with
  // it instead (conv_mode_workspaces), the greedy sees the true workspaces and times, which
  // pays on some problems (Inception v4 under max at 0.6 of its peak: 1.022 -> 0.670 ms) and
  // not on others (under none at half its peak it found no schedule: 0.450 -> 1.234 ms). So
  // both run: at the first configuration (where the ladder plans no schedule or loses to the
  // cache alone the mode's may not: VGG16 b8 under none, 3.756 ms on the cache alone, 1.236
  // with the mode's), and the other way at the configuration chosen and the other headroom.
  const bool both_modes =
      options.schedule.conv_mode_workspaces_auto && options.conv_ws.mode != conv_ws_mode::dynamic;
  const bool base_mode = options.schedule.conv_mode_workspaces;
  // The other configurations refine the first by a few percent. Not worth running where the
  // first plans no schedule (its retries include no headroom and no workspaces: none of them
  // would), nor where the cache alone is faster than it by more than 5 %: on a large problem
  // far below the peak each is the greedy planned over again (ResNet-152 b1700 at 12 GiB with
  // staged steps: its schedule runs 66.6 s per iteration, the cache alone 61.7).
  bool refine = true, first = true;
  for (const double headroom : headrooms) {
    for (const std::size_t share : {16, 4, 1}) {
      if (!refine || (user_share != 0 && share != user_share)) continue;
      run_all(headroom, share, keep, min_bytes);
      if (!first) continue;
      first = false;
      if (both_modes) {
        o.schedule.conv_mode_workspaces = !base_mode;
        run_all(headroom, share, keep, min_bytes);
        o.schedule.conv_mode_workspaces = base_mode;
      }
      if (!choice.schedule) {
        refine = false;
        continue;
      }
      // As fast as every step at its fastest way with nothing moved: no other configuration,
      // nor the cache alone or recompute, can run faster (a 3600-layer ResNet whose budget
      // holds liveness weighed 11 runs for 4 s, where liveness plans in 0.4; session 48's
      // hostile run). Its schedule is the one the run takes.
      if (choice.all_s <= choice.schedule->baseline_seconds) {
        return chosen;
      }
      run_reactive();
      refine = !(choice.reactive_s > 0 && choice.reactive_s < 0.95 * choice.all_s);
    }
  }
  // Keeping what a replay rebuilt early until its own use saves replays (DenseNet-121 at a
  // third of its peak: 0.838 -> 0.880 of liveness's speed) but holds memory longer, which
  // can fragment the heap (ResNet-50 there: 457 safety-net evictions at half the headroom):
  // run at the headroom and share chosen, kept if faster.
  o.schedule.conv_mode_workspaces = chosen.schedule.conv_mode_workspaces;
  if (options.schedule.keep_rebuilt_auto && choice.all_s > 0 && refine) {
    run_all(chosen.schedule.headroom, chosen.schedule.workspace_share, !keep, min_bytes);
  }
  // Tiny tensors' actions: a threshold of 1/16384 of the budget, at the headroom and
  // keep_rebuilt chosen, each share (schedule_options::min_bytes_auto; the share that runs
  // fastest changes with it: DenseNet-121 at a third of its peak, a sixteenth with the tiny
  // tensors moved, all of the budget without).
  if (options.schedule.min_bytes_auto && choice.all_s > 0 && refine) {
    const double headroom = chosen.schedule.headroom;
    const bool kept = chosen.schedule.keep_rebuilt;
    const std::size_t tiny = std::max<std::size_t>(options.budget_bytes / 16384, 1);
    for (const std::size_t share : {16, 4, 1}) {
      // (With the mode's workspaces the share plans nothing: one run.)
      if (o.schedule.conv_mode_workspaces && share != chosen.schedule.workspace_share) continue;
      if (user_share == 0 || share == user_share) run_all(headroom, share, kept, tiny);
    }
    // ... and at the other headroom, at the share chosen: with the tiny tensors left alone,
    // half the headroom may no longer lose to fragmentation and stalls (DenseNet-121 b32 at a
    // third of its peak, keeping what replays rebuild: 113.5 ms at 0.08 either way, 112.8 at
    // 0.04 without the tiny tensors' actions, 114.5 with them).
    const std::size_t share = chosen.schedule.workspace_share;
    for (const double other : headrooms) {
      if (other != headroom) run_all(other, share, kept, tiny);
    }
  }
  if (both_modes && choice.all_s > 0 && refine) {
    // (Where the first configuration's run with the mode's workspaces is the one chosen, the
    // refinements above ran at it: only the other headroom is left.)
    const bool chose_it = chosen.schedule.conv_mode_workspaces != base_mode;
    o.schedule.conv_mode_workspaces = !base_mode;
    const std::size_t share = chosen.schedule.workspace_share;
    const bool kept = chosen.schedule.keep_rebuilt;
    const std::size_t threshold = chosen.schedule.min_bytes;
    const double first_headroom = chosen.schedule.headroom;
    if (!chose_it) run_all(first_headroom, share, kept, threshold);
    for (const double other : headrooms) {
      if (other != first_headroom) run_all(other, share, kept, threshold);
    }
  }
  // Where half the headroom ran faster, a quarter may be faster still; where it fragments the
  // heap or plans no schedule it is slower and not kept: one more run, at the configuration
  // chosen.
  if (headrooms.size() > 1 && choice.all_s > 0 && refine &&
      chosen.schedule.headroom == headrooms.back()) {
    o.schedule.conv_mode_workspaces = chosen.schedule.conv_mode_workspaces;
    run_all(headrooms.back() / 2, chosen.schedule.workspace_share, chosen.schedule.keep_rebuilt,
            chosen.schedule.min_bytes);
  }
  // The cache alone also where no scheduled run ran (a schedule planned that then did not
  // fit the heap): it may, and the searches take its running as fitting (plan_fits_budget).
  if (choice.schedule || choice.all_s == 0) {
    run_reactive();
    if (choice.reactive_s > 0 && (choice.all_s == 0 || choice.reactive_s < choice.all_s)) {
      choice.reactive = true;
      choice.schedule.reset();
      chosen = on_cache_alone(chosen);
    }
  }
  executor_policy recompute = executor_policy::parse("recompute");
  o.policy = recompute;
  choice.recompute_s = null_run_seconds(net, o);
  const double all_s = choice.reactive ? choice.reactive_s : choice.all_s;
  if (choice.recompute_s > 0 && (all_s == 0 || choice.recompute_s < all_s)) {
    recompute.name = options.policy.name;  // still `all` to the user; the report says why
    chosen.policy = recompute;
    choice.schedule.reset();
    choice.reactive = false;
  }
  return chosen;
}

bool executor::runs_on_null_device(const network& net, const executor_options& options,
                                   const memory_schedule& schedule) {
  executor_options o = null_run_options(options);
  // Its own plan is replaced at once: planned at one link charge and margin only.
  o.schedule.slack_auto = false;
  try {
    auto null_device = make_device(null_run_device(options));
    executor ex(net, *null_device, o);
    ex.use_schedule(schedule);
    ex.run_iteration(nullptr, 0);
    return true;
  } catch (const error&) {
    return false;  // out of budget (or of host memory) somewhere in the iteration
  }
}

void executor::use_schedule(memory_schedule planned) {
  schedule_ = std::make_unique<memory_schedule>(std::move(planned));
  compressed_.assign(table_.size(), false);
  for (const scheduled_gap& g : schedule_->gaps) {
    if (g.compressed) compressed_[g.tensor] = true;
  }
  if (forward_conv_.empty()) forward_conv_.assign(route_.layer_count(), conv_step{});
  // Every iteration starts with the parked tensors on the host and the others where the
  // constructor placed them (a schedule that replaces another may park others): placed
  // again now where one that stays is away (restore_persistent_placement itself sees a
  // parked one that is not on the host).
  parked_.assign(table_.size(), false);
  for (const scheduled_gap& g : schedule_->gaps) {
    if (g.wraps) parked_[g.tensor] = true;
  }
  for (tensor_id t : plan_.persistent) {
    if (in_cache(t) && !parked_[t] && residency_->state(t) != residency::resident) {
      persistent_moved_ = true;
    }
  }
  restore_persistent_placement();
}

// Capuchin: the first iteration ran the model's schedule on a device that computes; its
// measured kernel and copy times now replace the model's, and the schedule is planned once
// more from them. The old one stays when the new one does not fit.
void executor::replan_from(const std::vector<timeline_span>& spans) {
  std::vector<double> measured(route_.step_count(), -1.0);
  // Copies: seconds = latency + bytes / link, fitted by least squares (a small tensor's copy
  // costs mostly its latency on a real device).
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const timeline_span& sp : spans) {
    const double d = sp.end_s - sp.begin_s;
    if (sp.stream == stream_role::compute) {
      if (sp.category != "kernel" || sp.step < 0) continue;  // replays are the planner's
      double& m = measured[static_cast<std::size_t>(sp.step)];
      m = std::max(0.0, m) + d;
    } else if (sp.bytes > 0 && d > 0) {
      const double x = static_cast<double>(sp.bytes);
      n += 1, sx += x, sy += d, sxx += x * x, sxy += x * d;
    }
  }
  replan_.model_seconds = schedule_->predicted_seconds;
  replan_.measured_seconds = 0;
  replan_.measured_iteration = static_cast<int>(trained_iterations_);
  for (double m : measured) replan_.measured_seconds += std::max(0.0, m);
  double link = 0, latency = 0;
  const double spread = n * sxx - sx * sx;
  if (n >= 2 && spread > 0) {
    const double slope = (n * sxy - sx * sy) / spread;  // seconds per byte
    latency = std::max(0.0, (sy - slope * sx) / n);
    if (slope > 0) link = 1.0 / slope;
  }
  if (link <= 0 && sy > 0) link = sx / sy, latency = 0;  // one size only: the mean rate
  replan_.link_gbps = link / 1e9;
  replan_.copy_latency_us = latency * 1e6;
  std::optional<memory_schedule> planned = plan_schedule(measured, link, latency);
  if (!planned) {
    replan_.note = "the measured times give no schedule that fits: the model's is kept";
    return;
  }
  // The planner's timeline does not see where the heap places each block: a schedule from
  // other times can meet fragmentation the model's did not (AlexNet at its smallest budget,
  // re-planned from a loaded machine's times, failed its second iteration on a CONV
  // workspace). The model's schedule ran; the new one must run too before it replaces it.
  if (!runs_on_null_device(net_, options_, *planned)) {
    replan_.note =
        "the measured times' schedule does not run in the budget (the heap fragments): the "
        "model's is kept";
    return;
  }
  auto key = [](const scheduled_gap& g) {
    return std::make_tuple(g.tensor, g.after, g.before, static_cast<int>(g.action), g.release,
                           g.prefetch, g.compressed);
  };
  std::vector<decltype(key(scheduled_gap{}))> was, now;
  for (const scheduled_gap& g : schedule_->gaps) was.push_back(key(g));
  for (const scheduled_gap& g : planned->gaps) now.push_back(key(g));
  std::sort(was.begin(), was.end());
  std::sort(now.begin(), now.end());
  std::vector<decltype(key(scheduled_gap{}))> differ;
  std::set_symmetric_difference(was.begin(), was.end(), now.begin(), now.end(),
                                std::back_inserter(differ));
  replan_.gaps_changed = differ.size();
  replan_.replanned = true;
  // On trial: it runs the next iteration, the model's the one after, and so on
  // (continue_replan_trial).
  other_schedule_ = std::move(schedule_);
  trial_iterations_ = 0;
  use_schedule(std::move(*planned));
}

// all: before step `step`, the memory of tensors whose scheduled offload has had time to land
// goes back to the heap; the compute stream waits for the copy (it does not wait at all when
// the copy is done, as the schedule timed it).
void executor::apply_releases(std::size_t step) {
  stream& compute = dev_.get_stream(stream_role::compute);
  for (std::uint32_t t : schedule_->steps[step].release) {
    if (residency_->state(t) != residency::offloading) {
      ++schedule_misses_;  // evicted or dropped by the safety net meanwhile
      continue;
    }
    // The step loop runs ahead of the compute stream: blocking here until the copy lands
    // would make it wait for the kernels queued before, and drain that lead. Instead the
    // compute stream waits for the copy, and the memory goes back to the heap now: whatever
    // reuses it is ordered after that wait (later kernels on the compute stream; copies in
    // after an event recorded there). A prefetch of `t` waits for the copy to land first.
    transfers_->engine.order_after_offload(t, compute);
    (void)heap_->deallocate(residency_->aside(t));
    residency_->offload_landed(t);
  }
}

// all: before step `step`, what the schedule rebuilds there though the step does not read it
// and that cannot be rebuilt later in its life (what its replay reads, at some remove, dies
// first): a later chain counts on finding it on the device. Left to be rebuilt on demand, it
// stayed dropped, and that chain had to rebuild it from what was dead by then (a random DAG
// at 0.75 x its peak: "step 47 reads input.y, which is not alive", input.y the batch; session
// 43's hostile run). The plan's other rebuilds of tensors no step reads there are left to
// their demand, as before (done regardless, they cost ResNet-50 at a third of its peak 4 %).
void executor::rebuild_scheduled(std::size_t step) {
  if (rebuildable_until_.empty()) return;
  for (const std::uint32_t t : schedule_->steps[step].rebuild) {
    if (residency_->state(t) != residency::dropped || free_step_[t] < step ||
        rebuildable_until_[t] >= free_step_[t]) {
      continue;
    }
    if (!read_by_running_step(t)) rebuild(t, step);  // run_step set current_step_ to `step`
  }
}

// all: after step `step`'s kernel, the schedule's drops, offloads and prefetches. A prefetch
// takes memory straight from the heap (never evicting: what it would push out is needed
// sooner); when no free run holds it (fragmentation), it is tried again after each next
// step, and fetched when needed should it still not fit (a miss).
void executor::apply_scheduled(std::size_t step) {
  const scheduled_step& ss = schedule_->steps[step];
  for (std::uint32_t t : ss.drop) {
    if (residency_->state(t) == residency::resident) drop(t);
  }
  for (std::uint32_t t : ss.offload) {
    if (residency_->state(t) != residency::resident) {
      ++schedule_misses_;
      continue;
    }
    transfers_->engine.wait_offloaded(t);  // a discarded earlier copy still in flight
    start_offload(t);
  }
  bool recorded = false;
  std::vector<tensor_id> wanted;
  wanted.swap(deferred_prefetches_);
  wanted.insert(wanted.end(), ss.prefetch.begin(), ss.prefetch.end());
  for (tensor_id t : wanted) {
    if (residency_->state(t) != residency::on_host) continue;  // fetched on demand meanwhile
    void* p = heap_->try_allocate(table_[t].bytes);
    if (p == nullptr) {
      deferred_prefetches_.push_back(t);
      continue;
    }
    if (!recorded)
      dev_.get_stream(stream_role::compute).record(*transfers_->ready), recorded = true;
    start_prefetch(t, p);
    residency_->prefetch_started(t, p);
  }
}

}  // namespace memweave
