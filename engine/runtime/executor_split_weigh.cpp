// TSPLIT under `all`: which micro-batches each split step runs in is weighed on the null
// device. Whole split plans first (one per share of the budget their micro-steps fit), then
// the fastest is mixed region by region with the others (executor_options::split_regions).
#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "engine/runtime/executor_checks.hpp"
#include "engine/runtime/null_run.hpp"
#include "memweave/core/error.hpp"
#include "memweave/engine/executor.hpp"
#include "memweave/engine/split_plan.hpp"

namespace memweave {
namespace {

// How many route steps run in more than one micro-batch or channel group.
std::size_t split_steps(const executor_options& o) {
  std::size_t n = 0;
  const std::size_t steps = std::max(o.split_parts.size(), o.channel_parts.size());
  for (std::size_t s = 0; s < steps; ++s) {
    const bool parts = s < o.split_parts.size() && o.split_parts[s] > 1;
    if (parts || (s < o.channel_parts.size() && o.channel_parts[s] > 1)) ++n;
  }
  return n;
}

// Entry `s` of a per-step list that may be shorter than the route (the rest 1).
int at(const std::vector<int>& v, std::size_t s) noexcept {
  return s < v.size() ? v[s] : 1;
}

}  // namespace

// TSPLIT: plan_splits gives each step the fewest micro-batches whose micro-step fits the
// budget, which leaves the memory schedule the least room beside them; more micro-batches
// leave it more, for smaller kernels and more copies. Which pays depends on the network and
// the budget (VGG16 b64 at 0.95 of its max(l_i): 1106 ms per iteration with the fewest, 978
// with micro-steps within 85 % of the budget; Inception v4 b32 there: 636 against 661), and
// on the rest of the weighing (each plan's best configuration differs), so the whole
// weighing runs for the plan of each of split_plan_shares, and the fastest plan is kept; it
// is then mixed with the others step by step (mix_split_plans).
executor_options executor::weigh_split_plans(const network& net, const executor_options& options,
                                             policy_choice& choice) {
  executor_options candidate = options, best;
  candidate.split_weighed = false;
  // No split needed: none is weighed (splitting where nothing must be split costs nothing).
  if (split_steps(options) == 0) return weigh_policy(net, candidate, choice);
  const route r(net);
  const tensor_table table(net, r);
  const layer_memory memory(table);
  const std::size_t block = heap_block_bytes(options);
  const std::vector<std::size_t> workspace = promised_workspace_bytes(table, options.conv_ws);
  policy_choice best_choice;
  double best_s = 0, fewest_s = 0;
  std::vector<split_choice> plans;
  for (const double share : split_plan_shares) {
    if (share < 1.0) {
      const auto budget =
          static_cast<std::size_t>(static_cast<double>(options.budget_bytes) * share);
      // A share leaves the rest of the budget beside the micro-steps, where a CONV step's
      // promised workspace may go: only what of it does not fit there counts against the
      // share (a micro-step's tensors within the share, and with the workspace within the
      // budget). Counted whole against the share, the share plans split more (the README's
      // ResNet-50 under fixed:im2col_image, all at 300 / 458 / 625 / 900 KiB: 6.141 / 4.624 /
      // 3.788 / 2.942 ms per iteration in the plan's model, against 6.053 / 5.018 / 3.477 /
      // 2.907 so).
      const std::size_t room = options.budget_bytes - budget;
      std::vector<std::size_t> beyond(workspace.size(), 0);
      for (std::size_t s = 0; s < workspace.size(); ++s) {
        beyond[s] = workspace[s] > room ? workspace[s] - room : 0;
      }
      try {
        const split_plan p = plan_splits(net, table, memory, options.model, budget, block,
                                         "--budget", options.split_channel_groups, false, beyond);
        const std::vector<int> parts = p.parts(table.step_count());
        const std::vector<int> groups = p.channel_parts(table.step_count());
        if (parts == candidate.split_parts && groups == candidate.channel_parts) continue;
        candidate.split_parts = parts;
        candidate.channel_parts = groups;
      } catch (const budget_too_small&) {
        break;  // a smaller share does not fit either
      }
    }
    plans.push_back({candidate.split_parts, candidate.channel_parts});
    policy_choice c;
    executor_options weighed = weigh_policy(net, candidate, c);
    const double s = c.chosen_s(weighed);
    if (share == 1.0) fewest_s = s;
    // The fewest, then only a faster one.
    if (share == 1.0 || (s > 0 && (best_s == 0 || s < best_s))) {
      best = std::move(weighed);
      best_s = s;
      best_choice = std::move(c);
      best_choice.split_share = share;
    }
  }
  best_choice.split_steps = split_steps(best);
  if (best_s > 0) mix_split_plans(net, plans, best, best_choice);
  choice = std::move(best_choice);
  choice.fewest_split_s = fewest_s;
  choice.fewest_split_steps = split_steps(options);
  return best;
}

// A whole plan is one share of the budget for every step, but where the schedule is pressed
// differs along the route: a stretch of steps may run faster with more micro-batches (room
// beside them for the schedule) while another runs faster with fewer (larger kernels, fewer
// copies). So the steps whose micro-batches or channel groups differ between the plans
// weighed are cut into regions of consecutive steps (equal counts, route order); each region
// in turn takes each other plan's parts there, one null iteration a trial, kept where it runs
// faster. Coarse to fine: 4 regions, then 8, ... up to split_regions, each pass from the mix
// the one before kept (the descent is greedy: a finer pass reaches mixes a coarser one cannot,
// a coarser one moves whole stretches at once). The plans mixed each fit, so every step of a
// mix fits the budget on its own; whether the whole mix runs is what its trial says.
// Measured (PERFORMANCE.md, issue 13): DenseNet-121 b32 at 0.5 of its max(l_i) 764 -> 649 ms
// per iteration, ResNet-50 b64 there 1674 -> 1428, for two to four times the planning.
void executor::mix_split_plans(const network& net, std::span<const split_choice> plans,
                               executor_options& best, policy_choice& choice) {
  if (best.split_regions <= 0 || plans.size() < 2) return;
  const std::size_t steps = route(net).step_count();
  std::vector<std::size_t> differ;  // route steps whose parts differ between the plans
  for (std::size_t s = 0; s < steps; ++s) {
    for (const split_choice& q : plans) {
      if (at(q.parts, s) != at(plans[0].parts, s) || at(q.groups, s) != at(plans[0].groups, s)) {
        differ.push_back(s);
        break;
      }
    }
  }
  if (differ.empty()) return;
  const executor_options whole = best;
  const double whole_s = choice.chosen_s(best);
  // The trials run at the configuration the weighing chose for the whole plan (its headroom,
  // workspace share, policy). Where that planned a schedule, a trial plans it at the link
  // charge and prefetch margin it took: one plan instead of five (null runs take no bound:
  // null_run_options).
  // Where none fitted (the cache alone ran), a trial runs on the cache alone without trying:
  // a failing greedy is the costliest plan of all (Inception v4 b32 at 0.95 of its max(l_i):
  // about 1 s a trial, 0.2 without). The mix kept is then planned in full below.
  executor_options trial_options = whole;
  schedule_options& so = trial_options.schedule;
  if (whole.policy.planned && !choice.reactive && choice.schedule) {
    so.link_charge = choice.schedule->link_charge;
    so.slack_copy_share = choice.schedule->slack_copy_share;
    so.link_charge_auto = so.slack_auto = false;
  } else if (whole.policy.planned && !choice.reactive) {
    so.allow_swap = so.allow_drop = false;
  }
  std::vector<int> parts = whole.split_parts, groups = whole.channel_parts;
  parts.resize(steps, 1);
  groups.resize(steps, 1);
  double best_s = whole_s;
  const auto mix_regions = [&](std::size_t regions) {
    for (std::size_t region = 0; region < regions; ++region) {
      const std::size_t first = differ.size() * region / regions;
      const std::size_t last = differ.size() * (region + 1) / regions;
      for (const split_choice& q : plans) {
        trial_options.split_parts = parts;
        trial_options.channel_parts = groups;
        bool changed = false;
        for (std::size_t i = first; i < last; ++i) {
          const std::size_t s = differ[i];
          changed = changed || parts[s] != at(q.parts, s) || groups[s] != at(q.groups, s);
          trial_options.split_parts[s] = at(q.parts, s);
          trial_options.channel_parts[s] = at(q.groups, s);
        }
        if (!changed) continue;
        const double s = null_run_seconds(net, trial_options);
        if (s <= 0 || s >= best_s) continue;
        parts = trial_options.split_parts;
        groups = trial_options.channel_parts;
        best_s = s;
      }
    }
  };
  const std::size_t finest = std::min(static_cast<std::size_t>(best.split_regions), differ.size());
  for (std::size_t regions = std::min<std::size_t>(4, finest);;
       regions = std::min(2 * regions, finest)) {
    mix_regions(regions);
    if (regions == finest) break;
  }
  // The mix, planned as the whole plan was (every link charge and margin): kept where it
  // still runs faster; the executor that keeps its schedule bounds it. What the executor then
  // runs is what this run ran: its schedule (none on the cache alone, as weigh_policy leaves
  // it), and its time where the report reads the choice's.
  if (best_s >= whole_s) return;
  executor_options mix = whole;
  mix.split_parts = parts;
  mix.channel_parts = groups;
  std::optional<memory_schedule> schedule;
  const double s = null_run_seconds(net, mix, &schedule);
  if (s <= 0 || s >= whole_s) return;
  // Only steps where the plans differ can have changed.
  const auto mixed = std::count_if(differ.begin(), differ.end(), [&](std::size_t st) {
    return parts[st] != at(whole.split_parts, st) || groups[st] != at(whole.channel_parts, st);
  });
  best = std::move(mix);
  if (!best.policy.planned) {
    choice.recompute_s = s;
  } else if (choice.reactive) {
    choice.reactive_s = s;
  } else {
    choice.all_s = s;
    choice.schedule = std::move(schedule);
  }
  choice.mixed_split_steps = static_cast<std::size_t>(mixed);
  choice.whole_split_s = whole_s;
}

}  // namespace memweave
