// The immutable network. Invariants (established by network_builder): ids are positions and a
// topological order; layer 0 is the only DATA layer; exactly one SOFTMAX, with no consumers;
// every other layer has at least one consumer. Const access is thread-safe.
#include "memweave/engine/network.hpp"

#include <algorithm>
#include <sstream>

#include "memweave/core/error.hpp"

namespace memweave {

network::network(std::string name, std::vector<layer> layers)
    : name_(std::move(name)), layers_(std::move(layers)) {
  by_name_.reserve(layers_.size());
  for (const layer& l : layers_) {
    by_name_.emplace(l.name, l.id);
    if (l.type == layer_type::data) data_ = l.id;
    if (l.type == layer_type::softmax_loss) loss_ = l.id;
  }
}

const layer& network::at(layer_id id) const {
  if (id >= layers_.size())
    throw invalid_argument("layer id " + std::to_string(id) + " is out of range: network '" +
                           name_ + "' has " + std::to_string(layers_.size()) + " layers");
  return layers_[id];
}

std::optional<layer_id> network::find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

std::int64_t network::batch() const noexcept {
  return layers_.empty() ? 0 : layers_[data_].output_shape.n;
}

std::int64_t network::classes() const noexcept {
  return layers_.empty() ? 0 : std::get<data_params>(layers_[data_].params).classes;
}

bool network::batch_on_host() const noexcept {
  if (layers_.empty()) return false;
  const std::vector<layer_id>& c = layers_[data_].consumers;
  return !c.empty() && std::all_of(c.begin(), c.end(), [this](layer_id id) {
    return layers_[id].type == layer_type::tiled;
  });
}

std::int64_t network::parameter_count() const noexcept {
  std::int64_t n = 0;
  for (const layer& l : layers_) n += l.parameter_count();
  return n;
}

std::int64_t network::state_count() const noexcept {
  std::int64_t n = 0;
  for (const layer& l : layers_) n += l.state_count();
  return n;
}

std::vector<std::size_t> network::type_histogram() const {
  std::vector<std::size_t> h(static_cast<std::size_t>(layer_type::tiled) + 1, 0);
  for (const layer& l : layers_) ++h[static_cast<std::size_t>(l.type)];
  return h;
}

std::string network::summary() const {
  std::ostringstream os;
  os << "network '" << name_ << "': " << layers_.size() << " layers, " << parameter_count()
     << " parameters\n";
  for (const layer& l : layers_) {
    os << l.id << ' ' << l.name << ' ' << to_string(l.type) << " <-";
    if (l.inputs.empty()) os << " (none)";
    for (std::size_t k = 0; k < l.inputs.size(); ++k)
      os << (k == 0 ? " " : ",") << layers_[l.inputs[k]].name;
    os << " -> " << to_string(l.output_shape);
    if (const auto* p = std::get_if<pool_params>(&l.params); p && p->adaptive()) os << " adaptive";
    if (const auto p = l.parameter_count(); p > 0) os << " params " << p;
    os << '\n';
  }
  return os.str();
}

}  // namespace memweave
