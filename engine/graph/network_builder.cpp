// network_builder and build_network. Invariants kept after every successful call: layers_
// holds validated layers whose ids are their positions (a topological order, since inputs
// must already exist); layer 0 is the DATA layer; names are unique; consumer lists match
// the input lists. A failed call throws before changing anything. Not thread-safe.
#include "memweave/engine/network_builder.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>

#include "memweave/core/error.hpp"
#include "shape_inference.hpp"

namespace memweave {
namespace {

std::uint64_t next_serial() {
  static std::atomic<std::uint64_t> serial{0};
  return serial.fetch_add(1, std::memory_order_relaxed) + 1;
}

std::string lower(const char* s) {
  std::string r(s);
  for (char& ch : r) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return r;
}

std::string auto_prefix(layer_type type, const layer_params& params) {
  if (type == layer_type::act) {
    const auto* p = std::get_if<act_params>(&params);
    if (p != nullptr && p->mode == act_mode::tanh) return "tanh";
    if (p != nullptr && p->mode == act_mode::sigmoid) return "sigmoid";
    return "relu";
  }
  return lower(to_string(type));
}

}  // namespace

network_builder::network_builder(std::string name)
    : name_(std::move(name)), serial_(next_serial()) {}

const layer& network_builder::get(layer_handle h, const char* what) const {
  if (h.builder != serial_ || h.id >= layers_.size())
    throw invalid_argument(std::string(what) + " is a layer handle that network '" + name_ +
                           "'s builder did not make (default-constructed, or from another "
                           "builder); pass a handle this builder returned");
  return layers_[h.id];
}

std::string network_builder::unique_name(const std::string& prefix, std::string name) {
  if (!name.empty()) {
    if (auto it = by_name_.find(name); it != by_name_.end())
      throw invalid_argument("layer name '" + name + "' is already used by layer " +
                             std::to_string(it->second) + " (" +
                             to_string(layers_[it->second].type) + ") of network '" + name_ +
                             "'; layer names must be unique");
    return name;
  }
  std::uint32_t& k = counters_[prefix];
  do {
    name = prefix + std::to_string(++k);
  } while (by_name_.count(name) != 0);
  return name;
}

layer_handle network_builder::add_layer(layer_type type, layer_params params,
                                        std::span<const layer_handle> inputs, std::string name) {
  // Resolve and check the inputs before touching any state.
  std::vector<const layer*> in;
  in.reserve(inputs.size());
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const std::string what = "input " + std::to_string(k) + " of the new " + to_string(type) +
                             " layer" + (name.empty() ? "" : " '" + name + "'");
    in.push_back(&get(inputs[k], what.c_str()));
  }
  const std::string shown =
      name.empty() ? std::string("the new ") + to_string(type) + " layer" : "layer '" + name + "'";
  if (type == layer_type::data) {
    if (!layers_.empty())
      throw invalid_argument(shown + " is a second DATA layer (network '" + name_ +
                             "' starts with '" + layers_[0].name +
                             "'); a network has exactly one DATA layer, added first");
  } else if (layers_.empty()) {
    throw invalid_argument(shown + " comes before any DATA layer; start network '" + name_ +
                           "' with b.data(shape, classes)");
  }
  if (type == layer_type::softmax_loss && loss_ != invalid_layer)
    throw invalid_argument(shown + " is a second SOFTMAX loss (network '" + name_ +
                           "' already has '" + layers_[loss_].name +
                           "'); a network has exactly one loss layer");
  for (std::size_t k = 0; k < in.size(); ++k) {
    if (in[k]->type == layer_type::softmax_loss)
      throw invalid_argument(shown + " reads the loss layer '" + in[k]->name +
                             "'; the SOFTMAX loss must be the last layer, consumed by none");
    for (std::size_t j = 0; j < k; ++j)
      if (in[j] == in[k])
        throw invalid_argument(shown + " lists input '" + in[k]->name +
                               "' twice; the inputs of a layer must be distinct");
  }
  const std::int64_t classes =
      layers_.empty() ? 0 : std::get<data_params>(layers_[0].params).classes;
  const std::string prefix = auto_prefix(type, params);
  name = unique_name(prefix, std::move(name));
  detail::inferred_layer inf =
      detail::infer_layer(name, type, params, std::span<const layer* const>(in), classes);

