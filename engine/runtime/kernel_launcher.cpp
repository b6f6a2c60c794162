// What every backend shares: the conv choice over its candidates, the DATA step's copy and
// the marshalling of a step's device pointers. make_kernel_launcher picks the backend.
#include "engine/runtime/kernel_launcher.hpp"

#include <algorithm>
#include <limits>

#include "engine/random.hpp"
#include "engine/runtime/conv_selection.hpp"
#include "engine/runtime/executor_staging.hpp"

namespace memweave {
namespace k = kernels::host;

conv_step kernel_launcher::choose_conv(conv_workspace_selector& selector, const layer& l,
                                       bool forward, bool input_has_gradient,
                                       std::size_t available) {
  const auto& p = std::get<conv_params>(l.params);
  const shape4& in = (*ctx_.net)[l.inputs[0]].output_shape;
  const std::string backend = conv_backend();
  auto pick = [&](k::conv_pass pass) -> const conv_candidate& {
    return selector.choose(candidates_of(selector, backend, pass, in, p), available);
  };
  conv_step c;
  if (forward) {
    const conv_candidate& f = pick(k::conv_pass::forward);
    take_conv(k::conv_pass::forward, f.algorithm, c.forward, c.cuda_forward);
    c.workspace_bytes = f.workspace_bytes;
    c.name = f.algorithm;
    c.seconds = f.seconds;
    return c;
  }
  const conv_candidate& f = pick(k::conv_pass::backward_filter);
  take_conv(k::conv_pass::backward_filter, f.algorithm, c.filter, c.cuda_filter);
  c.workspace_bytes = f.workspace_bytes;
  c.seconds = f.seconds;
  c.name = f.algorithm;
  if (input_has_gradient) {
    const conv_candidate& d = pick(k::conv_pass::backward_data);
    take_conv(k::conv_pass::backward_data, d.algorithm, c.data, c.cuda_data);
    c.workspace_bytes = std::max(c.workspace_bytes, d.workspace_bytes);
    c.seconds += d.seconds;
    c.name = d.algorithm + "/" + f.algorithm;
  }
  return c;
}

void kernel_launcher::fill_conv_candidates(conv_workspace_selector& selector, bool forward_only) {
  const std::string backend = conv_backend();
  for (const layer& l : ctx_.net->layers()) {
    if (l.type != layer_type::conv) continue;
    const auto& p = std::get<conv_params>(l.params);
    const shape4& in = (*ctx_.net)[l.inputs[0]].output_shape;
    std::vector<k::conv_pass> passes{k::conv_pass::forward};
    if (!forward_only) {
      passes.push_back(k::conv_pass::backward_filter);
      if (first_input_has_grad(*ctx_.table, l)) passes.push_back(k::conv_pass::backward_data);
    }
    for (k::conv_pass pass : passes) (void)candidates_of(selector, backend, pass, in, p);
  }
}

const std::vector<conv_candidate>& kernel_launcher::candidates_of(conv_workspace_selector& selector,
                                                                  const std::string& backend,
                                                                  k::conv_pass pass,
                                                                  const shape4& in,
                                                                  const conv_params& p) {
  return selector.candidates(
      conv_key(backend, pass, in, p), [&] { return conv_candidates(pass, in, p); },
      [&](const conv_candidate& c) { return conv_candidate_runs(pass, in, p, c); });
}

bool kernel_launcher::conv_candidate_runs(k::conv_pass pass, const shape4& in, const conv_params& p,
                                          const conv_candidate& c) {
  for (const conv_candidate& h : host_conv_candidates(pass, in, p)) {
    if (h.algorithm == c.algorithm) return c.workspace_bytes >= h.workspace_bytes;
  }
  return false;
}

conv_step kernel_launcher::no_workspace_conv(conv_workspace_selector&, const layer&, bool forward,
                                             bool) {
  conv_step c;
  c.name = forward ? "direct" : "direct/direct";
  return c;
}

void kernel_launcher::take_conv(k::conv_pass, const std::string& algorithm, host_conv_choice& host,
                                int&) const {
  host = parse_conv_candidate(algorithm);
}

std::vector<layers::param_update> kernel_launcher::param_updates(const step_kernel_args& a) {
  std::vector<layers::param_update> updates;
  for (std::size_t i = 0; i < a.updates.size(); ++i) {
    updates.push_back({a.updates[i].first, a.updates[i].second, a.momenta[i], a.counts[i]});
  }
  return updates;
}

layers::staged_link_bytes kernel_launcher::staged_link(const layer_launch& step) const {
  if (step.staged.empty()) return {};
  return layers::staged_directions(step.l->type, step.forward, step.staged, step.parts,
                                   first_input_has_grad(*ctx_.table, *step.l), step.inference);
}

void kernel_launcher::copy_batch(const layer_launch& step) {
  stream& compute = ctx_.dev->get_stream(stream_role::compute);
  const layer_tensors& lt = ctx_.table->of(step.l->id);
  const shape4 img = step.l->output_shape;
  if (ctx_.table->at(lt.output).host_resident) {
    // The batch stays on the host (the tiled segments fetch it tile by tile): filled in
    // place, held once. The compute stream orders it after the steps that read the last one.
    staging_.resize(static_cast<std::size_t>(img.n));
    float* images = static_cast<float*>(ctx_.device_ptr(lt.output));
    compute.launch([images, d = step.data, it = step.iteration, n = img.n,
                    labels = staging_.data()] { d->fill(it, n, images, labels); });
    compute.copy_async(ctx_.device_ptr(lt.labels), staging_.data(),
                       static_cast<std::size_t>(img.n) * sizeof(float), copy_kind::host_to_device);
    return;
  }
  const auto floats = static_cast<std::size_t>(img.count());
  const float* batch = batches_.take(*step.data, step.iteration, img.n, floats);
  // A split DATA step's batch goes straight into its staging memory (the host and null
  // devices charge it to the link as the batch's crossing; on cuda, whose copies go by their
  // pointers, a host copy into page-locked memory staged for this step).
  compute.copy_async(ctx_.device_ptr(lt.output), batch, img.bytes(), copy_kind::host_to_device);
  compute.copy_async(ctx_.device_ptr(lt.labels), batch + floats,
                     static_cast<std::size_t>(img.n) * sizeof(float), copy_kind::host_to_device);
  // The last batch number has no next (and iteration + 1 would overflow).
  if (step.iteration < std::numeric_limits<std::int64_t>::max()) {
    batches_.start_next(*step.data, step.iteration + 1, img.n, floats);
  }
}

kernel_launcher::step_kernel_args kernel_launcher::marshal(const layer_launch& step) const {
  const layer& l = *step.l;
  const network& net = *ctx_.net;
  const tensor_table& table = *ctx_.table;
  const layer_tensors& lt = table.of(l.id);
  auto f = [this](tensor_id t) { return static_cast<float*>(ctx_.device_ptr(t)); };
  step_kernel_args a;
  layers::step_io& io = a.io;
  io.l = &l;
  io.input_shapes.reserve(l.inputs.size());
  for (layer_id i : l.inputs) io.input_shapes.push_back(net[i].output_shape);
  for (layer_id i : l.inputs) io.inputs.push_back(f(table.of(i).output));
  io.output = f(lt.output);
  for (tensor_id t : lt.params) io.params.push_back(f(t));
  for (tensor_id t : lt.aux) io.aux.push_back(f(t));
  if (l.type == layer_type::softmax_loss) io.labels = f(table.labels());
  const conv_step& conv = *step.conv;
  io.workspace = step.workspace;
  io.workspace_bytes = conv.workspace_bytes;
  if (l.type == layer_type::tiled) {
    // A segment's tile buffers are a tensor of the table (sized when it was cut), resident
    // in its step like the others.
    const tensor_id ws = step.forward ? lt.fwd_workspace : lt.bwd_workspace;
    io.workspace = f(ws);
    io.workspace_bytes = table[ws].bytes;
  }
  io.algo = conv.forward.algo;
  io.chunk = conv.forward.chunk;
  io.data_algo = conv.data.algo;
  io.data_chunk = conv.data.chunk;
  io.filter_algo = conv.filter.algo;
  io.filter_chunk = conv.filter.chunk;
  io.seed = detail::mix64(detail::mix64(ctx_.seed * 1000003u + detail::name_key(l.name)) +
                          static_cast<std::uint64_t>(step.iteration));
  io.first_sample = ctx_.first_sample;
  io.update_running_stats = !step.replay && !step.inference;
  io.inference = step.inference;
  if (step.forward) {
    // A replayed loss layer would rewrite the loss with the same value; keep it single.
    if (l.type == layer_type::softmax_loss && !step.replay) io.loss = ctx_.loss;
    return a;
  }
  io.output_grad = f(lt.output_grad);
  for (layer_id i : l.inputs) {
    const tensor_id g = table.of(i).output_grad;
    bool accumulate = false;
    for (const auto& x : step.accesses) {
      if (x.tensor == g) accumulate = x.mode == access_mode::accumulate;
    }
    io.input_grads.push_back({f(g), accumulate});
  }
  for (tensor_id t : lt.param_grads) io.param_grads.push_back(f(t));
  if (table.buckets().empty()) add_updates(l.id, a);
  return a;
}

void kernel_launcher::add_updates(layer_id id, step_kernel_args& a) const {
  const layer& l = (*ctx_.net)[id];
  const tensor_table& table = *ctx_.table;
  const layer_tensors& lt = table.of(id);
  auto f = [this](tensor_id t) { return static_cast<float*>(ctx_.device_ptr(t)); };
  std::size_t trained = 0;
  for (std::size_t p = 0; p < l.param_tensors.size(); ++p) {
    if (!l.param_tensors[p].trained) continue;
    a.updates.emplace_back(f(lt.param_grads[trained]), f(lt.params[p]));
    a.momenta.push_back(f(lt.momenta[trained]));
    a.counts.push_back(table[lt.params[p]].bytes / sizeof(float));
    ++trained;
  }
}

std::unique_ptr<kernel_launcher> make_kernel_launcher(const launcher_context& context) {
  if (context.dev->kind() == device_kind::cuda) return make_cuda_kernel_launcher(context);
  if (!context.dev->touches_memory()) return make_null_kernel_launcher(context);
  return make_host_kernel_launcher(context);
}

}  // namespace memweave
