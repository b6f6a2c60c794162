// The planner sees every cached tensor by id with its heap-rounded bytes and the steps using
// it; persistent tensors stay pinned between their uses (moving them would change where the
// next iteration finds them; the reactive cache still may), but may be parked on the host
// across the iteration's end: they leave after their last use and are back for their first,
// so every iteration starts with the same ones away (the executor parks them before the
// first). A layer's output can be rebuilt by replaying its
// layer's forward (a CONV too: its replay runs the algorithm its forward step ran, so the
// bits are the same), touching what that forward touches. Times are the cost model's; a
// CONV step is charged the fastest of the model's algorithms whose workspace fits a share of
// the budget, and that workspace is reserved at the step. Which share is best depends on the
// network (VGG16's large convolutions gain most from large workspaces, which the deepest
// networks cannot afford at a third of their peak): the iteration is planned with a
// sixteenth, a quarter and all of the budget, and the fastest predicted plan that fits wins
// (unless schedule_options::workspace_share names one: executor::weigh_policy runs each).
// So with the share of link time a hidden swap is charged (schedule_options::link_charge):
// unless the user fixed it, each problem is planned with it, twice and four times it. A low
// charge swaps more, which pays where the link has room (ResNet-50 at a third of its peak); a
// high one drops less (DenseNet-121, whose many cheap replays the link could have carried).
// And with the prefetch margin, at the charge chosen: unless the user fixed a slack, also with
// prefetches placed to land half and all of their own copy time early.
// Measured step times (Capuchin) replace the model's where given.
#include "engine/runtime/schedule_inputs.hpp"

#include <algorithm>
#include <vector>

#include "engine/runtime/conv_selection.hpp"
#include "engine/runtime/model_time.hpp"