  // Commit.
  layer l;
  l.id = static_cast<layer_id>(layers_.size());
  l.name = std::move(name);
  l.type = type;
  l.params = std::move(params);
  l.inputs.reserve(in.size());
  for (const layer* x : in) l.inputs.push_back(x->id);
  l.output_shape = inf.output;
  l.param_tensors = std::move(inf.param_tensors);
  l.aux_tensors = std::move(inf.aux_tensors);
  l.cost = cost_class_of(type);
  l.reads = backward_reads_of(type, l.params);
  by_name_.emplace(l.name, l.id);
  for (layer_id x : l.inputs) layers_[x].consumers.push_back(l.id);
  if (type == layer_type::softmax_loss) loss_ = l.id;
  layers_.push_back(std::move(l));
  return {serial_, layers_.back().id};
}

layer_handle network_builder::data(shape4 shape, std::int64_t classes, std::string name) {
  return add_layer(layer_type::data, data_params{shape, classes}, {}, std::move(name));
}

layer_handle network_builder::conv(layer_handle x, const conv_params& p, std::string name) {
  return add_layer(layer_type::conv, p, {&x, 1}, std::move(name));
}

layer_handle network_builder::fc(layer_handle x, const fc_params& p, std::string name) {
  return add_layer(layer_type::fc, p, {&x, 1}, std::move(name));
}

layer_handle network_builder::pool(layer_handle x, const pool_params& p, std::string name) {
  return add_layer(layer_type::pool, p, {&x, 1}, std::move(name));
}

layer_handle network_builder::act(layer_handle x, const act_params& p, std::string name) {
  return add_layer(layer_type::act, p, {&x, 1}, std::move(name));
}

layer_handle network_builder::relu(layer_handle x, std::string name) {
  return act(x, act_params{act_mode::relu}, std::move(name));
}

layer_handle network_builder::bn(layer_handle x, const bn_params& p, std::string name) {
  return add_layer(layer_type::bn, p, {&x, 1}, std::move(name));
}

layer_handle network_builder::lrn(layer_handle x, const lrn_params& p, std::string name) {
  return add_layer(layer_type::lrn, p, {&x, 1}, std::move(name));
}

layer_handle network_builder::dropout(layer_handle x, const dropout_params& p, std::string name) {
  return add_layer(layer_type::dropout, p, {&x, 1}, std::move(name));
}

layer_handle network_builder::concat(std::span<const layer_handle> xs, std::string name) {
  return add_layer(layer_type::concat, concat_params{}, xs, std::move(name));
}

layer_handle network_builder::concat(std::initializer_list<layer_handle> xs, std::string name) {
  return concat(std::span<const layer_handle>(xs.begin(), xs.size()), std::move(name));
}

layer_handle network_builder::add(std::span<const layer_handle> xs, std::string name) {
  return add_layer(layer_type::add, add_params{}, xs, std::move(name));
}

layer_handle network_builder::add(std::initializer_list<layer_handle> xs, std::string name) {
  return add(std::span<const layer_handle>(xs.begin(), xs.size()), std::move(name));
}

layer_handle network_builder::softmax_loss(layer_handle logits, std::string name) {
  return add_layer(layer_type::softmax_loss, softmax_loss_params{}, {&logits, 1}, std::move(name));
}

const shape4& network_builder::shape(layer_handle h) const {
  return get(h, "the argument of shape()").output_shape;
}

const std::string& network_builder::name_of(layer_handle h) const {
  return get(h, "the argument of name_of()").name;
}

