// The tensor table. Invariants: tensor ids are positions; every tensor has an owner layer;
// a gradient exists exactly for layers whose backward step has work and reads it; each step's
// access list names a tensor at most once, reads before accumulates/updates before writes;
// of the backward steps writing one input gradient, the earliest in backward order has mode
// write and the others accumulate. Only set_workspace_bytes mutates after construction (not
// thread-safe with concurrent readers).
#include "memweave/engine/tensor_table.hpp"

#include <algorithm>

#include "memweave/core/error.hpp"

namespace memweave {

const char* to_string(tensor_role r) noexcept {
  switch (r) {
    case tensor_role::data:
      return "data";
    case tensor_role::gradient:
      return "gradient";
    case tensor_role::parameter:
      return "parameter";
    case tensor_role::parameter_gradient:
      return "parameter_gradient";
    case tensor_role::parameter_state:
      return "parameter_state";
    case tensor_role::auxiliary:
      return "auxiliary";
    case tensor_role::workspace:
      return "workspace";
  }
  return "?";
}

const char* to_string(access_mode m) noexcept {
  switch (m) {
    case access_mode::read:
      return "read";
    case access_mode::write:
      return "write";
    case access_mode::accumulate:
      return "accumulate";
    case access_mode::update:
      return "update";
  }
  return "?";
}

tensor_id tensor_table::add(std::string name, tensor_role role, shape4 shape, layer_id owner) {
  tensor_info t;
  t.id = static_cast<tensor_id>(tensors_.size());
  t.name = std::move(name);
  t.role = role;
  t.shape = shape;
  t.bytes = role == tensor_role::workspace ? 0 : shape.bytes();
  t.owner = owner;
  t.persistent = is_persistent(role);
  tensors_.push_back(std::move(t));
  return tensors_.back().id;
}

namespace {

// Whether layer l's backward step does any work given which of its inputs take a gradient.
bool backward_has_work(const layer& l, const std::vector<char>& has_grad) {
  if (l.type == layer_type::data) return false;
  if (l.parameter_count() > 0) return true;
  for (layer_id x : l.inputs)
    if (has_grad[x]) return true;
  return false;
}

}  // namespace

std::vector<gradient_bucket> make_gradient_buckets(const network& net, const route& r,
                                                   std::size_t bucket_bytes) {
  std::vector<gradient_bucket> buckets;
  gradient_bucket open;
  for (std::size_t s = r.layer_count(); s < r.step_count(); ++s) {
    const layer& l = net[r.at(s).layer];
    std::size_t bytes = 0;
    for (const param_tensor_spec& p : l.param_tensors)
      if (p.trained) bytes += p.shape.bytes();
    if (bytes == 0) continue;
    open.layers.push_back(l.id);
    open.bytes += bytes;
    open.close_step = s;
    if (open.bytes >= bucket_bytes) buckets.push_back(std::move(open)), open = {};
  }
  if (!open.layers.empty()) buckets.push_back(std::move(open));
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    buckets[k].update_step =
        k + 1 < buckets.size() ? buckets[k + 1].close_step : r.step_count() - 1;
  }
  return buckets;
}