namespace memweave {
namespace k = kernels::host;
namespace {

// The step's one option where in.conv_mode names an algorithm per pass (not dynamic): that
// algorithm's time, its workspace whole, as the run takes it whatever the share. None where
// a pass lacks it (a fixed name the host's candidates do not have: cuDNN's).
std::optional<step_option> mode_option(const schedule_inputs& in, const network& net,
                                       const layer& l, bool forward,
                                       const std::vector<std::vector<conv_candidate>>& passes) {
  if (in.conv_mode == nullptr || in.conv_mode->mode == conv_ws_mode::dynamic) return std::nullopt;
  double compute = 0;
  std::size_t workspace = 0;
  for (const auto& candidates : passes) {
    const conv_candidate* pick = pick_conv_candidate(*in.conv_mode, candidates, 0);
    if (pick == nullptr) return std::nullopt;
    compute += pick->seconds;
    workspace = std::max(workspace, pick->workspace_bytes);
  }
  return step_option{model_seconds(in.model, net, *in.memory, l, forward, compute),
                     in.heap->round_up(workspace)};
}

schedule_problem make_problem(const schedule_inputs& in, std::size_t workspace_share) {
  const network& net = *in.net;
  const route& path = *in.steps;
  const tensor_table& table = *in.table;
  const std::size_t steps = path.step_count();
  schedule_problem p;
  p.budget_bytes = in.budget_bytes;
  p.link_bytes_per_s = in.link_bytes_per_s;
  p.device_bytes_per_s = in.model.memory_bytes_per_s;
  p.copy_latency_s = in.copy_latency_s;
  p.step_seconds.assign(steps, 0.0);
  p.step_options.resize(steps);
  p.timing_options.resize(steps);
  // Per step, the model's time of what a measured time replaces: the step, or for a CONV with
  // options its fastest algorithm within the whole budget (below).
  std::vector<double> measured_as(steps, 0.0);
  const auto staged_at = [&](std::size_t s) {
    return s < in.staged.size() && !in.staged[s].empty();
  };
  for (std::size_t s = 0; s < steps; ++s) {
    if (!table.has_work(s)) continue;
    const route_step rs = path.at(s);
    const layer& l = net[rs.layer];
    const bool forward = rs.direction == pass::forward;
    // A staged step's micro-steps lose what smaller kernels lose (model_seconds for the rest);
    // its convolution takes a workspace from what is free then (not planned for).
    const int parts = staged_at(s) && s < in.split_parts.size() ? in.split_parts[s] : 1;
    p.step_seconds[s] = measured_as[s] =
        split_model_seconds(in.model, table, *in.memory, l, forward, table.accesses(s), parts, 1);
    if (staged_at(s)) continue;
    if (l.type != layer_type::conv) continue;
    // A CONV's options: for each workspace size some algorithm takes, the fastest algorithms
    // of its passes within it (as workspace selection picks them with that much free).
    const auto& cp = std::get<conv_params>(l.params);
    const shape4& x = net[l.inputs[0]].output_shape;
    std::vector<std::vector<conv_candidate>> passes;
    passes.push_back(model_host_conv(
        forward ? k::conv_pass::forward : k::conv_pass::backward_filter, x, cp, in.model.flops));
    if (!forward && table.of(l.inputs[0]).output_grad != invalid_tensor) {
      passes.push_back(model_host_conv(k::conv_pass::backward_data, x, cp, in.model.flops));
    }
    if (const auto o = mode_option(in, net, l, forward, passes)) {
      p.step_options[s] = {*o};
      p.step_seconds[s] = measured_as[s] = o->seconds;
      continue;
    }
    std::vector<std::size_t> caps;
    for (const auto& candidates : passes) {
      for (const conv_candidate& c : candidates) caps.push_back(c.workspace_bytes);
    }
    std::sort(caps.begin(), caps.end(), std::greater<>());
    caps.erase(std::unique(caps.begin(), caps.end()), caps.end());
    // Per cap, the fastest algorithms of the passes within it; fastest first, each one slower
    // with less workspace than the one before.
    std::vector<step_option> all;
    std::vector<std::size_t> unrounded;  // each option's workspace, before the heap rounds it
    for (std::size_t cap : caps) {
      double compute = 0;
      std::size_t workspace = 0;
      for (const auto& candidates : passes) {
        const conv_candidate* best = nullptr;
        for (const conv_candidate& c : candidates) {
          if (c.workspace_bytes <= cap && (!best || c.seconds < best->seconds)) best = &c;
        }
        if (best == nullptr) continue;
        compute += best->seconds;
        workspace = std::max(workspace, best->workspace_bytes);
      }
      const step_option o{model_seconds(in.model, net, *in.memory, l, forward, compute),
                          in.heap->round_up(workspace)};
      if (all.empty() || o.extra_bytes < all.back().extra_bytes) {
        if (!all.empty() && o.seconds <= all.back().seconds) all.pop_back(), unrounded.pop_back();
        all.push_back(o);
        unrounded.push_back(workspace);
      }
    }
    // Workspaces beyond the share are not planned for; the step still takes a larger one when
    // that much is free, and the timeline counts it (timing_options).
    auto& options = p.step_options[s];
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (unrounded[i] <= in.budget_bytes / workspace_share) options.push_back(all[i]);
    }
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (unrounded[i] <= in.budget_bytes) {
        measured_as[s] = all[i].seconds;
        break;
      }
    }
    if (options.size() < all.size()) p.timing_options[s] = std::move(all);
    p.step_seconds[s] = options.empty() ? p.step_seconds[s] : options.front().seconds;
  }
  const std::size_t n = table.size();
  p.tensors.resize(n);
  for (std::size_t s = 0; s < steps; ++s) {
    for (const auto& a : table.accesses(s)) {
      if (!in.in_cache(a.tensor)) continue;
      auto& uses = p.tensors[a.tensor].uses;
      const bool writes = a.mode != access_mode::read;
      if (!uses.empty() && uses.back().step == s) {
        uses.back().writes = uses.back().writes || writes;
      } else {
        uses.push_back({static_cast<std::uint32_t>(s), writes});
      }
    }
    if (!staged_at(s)) continue;
    for (std::size_t i = 0; i < in.staged[s].size(); ++i) {
      schedule_use& u = p.tensors[in.staged[s][i].tensor].uses.back();
      u.on_host = true;
      u.slice_bytes = in.staged_slice_bytes[s][i];
      u.staged_seconds = static_cast<double>(in.staged_copy_bytes[s][i]) / in.link_bytes_per_s;
      const tensor_id t = in.staged[s][i].tensor;
      p.tensors[t].staged_fp16 = t < in.staged_fp16.size() && in.staged_fp16[t];
    }
  }
  // A mode that names its algorithm (fixed, max, none) runs it whatever workspace the plan
  // leaves the step: each of the step's options takes the measured time.
  const bool one_algorithm = in.conv_run != nullptr && in.conv_run->mode != conv_ws_mode::dynamic;
  for (std::size_t s = 0; s < steps && s < in.measured_seconds.size(); ++s) {
    const double measured = in.measured_seconds[s];
    if (measured < 0 || !table.has_work(s)) continue;
    if (one_algorithm) {
      p.step_seconds[s] = measured;
      for (step_option& o : p.step_options[s]) o.seconds = measured;
      for (step_option& o : p.timing_options[s]) o.seconds = measured;
      continue;
    }
    // The device ran the step this much faster or slower than modelled: its other ways of
    // running (a CONV's algorithms under dynamic selection) are taken to differ by the same
    // ratio. The measured time stands for its fastest within the whole budget (what selection
    // takes with room), in every workspace share's problem alike: scaled to each share's own
    // fastest instead, a small share's larger workspaces (timing_options) ran faster than the
    // step's fastest way in share 1's problem, on which the lower bound is taken.
    const double ratio = measured_as[s] > 0 ? measured / measured_as[s] : 1.0;
    p.step_seconds[s] = p.step_seconds[s] == measured_as[s] ? measured : p.step_seconds[s] * ratio;
    for (step_option& o : p.step_options[s]) o.seconds *= ratio;
    for (step_option& o : p.timing_options[s]) o.seconds *= ratio;
  }
  const std::vector<bool> bn_input = bn_input_tensors(net, table);
  for (const layer_id conv : in.fused_conv) {
    if (conv != invalid_layer) p.tensors[table.of(conv).output].fused_away = true;
  }
  for (tensor_id t = 0; t < n; ++t) {
    schedule_tensor& x = p.tensors[t];
    if (!in.in_cache(t)) continue;
    x.bytes = in.heap->round_up(table[t].bytes);
    x.copy_bytes = table[t].bytes;
    x.persistent = table[t].persistent;
    // Data parallelism: a bucket's gradients stay put while the communicator reduces them.
    const bool bucket =
        !table.buckets().empty() && table[t].role == tensor_role::parameter_gradient;
    x.pinned = x.persistent || bucket;
    // Parked, a small tensor frees little, and its prefetch puts a small block in the arena
    // between transient ones: ResNet-50 at a third of its peak parked 42 BN parameters and
    // momenta (1.63 MiB in all), fragmenting the heap into 438 safety-net evictions (0.90 ->
    // 0.80 of liveness's speed). Only tensors of at least 1/128 of the budget park.
    x.parkable = x.persistent && !bucket && x.bytes >= in.budget_bytes / 128;
    // Every tensor of the engine is fp32: each may travel as fp16 when compression is asked,
    // but BN's saved statistics: a saved mean rounded to fp16 (2^-11 of the mean) is off by
    // many standard deviations where the mean is large against them, and backward (and a
    // fused replay) subtract it from every input; nor a parked parameter or momentum, which
    // would be rounded every iteration, its error adding up over training.
    x.compressible = x.bytes % sizeof(float) == 0 && table[t].bytes % sizeof(float) == 0 &&
                     table[t].role != tensor_role::auxiliary && !x.persistent && !bn_input[t];
    if (!rebuildable(net, table, t)) continue;
    // A fused replay runs BN's forward pass over x with the ACT applied as it writes: the
    // traffic of BN's forward (x in, one tensor out), touching what that forward touches.
    const layer_id fused = t < in.fused.size() ? in.fused[t] : invalid_layer;
    const std::size_t producer = path.position(fused != invalid_layer ? fused : table[t].owner);
    // A staged producer would replay staged, leaving it in host memory, not where the plan
    // rebuilt it.
    if (staged_at(producer)) continue;
    x.rebuildable = true;
    // Its replay runs what the forward step ran: charged at the fastest (an estimate).
    x.rebuild_seconds = p.step_seconds[producer];
    // The executor replays a CONV+ACT in one (the CONV's forward writing the ACT's output),
    // which the plan prices as the two replays; alone, the CONV may take less time than the
    // ACT (a first layer over few channels moves less than the ACT's two tensors).
    // The bound charges the least of those, each step at its fastest option.
    const auto fastest = [&](std::size_t s) {
      return p.step_options[s].empty() ? p.step_seconds[s] : p.step_options[s].front().seconds;
    };
    x.least_rebuild_seconds = std::min(x.rebuild_seconds, fastest(producer));
    const layer_id conv = t < in.fused_conv.size() ? in.fused_conv[t] : invalid_layer;
    if (conv != invalid_layer && !staged_at(path.position(conv))) {
      x.least_rebuild_seconds = std::min(x.least_rebuild_seconds, fastest(path.position(conv)));
    }
    for (const auto& a : table.accesses(producer)) {
      const bool skipped = fused != invalid_layer && a.tensor == table.of(fused).output;
      if (a.tensor != t && !skipped && in.in_cache(a.tensor)) x.rebuild_touches.push_back(a.tensor);
    }
  }
  return p;
}

}  // namespace

