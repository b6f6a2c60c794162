// Pure checks: nothing is allocated, nothing is kept.
#include "engine/runtime/executor_checks.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/runtime/executor_staging.hpp"
#include "memweave/comm/communicator.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"
#include "memweave/engine/split_plan.hpp"

namespace memweave {

void check_executor_options(const executor_options& options) {
  solver_settings{options.learning_rate, options.momentum, options.weight_decay}.validate(
      "executor_options");
  // Checked for every device, though only host kernels use it.
  MEMWEAVE_EXPECTS(options.threads >= 0 && options.threads <= 4096,
                   "executor_options.threads = " + std::to_string(options.threads) +
                       ": expected 0 (every core) to 4096");
  MEMWEAVE_EXPECTS(options.prefetch_distance >= 1, "executor_options.prefetch_distance = " +
                                                       std::to_string(options.prefetch_distance) +
                                                       ": expected at least 1");
  MEMWEAVE_EXPECTS(options.offload_lag >= 1,
                   "executor_options.offload_lag = " + std::to_string(options.offload_lag) +
                       ": expected at least 1");
  MEMWEAVE_EXPECTS(std::isfinite(options.link_gbps) && options.link_gbps >= 0,
                   "executor_options.link_gbps = " + std::to_string(options.link_gbps) +
                       ": expected a finite number >= 0 (0: MEMWEAVE_HOST_LINK_GBPS)");
  MEMWEAVE_EXPECTS(options.ranks >= 0, "executor_options.ranks = " + std::to_string(options.ranks) +
                                           ": expected 0 or 1 (one process) or more");
  MEMWEAVE_EXPECTS(options.global_batch >= 0 && options.first_sample >= 0,
                   "executor_options.global_batch = " + std::to_string(options.global_batch) +
                       ", first_sample = " + std::to_string(options.first_sample) +
                       ": expected at least 0 each");
  // A budget is the heap's one arena: grown, the run would take memory past it and still
  // say it fits (and plan, whose null heap is sized the same, would disagree).
  MEMWEAVE_EXPECTS(options.budget_bytes == 0 || options.heap.grow_bytes == 0,
                   "executor_options.heap.grow_bytes = " + std::to_string(options.heap.grow_bytes) +
                       " with budget_bytes = " + std::to_string(options.budget_bytes) +
                       ": a budget is the heap's one arena and never grows; set grow_bytes 0");
  MEMWEAVE_EXPECTS(options.split_regions >= 0 && options.split_regions <= 1024,
                   "executor_options.split_regions = " + std::to_string(options.split_regions) +
                       ": expected 0 (whole plans) to 1024 (MEMWEAVE_SPLIT_REGIONS)");
  for (const double rate :
       {options.model.flops, options.model.memory_bytes_per_s, options.model.link_bytes_per_s}) {
    MEMWEAVE_EXPECTS(std::isfinite(rate) && rate > 0,
                     "executor_options.model = {" + std::to_string(options.model.flops) + ", " +
                         std::to_string(options.model.memory_bytes_per_s) + ", " +
                         std::to_string(options.model.link_bytes_per_s) +
                         "}: expected finite throughputs > 0");
  }
}

void check_data_source(const data_source& data, const network& net, const char* who) {
  const shape4 want = net[net.data_layer()].output_shape;
  const shape4 got = data.image_shape();
  MEMWEAVE_EXPECTS(
      got.c == want.c && got.h == want.h && got.w == want.w && data.classes() == net.classes(),
      std::string(who) + ": data source " + data.name() + " makes images of " +
          std::to_string(got.c) + "x" + std::to_string(got.h) + "x" + std::to_string(got.w) +
          " with " + std::to_string(data.classes()) + " classes; network " + net.name() +
          " reads " + std::to_string(want.c) + "x" + std::to_string(want.h) + "x" +
          std::to_string(want.w) + " with " + std::to_string(net.classes()) +
          " classes: make the source with the DATA layer's shape and classes");
}

void check_split_options(const network& net, const route& steps, const executor_options& options) {
  const std::size_t n = steps.step_count();
  const auto check = [&](const std::vector<int>& v, const char* field, auto most) {
    MEMWEAVE_EXPECTS(v.size() <= n, std::string("executor_options.") + field + " has " +
                                        std::to_string(v.size()) +
                                        " entries: expected at most one per route step (" +
                                        std::to_string(n) + ")");
    for (std::size_t s = 0; s < v.size(); ++s) {
      const std::int64_t hi = most(s);
      MEMWEAVE_EXPECTS(v[s] >= 1 && v[s] <= hi,
                       std::string("executor_options.") + field + "[" + std::to_string(s) +
                           "] = " + std::to_string(v[s]) + " (step " + net[steps.at(s).layer].name +
                           "): expected 1 to " + std::to_string(hi));
    }
  };
  check(options.split_parts, "split_parts", [&](std::size_t) { return net.batch(); });
  check(options.channel_parts, "channel_parts",
        [&](std::size_t s) { return splittable_channels(net[steps.at(s).layer]); });
}

std::size_t heap_block_bytes(const executor_options& options) noexcept {
  return options.heap.block_bytes != 0 ? options.heap.block_bytes : 1024;
}

namespace {

// What else runs below the step that set the floor: utp and all move the parameters too,
// and with --split (TSPLIT) run a step over the budget micro-batch by micro-batch, its
// micro-tensors in host memory, so a user below max(l_i) learns the option that fits.
std::string below_largest_step_hint(const executor_options& options, bool moves_persistent,
                                    bool split, bool bucket_step) {
  const bool any_split = std::any_of(options.split_parts.begin(), options.split_parts.end(),
                                     [](int p) { return p > 1; });
  // With data parallelism --split is refused (one device only); where the floor is a step
  // that reads a whole gradient bucket (its close or update step), smaller buckets lower it.
  const int ranks = options.comm != nullptr ? options.comm->size() : options.ranks;
  if (ranks > 1) {
    return std::string(moves_persistent ? ""
                                        : " (utp and all also move parameters to host memory)") +
           (bucket_step
                ? ", or lower MEMWEAVE_BUCKET_BYTES (" + format_bytes(options.bucket_bytes) +
                      "): with " + std::to_string(ranks) +
                      " ranks that step holds a gradient bucket's gradients until it is "
                      "reduced"
                : std::string());
  }
  if (!moves_persistent) {
    return " (utp and all also move parameters to host memory" +
           std::string(any_split ? ""
                                 : ", and with --split run a step micro-batch by micro-batch") +
           ")";
  }
  if (split || any_split) return "";
  return ", or pass --split: a step over the budget then runs micro-batch by micro-batch, its "
         "micro-tensors in host memory";
}

// Where large heap blocks are what makes the budget too small (every tensor rounded up to
// whole blocks: MEMWEAVE_BLOCK_BYTES=1GiB made a 1.5 MB network need 147 GiB), says so, with
// what 1 KiB blocks would need (`at_1k`).
std::string blocks_hint(std::size_t block, std::size_t at_1k, std::size_t minimum) {
  if (minimum <= at_1k + at_1k / 10) return {};
  return "; every tensor takes whole heap blocks of " + format_bytes(block) +
         " (MEMWEAVE_BLOCK_BYTES, executor_options::heap.block_bytes): in 1 KiB blocks it "
         "needs " +
         format_bytes(at_1k);
}

}  // namespace

void check_budget(const network& net, const route& steps, const tensor_table& table,
                  const memory_plan& plan, device& dev, const executor_options& options) {
  const bool moves_persistent = options.policy.evict_to_host;
  // The least the policy needs, each tensor rounded to whole heap blocks: the tensors of the
  // most demanding step (l_i), plus every persistent tensor where those never leave the
  // device (under utp/all they move like the others, so a step needs only its own).
  struct least {
    std::size_t persistent = 0, worst_step = 0, worst_index = 0;
    std::size_t total() const { return persistent + worst_step; }
  };
  // A fixed algorithm's workspace is taken beside its CONV step's tensors, or the step fails
  // ("the workspace of im2col_image needs 147.00 KiB" at a budget this check had passed, its
  // floor advised without it; session 43's hostile run). The host's candidates size it; on
  // cuda cuDNN's do, once measured.
  const std::vector<std::size_t> workspace =
      options.conv_ws.mode == conv_ws_mode::fixed && dev.kind() != device_kind::cuda
          ? promised_workspace_bytes(table, options.conv_ws)
          : std::vector<std::size_t>{};
  // A policy that neither moves nor drops a tensor (baseline, liveness) holds every tensor
  // its plan keeps live at a step there at once: its least is the most of those (liveness's
  // peak), not one step's own tensors (ResNet-50 b64's liveness was told 783 MiB and needs
  // 5.27 GiB; session 44).
  const bool holds_live = !options.policy.moves_tensors() && !options.policy.recompute;
  // What is born and dies at each step: the plan's lists; an evaluation frees each tensor
  // after its last forward reader (executor::evaluate), and workspaces are left out there
  // (a lower bound), so its lists are made here.
  std::vector<std::vector<tensor_id>> eval_born, eval_dies;
  if (holds_live && options.evaluation_only) {
    const std::size_t layers = steps.layer_count();
    eval_born.assign(layers, {});
    eval_dies.assign(layers, {});
    std::vector<std::size_t> first(table.size(), layers), last(table.size(), 0);
    for (std::size_t s = 0; s < layers; ++s) {
      for (const auto& a : table.accesses(s)) {
        first[a.tensor] = std::min(first[a.tensor], s);
        last[a.tensor] = s;
      }
    }
    for (tensor_id t = 0; t < table.size(); ++t) {
      if (first[t] == layers || table[t].persistent || table[t].role == tensor_role::workspace) {
        continue;
      }
      eval_born[first[t]].push_back(t);
      eval_dies[last[t]].push_back(t);
    }
  }
  const auto born = [&](std::size_t s) -> const std::vector<tensor_id>& {
    return options.evaluation_only ? eval_born[s] : plan.steps[s].allocate;
  };
  const auto dies = [&](std::size_t s) -> const std::vector<tensor_id>& {
    return options.evaluation_only ? eval_dies[s] : plan.steps[s].free;
  };
  const auto least_at = [&](std::size_t block) {
    auto rounded = [block](std::size_t b) { return (b + block - 1) / block * block; };
    least l;
    if (!moves_persistent) {
      for (tensor_id t : plan.persistent) l.persistent += rounded(table[t].bytes);
    }
    const std::size_t checked = options.evaluation_only ? steps.layer_count() : table.step_count();
    std::size_t live = 0;  // holds_live: the transient tensors live at the step, rounded
    for (std::size_t s = 0; s < checked; ++s) {
      std::size_t b = 0;
      const bool staged = !holds_live && staged_split_step(options, net, steps, s);
      if (holds_live) {
        // Everything the plan keeps live at the step is on the device with it.
        for (tensor_id t : born(s)) live += rounded(table[t].bytes);
        b = live;
        for (tensor_id t : dies(s)) live -= rounded(table[t].bytes);
      } else if (staged) {
        // TSPLIT: its micro-step (its micro-tensors' slices for the largest micro-batch, and
        // its other tensors whole).
        b = micro_step_bytes(table, s, batch_parts_of(options, s), block,
                             channel_groups_of(options, net, steps, s));
      } else {
        for (const auto& a : table.accesses(s)) {
          if (moves_persistent || !table[a.tensor].persistent) {
            b += rounded(table[a.tensor].bytes);
          }
        }
      }
      if (!staged && s < workspace.size()) b += rounded(workspace[s]);
      if (b > l.worst_step) l.worst_step = b, l.worst_index = s;
    }
    return l;
  };
  const std::size_t block = heap_block_bytes(options);
  const least at_block = least_at(block);
  const std::size_t persistent = at_block.persistent, worst_step = at_block.worst_step,
                    worst_index = at_block.worst_index;
  const std::size_t minimum = at_block.total();
  const memory_info mem = dev.memory();
  if (options.budget_bytes != 0) {
    if (options.budget_bytes > mem.free_bytes) {
      throw invalid_argument("budget " + format_bytes(options.budget_bytes) +
                             " exceeds the device's free memory " + format_bytes(mem.free_bytes) +
                             " (" + dev.name() +
                             "); lower --budget, or raise MEMWEAVE_DEVICE_BYTES on host/null");
    }
    if (options.budget_bytes < minimum) {
      const route_step rs = steps.at(worst_index);
      const bool split = staged_split_step(options, net, steps, worst_index);
      const auto groups_text = [&](std::size_t s) {
        const int g = channel_groups_of(options, net, steps, s);
        return g > 1 ? " of " + std::to_string(g) + " output-channel groups" : std::string();
      };
      const std::string step =
          (split ? std::string("the micro-step of step ")
                 : std::string(holds_live ? "the tensors live" : "the tensors") +
                       (worst_index < workspace.size() && workspace[worst_index] != 0
                            ? " and the " + options.conv_ws.mode_name() + " workspace of step "
                        : holds_live ? " at step "
                                     : " of step ")) +
          std::to_string(worst_index + 1) + " (" + net[rs.layer].name + " " +
          to_string(rs.direction) +
          (split ? ", in " + std::to_string(batch_parts_of(options, worst_index)) +
                       " micro-batches" + groups_text(worst_index)
                 : "") +
          ") ";
      const auto [budget_text, minimum_text] = format_bytes_apart(options.budget_bytes, minimum);
      throw budget_too_small(
          "budget " + budget_text + " is below what policy " + options.policy.name + " can " +
          (options.evaluation_only ? "evaluate " : "run ") + net.name() + " at batch " +
          std::to_string(net.batch()) + " with: " +
          (moves_persistent ? step + "(parameters and state included) " + minimum_text
                            : "parameters and state " + format_bytes(persistent) +
                                  " (as the heap rounds them) plus " + step +
                                  format_bytes(worst_step) + " = " + minimum_text) +
          "; raise --budget to at least that, or lower " + options.shape_knobs +
          (block > 1024 ? blocks_hint(block, least_at(1024).total(), minimum) : std::string()) +
          below_largest_step_hint(options, moves_persistent, split,
                                  std::any_of(table.buckets().begin(), table.buckets().end(),
                                              [&](const gradient_bucket& b) {
                                                return b.close_step == worst_index ||
                                                       b.update_step == worst_index;
                                              })) +
          // The least is one step's tensors; the heap must also find them room among what
          // else is live then (all of it, for a policy that cannot evict), so a run at it
          // may still not fit: the search says what does (session 44).
          (options.evaluation_only
               ? std::string()
               : ". That is a lower bound: `memweave plan` with the same options and "
                 "--min-budget instead of --budget finds the smallest budget that runs"));
    }
  }
}

}  // namespace memweave