network network_builder::build() && {
  if (layers_.empty())
    throw invalid_argument("network '" + name_ +
                           "' has no layers; start it with b.data(shape, classes)");
  if (loss_ == invalid_layer)
    throw invalid_argument("network '" + name_ + "' has no loss layer; end it with " +
                           "b.softmax_loss(logits) on an FC of " +
                           std::to_string(std::get<data_params>(layers_[0].params).classes) +
                           " outputs");
  std::string unused;
  std::size_t n_unused = 0;
  for (const layer& l : layers_) {
    if (l.id == loss_ || !l.consumers.empty()) continue;
    if (++n_unused <= 5)
      unused += (n_unused > 1 ? ", '" : "'") + l.name + "' (" + to_string(l.type) + ", " +
                to_string(l.output_shape) + ")";
  }
  if (n_unused > 0)
    throw invalid_argument(
        "network '" + name_ + "': " + std::to_string(n_unused) + " layer(s) feed no other " +
        "layer: " + unused + (n_unused > 5 ? ", ..." : "") +
        "; every layer but the loss must lead to the loss (remove it or join it in)");
  return network(std::move(name_), std::move(layers_));
}

network build_network(std::string name, std::span<const layer_spec> specs) {
  std::unordered_map<std::string, std::size_t> index;
  index.reserve(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].name.empty())
      throw invalid_argument("network '" + name + "': layer spec " + std::to_string(i) + " (" +
                             to_string(specs[i].type) + ") has an empty name; name every layer");
    if (!index.emplace(specs[i].name, i).second)
      throw invalid_argument("network '" + name + "': two layer specs are named '" + specs[i].name +
                             "'; layer names must be unique");
  }
  std::vector<std::vector<std::size_t>> in(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i)
    for (const std::string& x : specs[i].inputs) {
      auto it = index.find(x);
      if (it == index.end())
        throw invalid_argument("network '" + name + "': layer '" + specs[i].name +
                               "' lists input '" + x + "', which names no layer");
      in[i].push_back(it->second);
    }

  // Iterative depth-first post-order over inputs: a spec is emitted after all of its
  // inputs, independent specs keep their given order. A grey node met again is a cycle.
  enum : char { white, grey, black };
  std::vector<char> color(specs.size(), white);
  std::vector<std::size_t> order;
  order.reserve(specs.size());
  std::vector<std::pair<std::size_t, std::size_t>> stack;  // (spec, next input to visit)
  for (std::size_t root = 0; root < specs.size(); ++root) {
    if (color[root] != white) continue;
    stack.push_back({root, 0});
    color[root] = grey;
    while (!stack.empty()) {
      auto& [v, k] = stack.back();
      if (k == in[v].size()) {
        color[v] = black;
        order.push_back(v);
        stack.pop_back();
        continue;
      }
      const std::size_t u = in[v][k++];
      if (color[u] == black) continue;
      if (color[u] == grey) {
        // Each frame above u on the stack is an input of the frame below it, and the top
        // frame reads u: the cycle is u -> ... -> top -> u (A -> B: A reads B).
        std::string cycle;
        bool on = false;
        for (const auto& frame : stack) {
          if (frame.first == u) on = true;
          if (on) cycle += "'" + specs[frame.first].name + "' -> ";
        }
        cycle += "'" + specs[u].name + "'";
        throw invalid_argument("network '" + name + "': layers form a cycle (A -> B: A reads " +
                               "B): " + cycle + "; a network must be acyclic");
      }
      color[u] = grey;
      stack.push_back({u, 0});
    }
  }

  network_builder b(std::move(name));
  std::vector<layer_handle> handle(specs.size());
  std::vector<layer_handle> args;
  for (std::size_t i : order) {
    args.clear();
    for (std::size_t u : in[i]) args.push_back(handle[u]);
    handle[i] = b.add_layer(specs[i].type, specs[i].params, args, specs[i].name);
  }
  return std::move(b).build();
}

}  // namespace memweave