std::vector<layer_id> fused_bn_act_sources(const network& net, const tensor_table& table,
                                           const route& path, bool conv) {
  std::vector<layer_id> source(table.size(), invalid_layer);
  // Per tensor: how many steps touch it.
  std::vector<std::uint32_t> steps_touching(table.size(), 0);
  for (std::size_t s = 0; s < path.step_count(); ++s) {
    for (const auto& a : table.accesses(s)) ++steps_touching[a.tensor];
  }
  for (layer_id id = 0; id < net.size(); ++id) {
    const layer& act = net[id];
    if (act.type != layer_type::act || act.inputs.size() != 1) continue;
    const layer& src = net[act.inputs[0]];
    if (src.type != layer_type::bn && !(conv && src.type == layer_type::conv)) continue;
    const tensor_id y = table.of(src.id).output, z = table.of(act.id).output;
    if (y == invalid_tensor || z == invalid_tensor || y == z || table[y].persistent) continue;
    // The source's forward writes y and ACT's forward reads it: no other step may touch it.
    if (steps_touching[y] != 2 || !rebuildable(net, table, z)) continue;
    source[z] = src.id;
  }
  return source;
}

// BN's inputs: backward subtracts the mean from each, which cancels where the mean is large
// against the spread, so an input rounded to fp16 (2^-11 of itself) is off by many of its
// standard deviations there, as a rounded saved mean would be.
std::vector<bool> bn_input_tensors(const network& net, const tensor_table& table) {
  std::vector<bool> bn_input(table.size(), false);
  for (layer_id id = 0; id < net.size(); ++id) {
    if (net[id].type != layer_type::bn) continue;
    for (layer_id in_layer : net[id].inputs) {
      const tensor_id x = table.of(in_layer).output;
      if (x != invalid_tensor) bn_input[x] = true;
    }
  }
  return bn_input;
}

