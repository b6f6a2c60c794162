// TSPLIT's first-stage planner; see split_plan.hpp. Pure arithmetic over the tensor table.
#include "memweave/engine/split_plan.hpp"

#include <algorithm>
#include <string>

#include "engine/layers/layer_step.hpp"
#include "engine/runtime/conv_selection.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"

namespace memweave {

namespace {

std::size_t round_up(std::size_t b, std::size_t block) {
  return (b + block - 1) / block * block;
}

std::int64_t batch_of(const tensor_table& table) {
  const network& net = table.net();
  return net[net.data_layer()].output_shape.n;
}

}  // namespace

bool batch_shaped(const tensor_info& t, std::int64_t batch) noexcept {
  return batch > 1 && t.shape.n == batch &&
         (t.role == tensor_role::data || t.role == tensor_role::gradient ||
          t.role == tensor_role::auxiliary);
}

bool channel_cut(const tensor_info& t, const layer& l) noexcept {
  return t.owner == l.id && t.role != tensor_role::auxiliary && t.role != tensor_role::workspace;
}

std::int64_t largest_micro_batch(std::int64_t batch, int parts) noexcept {
  const std::int64_t k = std::clamp<std::int64_t>(parts, 1, std::max<std::int64_t>(batch, 1));
  return (batch + k - 1) / k;
}

std::int64_t splittable_channels(const layer& l) noexcept {
  if (l.type == layer_type::fc) return l.output_shape.c;
  if (l.type == layer_type::conv && std::get<conv_params>(l.params).groups == 1)
    return l.output_shape.c;
  return 1;
}

std::size_t micro_step_bytes(const tensor_table& table, std::size_t s, int parts,
                             std::size_t block_bytes, int channel_parts) {
  return micro_step_bytes(table, table.net()[table.steps().at(s).layer], table.accesses(s), parts,
                          block_bytes, channel_parts);
}

std::size_t micro_step_bytes(const tensor_table& table, const layer& l,
                             std::span<const tensor_access> accesses, int parts,
                             std::size_t block_bytes, int channel_parts) {
  const std::int64_t batch = batch_of(table);
  const std::int64_t images = largest_micro_batch(batch, parts);
  const std::int64_t K = splittable_channels(l);
  const std::int64_t c = std::clamp<std::int64_t>(channel_parts, 1, K);
  const std::int64_t channels = (K + c - 1) / c;  // the largest channel group
  std::size_t bytes = 0;
  for (const tensor_access& a : accesses) {
    const tensor_info& t = table[a.tensor];
    if (t.role == tensor_role::workspace) continue;  // not in l_i either (layer_memory.hpp)
    std::size_t b = t.bytes;
    if (batch_shaped(t, batch))
      b = b / static_cast<std::size_t>(batch) * static_cast<std::size_t>(images);
    if (c > 1 && channel_cut(t, l))
      b = b / static_cast<std::size_t>(K) * static_cast<std::size_t>(channels);
    bytes += round_up(b, block_bytes);
  }
  return bytes;
}

double micro_steps_seconds(const cost_model& model, double compute_s, std::size_t micro_bytes,
                           std::int64_t micro_steps) noexcept {
  const auto k = static_cast<double>(std::max<std::int64_t>(micro_steps, 1));
  return k * std::max(compute_s / k, static_cast<double>(micro_bytes) / model.memory_bytes_per_s);
}

std::vector<int> split_plan::parts(std::size_t step_count) const {
  std::vector<int> p(step_count, 1);
  for (const split_step& s : steps) {
    if (s.step < step_count) p[s.step] = s.parts;
  }
  return p;
}

std::vector<int> split_plan::channel_parts(std::size_t step_count) const {
  std::vector<int> p(step_count, 1);
  for (const split_step& s : steps) {
    if (s.step < step_count) p[s.step] = s.channel_parts;
  }
  return p;
}

std::size_t split_plan::split_count() const noexcept {
  return static_cast<std::size_t>(
      std::count_if(steps.begin(), steps.end(), [](const split_step& s) { return s.parts > 1; }));
}

std::size_t split_plan::channel_split_count() const noexcept {
  return static_cast<std::size_t>(std::count_if(
      steps.begin(), steps.end(), [](const split_step& s) { return s.channel_parts > 1; }));
}

double split_plan::whole_seconds() const noexcept {
  double t = 0;
  for (const split_step& s : steps) t += s.whole_s;
  return t;
}

double split_plan::split_seconds() const noexcept {
  double t = 0;
  for (const split_step& s : steps) t += s.split_s;
  return t;
}

double split_plan::link_seconds() const noexcept {
  double t = 0;
  for (const split_step& s : steps) t += s.link_s;
  return t;
}

std::vector<std::size_t> promised_workspace_bytes(const tensor_table& table,
                                                  const conv_ws_options& conv_ws) {
  std::vector<std::size_t> bytes(table.step_count(), 0);
  if (conv_ws.mode != conv_ws_mode::fixed && conv_ws.mode != conv_ws_mode::max) return bytes;
  const network& net = table.net();
  const route& r = table.steps();
  for (std::size_t s = 0; s < table.step_count(); ++s) {
    const layer& l = net[r.at(s).layer];
    if (l.type != layer_type::conv || !table.has_work(s)) continue;
    const auto& p = std::get<conv_params>(l.params);
    const shape4& in = net[l.inputs[0]].output_shape;
    // The passes the step runs, as kernel_launcher::choose_conv picks them.
    std::vector<kernels::host::conv_pass> passes;
    if (r.at(s).direction == pass::forward) {
      passes.push_back(kernels::host::conv_pass::forward);
    } else {
      passes.push_back(kernels::host::conv_pass::backward_filter);
      if (table.of(l.inputs[0]).output_grad != invalid_tensor) {
        passes.push_back(kernels::host::conv_pass::backward_data);
      }
    }
    for (const kernels::host::conv_pass k : passes) {
      const std::vector<conv_candidate> candidates = host_conv_candidates(k, in, p);
      check_fixed_algorithm(conv_ws, candidates, l.name, "host ");
      for (const conv_candidate& c : candidates) {
        if (conv_ws.mode == conv_ws_mode::max || c.algorithm == conv_ws.fixed_algorithm) {
          bytes[s] = std::max(bytes[s], c.workspace_bytes);
        }
      }
    }
  }
  return bytes;
}

split_plan plan_splits(const network& net, const tensor_table& table, const layer_memory& memory,
                       const cost_model& model, std::size_t budget_bytes, std::size_t block_bytes,
                       const char* knob, bool channel_splits, bool forward_only,
                       std::span<const std::size_t> workspace_bytes) {
  MEMWEAVE_EXPECTS(block_bytes > 0, "plan_splits: block_bytes is 0; expected a positive size");
  const std::int64_t batch = batch_of(table);
  const route& r = table.steps();
  split_plan plan;
  plan.budget_bytes = budget_bytes;
  const std::size_t steps = forward_only ? r.layer_count() : table.step_count();
  for (std::size_t s = 0; s < steps; ++s) {
    if (table.accesses(s).empty()) continue;
    const route_step rs = r.at(s);
    const layer& l = net[rs.layer];
    split_step st;
    st.step = s;
    st.layer = l.id;
    st.forward = rs.direction == pass::forward;
    std::size_t reads = 0, writes = 0;
    for (const tensor_access& a : table.accesses(s)) {
      const tensor_info& t = table[a.tensor];
      if (t.role == tensor_role::workspace) continue;
      if (batch_shaped(t, batch)) {
        st.batch_bytes += round_up(t.bytes, block_bytes);
        (a.mode == access_mode::read ? reads : writes) += t.bytes;
      } else {
        st.fixed_bytes += round_up(t.bytes, block_bytes);
      }
    }
    // max(l_i) as the heap sees it: each tensor rounded to blocks (as executor_checks).
    plan.max_layer_bytes =
        std::max(plan.max_layer_bytes, micro_step_bytes(table, s, 1, block_bytes));
    // A promised workspace is taken whole beside every micro-step (not in l_i).
    if (s < workspace_bytes.size()) st.workspace_bytes = round_up(workspace_bytes[s], block_bytes);
    const auto micro_bytes = [&](int parts, int channel_parts) {
      return micro_step_bytes(table, s, parts, block_bytes, channel_parts) + st.workspace_bytes;
    };
    const int images = static_cast<int>(std::max<std::int64_t>(batch, 1));
    const int channels = channel_splits ? static_cast<int>(splittable_channels(l)) : 1;
    st.least_bytes = micro_bytes(images, channels);
    if (st.least_bytes > plan.floor_bytes) {
      plan.floor_bytes = st.least_bytes;
      plan.floor_step = s;
    }
    if (st.least_bytes > budget_bytes) {
      st.parts = 0;  // reported once every step's floor is known
      plan.steps.push_back(st);
      continue;
    }
    // The fewest channel groups that fit at one image per micro-batch (1 where one image
    // fits whole), then the fewest micro-batches at those groups: micro_step_bytes falls as
    // either grows, so bisect.
    const auto fewest = [budget_bytes](std::int64_t hi, const auto& bytes_at) {
      std::int64_t lo = 1;
      while (lo < hi) {
        const std::int64_t mid = lo + (hi - lo) / 2;
        if (bytes_at(static_cast<int>(mid)) <= budget_bytes) {
          hi = mid;
        } else {
          lo = mid + 1;
        }
      }
      return static_cast<int>(hi);
    };
    st.channel_parts = fewest(channels, [&](int c) { return micro_bytes(images, c); });
    st.parts = fewest(images, [&](int k) { return micro_bytes(k, st.channel_parts); });
    st.micro_bytes = micro_bytes(st.parts, st.channel_parts);
    std::vector<shape4> in;
    for (layer_id i : l.inputs) in.push_back(net[i].output_shape);
    const double flops = st.forward ? layers::forward_flops(l, in) : layers::backward_flops(l, in);
    const double whole_bytes = static_cast<double>(st.fixed_bytes + st.batch_bytes);
    st.whole_s = std::max(flops / model.flops, whole_bytes / model.memory_bytes_per_s);
    st.split_s = st.whole_s;
    if (st.parts > 1 || st.channel_parts > 1) {
      const double k = st.parts, c = st.channel_parts;
      st.split_s =
          micro_steps_seconds(model, flops / model.flops, st.micro_bytes - st.workspace_bytes,
                              std::int64_t{st.parts} * st.channel_parts);
      // BN's inputs are read by both passes (statistics, then normalisation).
      const double passes = l.type == layer_type::bn ? 2.0 : 1.0;
      st.link_s = (static_cast<double>(reads) * passes + static_cast<double>(writes)) * (k - 1) /
                  k / model.link_bytes_per_s;
      // The weight slices (and their gradients and momenta) not resident come over the link
      // once per micro-batch.
      st.link_s += static_cast<double>(st.fixed_bytes) * (c - 1) / c * k / model.link_bytes_per_s;
    }
    plan.steps.push_back(st);
  }
  if (plan.floor_bytes > budget_bytes) {
    // Name the step with the largest smallest micro-step: the budget that step needs runs
    // every step.
    const route_step rs = r.at(plan.floor_step);
    const auto [budget_text, floor_text] = format_bytes_apart(budget_bytes, plan.floor_bytes);
    std::size_t workspace = 0;
    for (const split_step& st : plan.steps) {
      if (st.step == plan.floor_step) workspace = st.workspace_bytes;
    }
    throw budget_too_small(
        "budget of " + budget_text + " (" + knob + ") is below the smallest " +
        "micro-step of step " + std::to_string(plan.floor_step + 1) + " (" + net[rs.layer].name +
        (rs.direction == pass::forward ? " forward" : " backward") + ", one image per micro-batch" +
        (channel_splits && splittable_channels(net[rs.layer]) > 1 ? ", one channel per group"
                                                                  : "") +
        (workspace != 0 ? ", its convolution workspace of " + format_bytes(workspace) + " beside"
                        : std::string()) +
        "): " + floor_text + "; raise " + knob + " to at least " + floor_text);
  }
  return plan;
}

}  // namespace memweave
