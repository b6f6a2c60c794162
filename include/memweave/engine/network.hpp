// A network: a validated DAG of layers with one DATA layer (the only source) and one
// SOFTMAX loss layer (the only sink). Made by network_builder (or build_network from
// specs); immutable afterwards, so it may be shared across threads freely.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "memweave/engine/layer.hpp"

namespace memweave {

class network {
 public:
  /// An empty network (no layers); only useful as a moved-to target.
  network() = default;

  /// The name given to the builder ("resnet50").
  const std::string& name() const noexcept { return name_; }

  /// Number of layers N (DATA and SOFTMAX included).
  std::size_t size() const noexcept { return layers_.size(); }

  /// All layers, indexed by id; ids are a topological order.
  std::span<const layer> layers() const noexcept { return layers_; }

  /// The layer with id `id`; throws invalid_argument when out of range.
  const layer& at(layer_id id) const;
  /// Unchecked access.
  const layer& operator[](layer_id id) const noexcept { return layers_[id]; }

  /// The layer named `name`, or nullopt.
  std::optional<layer_id> find(std::string_view name) const;

  /// The DATA layer (always id 0) and the SOFTMAX loss layer.
  layer_id data_layer() const noexcept { return data_; }
  layer_id loss_layer() const noexcept { return loss_; }

  /// Batch size (n of every layer's output) and number of classes.
  std::int64_t batch() const noexcept;
  std::int64_t classes() const noexcept;

  /// Whether the batch stays in host memory: every consumer of the DATA layer is a tiled
  /// segment (SFT), which fetches the image tile by tile, so the whole batch never needs
  /// device memory (the tensor table then leaves it out of every step's accesses).
  bool batch_on_host() const noexcept;

  /// Trained parameter elements (weights, biases, BN gamma/beta), all layers.
  std::int64_t parameter_count() const noexcept;
  /// Untrained state elements (BN running statistics), all layers.
  std::int64_t state_count() const noexcept;

  /// Number of layers of each type, indexed by layer_type.
  std::vector<std::size_t> type_histogram() const;

  /// A table, one line per layer: id, name, type, inputs, output shape, parameters.
  std::string summary() const;

 private:
  friend class network_builder;
  network(std::string name, std::vector<layer> layers);

  std::string name_;
  std::vector<layer> layers_;
  std::unordered_map<std::string, layer_id> by_name_;
  layer_id data_ = invalid_layer;
  layer_id loss_ = invalid_layer;
};

}  // namespace memweave