bool rebuildable(const network& net, const tensor_table& table, tensor_id t) {
  const tensor_info& i = table[t];
  if (i.persistent || i.role != tensor_role::data || i.owner == invalid_layer) return false;
  const layer& l = net[i.owner];
  return l.type != layer_type::data && l.type != layer_type::softmax_loss &&
         table.of(l.id).output == t;
}

namespace {

std::optional<memory_schedule> plan_fitting(schedule_problem p, const schedule_options& options,
                                            const std::function<bool()>& stop) {
  // A step whose untouchable bytes exceed the budget (the parameters of a deep network pinned
  // between their uses, each too small to park) corners the greedy at every attempt below:
  // none is made (a 2116-layer ResNet at half its peak planned for 7 s to no schedule).
  if (memory_schedule_cannot_fit(p, options)) return std::nullopt;
  memory_schedule planned = plan_memory_schedule(p, options, stop);
  planned.headroom = options.headroom;
  if (!planned.fits) {
    // The greedy choice can corner itself (a step left with nothing idle): plan again with
    // swaps charged only for their stalls, which moves more and drops less.
    schedule_options free_link = options;
    free_link.link_charge = 0;
    planned = plan_memory_schedule(p, free_link, stop);
    planned.headroom = options.headroom;
  }
  if (!planned.fits) {
    // Near max(l_i) a step's own tensors fill the budget: plan again without reserving
    // workspaces or headroom (dynamic selection then takes what is free).
    schedule_options tight = options;
    tight.headroom = 0;
    p.step_options.clear();
    planned = plan_memory_schedule(p, tight, stop);
    planned.headroom = 0;  // reported as such: MEMWEAVE_SCHEDULE_HEADROOM=0.9 read as applied
  }
  // A schedule that still cannot bring every step under the budget would leave the reactive
  // cache to work around a half-done plan: there the cache alone does better, as the floor
  // tests hold it to.
  if (!planned.fits) return std::nullopt;
  return planned;
}

std::optional<memory_schedule> plan_once(const schedule_problem& p, const schedule_options& options,
                                         const std::function<bool()>& stop) {
  std::optional<memory_schedule> planned = plan_fitting(p, options, stop);
  if (planned || options.chain_room) return planned;
  // Drops whose rebuild chains put the step of the rebuild over the budget can leave a step
  // that nothing can relieve (VGG16 and ResNet-50 at a budget below max(l_i), their steps
  // staged): plan again weighing only chains that leave room there. Not first: where the
  // plain greedy fits, the chains it takes pay (VGG16 b64 at a third of its peak: 0.904 of
  // liveness's speed, 0.837 when every chain must leave room).
  schedule_options roomy = options;
  roomy.chain_room = true;
  return plan_fitting(p, roomy, stop);
}

// The fastest predicted plan over the link charges tried, then over the prefetch margins tried
// at the charge chosen (the first wins ties).
std::optional<memory_schedule> plan_problem(const schedule_problem& p,
                                            const schedule_options& options,
                                            const std::function<bool()>& stop) {
  std::optional<memory_schedule> best;
  schedule_options chosen = options;
  auto keep_if_faster = [&](const schedule_options& o) {
    std::optional<memory_schedule> planned = plan_once(p, o, stop);
    if (planned && (!best || planned->predicted_seconds < best->predicted_seconds)) {
      best = std::move(planned);
      best->link_charge = o.link_charge;
      best->slack_copy_share = o.slack_copy_share;
      chosen = o;
    }
  };
  for (const double factor : {1.0, 2.0, 4.0}) {
    if (factor != 1.0 && !options.link_charge_auto) break;
    schedule_options o = options;
    o.link_charge = options.link_charge * factor;
    keep_if_faster(o);
    // Where the first charge cannot fit, it replanned with no charge at all: higher charges,
    // which move less, do not fit either.
    if (!best) return best;
  }
  // A prefetch placed to land a share of its copy time early leaves room for a run that
  // differs from the model (ResNet-50 at a third of its peak: 0.801 -> 0.830 of liveness's
  // speed with a whole copy time); how much pays depends on the problem.
  if (options.slack_auto) {
    const schedule_options at_charge = chosen;
    for (const double share : {0.5, 1.0}) {
      schedule_options o = at_charge;
      o.slack_copy_share = share;
      keep_if_faster(o);
    }
  }
  return best;
}

}  // namespace