tensor_table::tensor_table(const network& net, const route& r, std::vector<gradient_bucket> buckets)
    : net_(&net), route_(&r), layers_(net.size()), buckets_(std::move(buckets)) {
  if (r.layer_count() != net.size())
    throw invalid_argument("tensor_table: the route has " + std::to_string(r.layer_count()) +
                           " layers but network '" + net.name() + "' has " +
                           std::to_string(net.size()) + "; pass the route of this network");
  // Ids are a topological order, so every input's has_grad is known before its consumers.
  std::vector<char> has_grad(net.size(), 0);
  for (const layer& l : net.layers())
    has_grad[l.id] = l.type != layer_type::softmax_loss && backward_has_work(l, has_grad);

  tensors_.reserve(net.size() * 4);
  for (const layer& l : net.layers()) {
    layer_tensors& lt = layers_[l.id];
    const std::string& n = l.name;
    lt.output = add(n + ".y", tensor_role::data, l.output_shape, l.id);
    if (l.type == layer_type::data)
      lt.labels = add(n + ".labels", tensor_role::data, {l.output_shape.n, 1, 1, 1}, l.id);
    if (l.type == layer_type::data) tensors_[lt.output].host_resident = net.batch_on_host();
    if (has_grad[l.id])
      lt.output_grad = add(n + ".dy", tensor_role::gradient, l.output_shape, l.id);
    // A tiled segment's parameters are its members' ("<member>.<name>"), under the names
    // they have untiled, so a checkpoint moves between tiled and untiled training.
    const std::string owned = l.type == layer_type::tiled ? std::string() : n + ".";
    for (const param_tensor_spec& p : l.param_tensors)
      lt.params.push_back(add(owned + p.name,
                              p.trained ? tensor_role::parameter : tensor_role::parameter_state,
                              p.shape, l.id));
    for (const param_tensor_spec& p : l.param_tensors) {
      if (!p.trained) continue;
      lt.param_grads.push_back(
          add(owned + p.name + ".grad", tensor_role::parameter_gradient, p.shape, l.id));
      lt.momenta.push_back(
          add(owned + p.name + ".momentum", tensor_role::parameter_state, p.shape, l.id));
    }
    for (const aux_tensor_spec& a : l.aux_tensors)
      lt.aux.push_back(add(owned + a.name, tensor_role::auxiliary, a.shape, l.id));
    if (l.type == layer_type::conv) {
      lt.fwd_workspace = add(n + ".fwd_workspace", tensor_role::workspace, {}, l.id);
      lt.bwd_workspace = add(n + ".bwd_workspace", tensor_role::workspace, {}, l.id);
    }
    if (l.type == layer_type::tiled) {
      // One tile's buffers, fixed when the segment was cut: born and gone in its step, as
      // any transient, so liveness and every policy count them.
      const auto& p = std::get<tiled_params>(l.params);
      lt.fwd_workspace = add(n + ".fwd_workspace", tensor_role::workspace, {}, l.id);
      lt.bwd_workspace = add(n + ".bwd_workspace", tensor_role::workspace, {}, l.id);
      tensors_[lt.fwd_workspace].bytes = p.forward_workspace_bytes;
      tensors_[lt.bwd_workspace].bytes = p.backward_workspace_bytes;
    }
  }
  build_accesses();
}

void tensor_table::build_accesses() {
  const network& net = *net_;
  const route& r = *route_;
  // The first writer of dL/dy_x in backward order is x's consumer latest in the route.
  std::vector<layer_id> first_writer(net.size(), invalid_layer);
  for (const layer& l : net.layers())
    for (layer_id c : l.consumers)
      if (first_writer[l.id] == invalid_layer || r.position(c) > r.position(first_writer[l.id]))
        first_writer[l.id] = c;

  offsets_.assign(1, 0);
  accesses_.clear();
  accesses_.reserve(net.size() * 12);
  auto put = [&](tensor_id t, access_mode m) {
    if (t != invalid_tensor && !tensors_[t].host_resident) accesses_.push_back({t, m});
  };
  const std::size_t steps = r.step_count();
  std::vector<char> deferred(net.size(), 0);
  for (const gradient_bucket& b : buckets_)
    for (layer_id l : b.layers) deferred[l] = 1;
  // Per step, the buckets that close or update there, in bucket order: every step walked
  // every bucket's layers, quadratic in the depth (`plan --ranks` on a 30,000-layer ResNet:
  // 41 s against 1.8 without; session 42's hostile run).
  std::vector<std::vector<std::size_t>> bucket_steps(steps);
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    for (const std::size_t at : {buckets_[i].close_step, buckets_[i].update_step}) {
      if (at < steps && (bucket_steps[at].empty() || bucket_steps[at].back() != i)) {
        bucket_steps[at].push_back(i);
      }
    }
  }
  for (std::size_t s = 0; s < steps; ++s) {
    const std::size_t step_begin = accesses_.size();
    const route_step st = r.at(s);
    const layer& l = net[st.layer];
    const layer_tensors& lt = layers_[l.id];
    if (st.direction == pass::forward) {
      for (layer_id x : l.inputs) put(layers_[x].output, access_mode::read);
      if (l.type == layer_type::softmax_loss) put(labels(), access_mode::read);
      for (std::size_t k = 0; k < l.param_tensors.size(); ++k)
        put(lt.params[k], l.param_tensors[k].trained ? access_mode::read : access_mode::update);
      put(lt.output, access_mode::write);
      put(lt.labels, access_mode::write);
      for (tensor_id a : lt.aux) put(a, access_mode::write);
      put(lt.fwd_workspace, access_mode::write);
    } else {
      bool work = l.parameter_count() > 0;
      for (layer_id x : l.inputs) work = work || layers_[x].output_grad != invalid_tensor;
      if (l.type != layer_type::data && work) {
        const backward_reads& rd = l.reads;
        if (rd.output_grad) put(lt.output_grad, access_mode::read);
        if (rd.input_data)
          for (layer_id x : l.inputs) put(layers_[x].output, access_mode::read);
        if (rd.output_data) put(lt.output, access_mode::read);
        if (rd.aux)
          for (tensor_id a : lt.aux) put(a, access_mode::read);
        if (rd.labels) put(labels(), access_mode::read);
        for (layer_id x : l.inputs)
          if (first_writer[x] != l.id) put(layers_[x].output_grad, access_mode::accumulate);
        for (std::size_t k = 0, g = 0; k < l.param_tensors.size(); ++k)
          if (l.param_tensors[k].trained && deferred[l.id]) {
            put(lt.params[k], access_mode::read);
          } else if (l.param_tensors[k].trained) {
            put(lt.params[k], access_mode::update);
            put(lt.momenta[g++], access_mode::update);
          }
        for (layer_id x : l.inputs)
          if (first_writer[x] == l.id) put(layers_[x].output_grad, access_mode::write);
        for (tensor_id g : lt.param_grads) put(g, access_mode::write);
        put(lt.bwd_workspace, access_mode::write);
      }
    }
    for (const std::size_t i : bucket_steps[s]) {
      const gradient_bucket& b = buckets_[i];
      for (layer_id id : b.layers) {
        const layer_tensors& bt = layers_[id];
        if (b.close_step == s && id != st.layer) {
          for (tensor_id g : bt.param_grads) put(g, access_mode::read);
        }
        if (b.update_step != s) continue;
        for (tensor_id g : bt.param_grads) put(g, access_mode::read);
        const layer& bl = net[id];
        for (std::size_t k = 0, g = 0; k < bl.param_tensors.size(); ++k)
          if (bl.param_tensors[k].trained) {
            put(bt.params[k], access_mode::update);
            put(bt.momenta[g++], access_mode::update);
          }
      }
    }
    // Reads first, then accumulates and updates, then writes (the order within each kept).
    auto rank = [](const tensor_access& a) {
      return a.mode == access_mode::read ? 0 : a.mode == access_mode::write ? 2 : 1;
    };
    std::stable_sort(
        accesses_.begin() + static_cast<std::ptrdiff_t>(step_begin), accesses_.end(),
        [&](const tensor_access& a, const tensor_access& b) { return rank(a) < rank(b); });
    offsets_.push_back(accesses_.size());
  }
}

const tensor_info& tensor_table::at(tensor_id id) const {
  if (id >= tensors_.size())
    throw invalid_argument("tensor id " + std::to_string(id) + " is out of range: the table of '" +
                           net_->name() + "' has " + std::to_string(tensors_.size()) + " tensors");
  return tensors_[id];
}

tensor_id tensor_table::find(std::string_view name) const noexcept {
  // A linear scan: looked up by callers (checkpoints, debugging), never by the step loop.
  for (const tensor_info& t : tensors_) {
    if (t.name == name) return t.id;
  }
  return invalid_tensor;
}

void tensor_table::set_workspace_bytes(tensor_id id, std::size_t bytes) {
  const tensor_info& t = at(id);
  if (t.role != tensor_role::workspace)
    throw invalid_argument("set_workspace_bytes: tensor '" + t.name + "' is a " +
                           to_string(t.role) +
                           " tensor, whose size its shape fixes; only workspaces are resized");
  tensors_[id].bytes = bytes;
}

std::size_t tensor_table::persistent_bytes() const noexcept {
  std::size_t b = 0;
  for (const tensor_info& t : tensors_)
    if (t.persistent) b += t.bytes;
  return b;
}

std::size_t tensor_table::transient_bytes() const noexcept {
  std::size_t b = 0;
  for (const tensor_info& t : tensors_)
    if (!t.persistent) b += t.bytes;
  return b;
}

}  // namespace memweave