std::optional<memory_schedule> plan_executor_schedule(const schedule_inputs& in,
                                                      const schedule_options& options) {
  auto same_options = [](const schedule_problem& a, const schedule_problem& b) {
    if (a.step_options.size() != b.step_options.size()) return false;
    for (std::size_t s = 0; s < a.step_options.size(); ++s) {
      const auto &x = a.step_options[s], &y = b.step_options[s];
      if (x.size() != y.size()) return false;
      for (std::size_t i = 0; i < x.size(); ++i) {
        if (x[i].seconds != y[i].seconds || x[i].extra_bytes != y[i].extra_bytes) return false;
      }
    }
    return true;
  };
  std::optional<memory_schedule> best;
  std::optional<schedule_problem> previous;
  for (std::size_t share : {16, 4, 1}) {
    if (options.workspace_share != 0 && share != options.workspace_share) continue;
    schedule_problem p = make_problem(in, share);
    // A larger share that opens no larger workspace is the same problem again.
    if (previous && same_options(*previous, p)) continue;
    previous = p;
    std::optional<memory_schedule> planned = plan_problem(p, options, in.stop);
    // Where even the smallest reservation cannot fit (near the floor), larger ones, which
    // start every CONV at a larger workspace, do not either: not worth planning.
    if (!planned && share == 16 && options.workspace_share == 0) return std::nullopt;
    // Ties go to the smaller reservation (more left for what the model did not foresee).
    if (planned && (!best || planned->predicted_seconds < best->predicted_seconds)) {
      best = std::move(planned);
    }
  }
  // How far the plan is from the best possible.
  if (best && options.bound) best->bound_seconds = bound_executor_schedule(in);
  return best;
}

// On share 1's problem, whose steps may take every workspace the budget allows.
double bound_executor_schedule(const schedule_inputs& in) {
  return bound_memory_schedule(make_problem(in, 1)).seconds;
}

}  // namespace memweave
