// Builds a network layer by layer, inferring each output shape and parameter shape and
// rejecting bad input at the call that introduces it (shape mismatch, kernel larger than the
// padded input, zero batch, ...), then checking the whole (one DATA, one SOFTMAX loss,
// every other layer used) in build().
//
//   network_builder b("tiny");
//   auto x = b.data({32, 3, 32, 32}, 10);
//   auto y = b.relu(b.conv(x, conv_params{.out_channels = 16, .kernel_h = 3, .kernel_w = 3,
//                                         .pad_h = 1, .pad_w = 1}, "conv1"));
//   b.softmax_loss(b.fc(b.pool(y, pool_params{}), fc_params{.out_features = 10}));
//   network net = std::move(b).build();
//
// Every error is memweave::invalid_argument naming the layer(s), the value found and what
// was expected. A builder is not thread-safe.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "memweave/engine/layer.hpp"
#include "memweave/engine/network.hpp"

namespace memweave {

/// A layer added to a builder, used as the input of later layers. Only valid with the
/// builder that returned it.
struct layer_handle {
  std::uint64_t builder = 0;  ///< serial of the builder that made it (0: none)
  layer_id id = invalid_layer;
  friend bool operator==(const layer_handle&, const layer_handle&) = default;
};

/// A layer described by name, for build_network (a network read from a description).
struct layer_spec {
  std::string name;  ///< unique, non-empty
  layer_type type = layer_type::data;
  layer_params params;              ///< alternative matching `type`
  std::vector<std::string> inputs;  ///< names of its input layers, in order
};

class network_builder {
 public:
  /// A builder for a network called `name`.
  explicit network_builder(std::string name);
  network_builder(network_builder&&) noexcept = default;
  network_builder& operator=(network_builder&&) noexcept = default;
  network_builder(const network_builder&) = delete;
  network_builder& operator=(const network_builder&) = delete;

  /// The DATA layer: batches of `shape` images with labels in [0, classes). Exactly one, and
  /// it must come first.
  layer_handle data(shape4 shape, std::int64_t classes, std::string name = "data");

  /// The layers; an empty `name` gets "<type><k>" ("conv3"). Each returns the new layer.
  layer_handle conv(layer_handle x, const conv_params& p, std::string name = {});
  layer_handle fc(layer_handle x, const fc_params& p, std::string name = {});
  layer_handle pool(layer_handle x, const pool_params& p, std::string name = {});
  layer_handle act(layer_handle x, const act_params& p, std::string name = {});
  layer_handle relu(layer_handle x, std::string name = {});
  layer_handle bn(layer_handle x, const bn_params& p = {}, std::string name = {});
  layer_handle lrn(layer_handle x, const lrn_params& p = {}, std::string name = {});
  layer_handle dropout(layer_handle x, const dropout_params& p = {}, std::string name = {});
  layer_handle concat(std::span<const layer_handle> xs, std::string name = {});
  layer_handle concat(std::initializer_list<layer_handle> xs, std::string name = {});
  layer_handle add(std::span<const layer_handle> xs, std::string name = {});
  layer_handle add(std::initializer_list<layer_handle> xs, std::string name = {});
  /// Softmax + cross-entropy against the DATA labels. `logits` must hold `classes` values
  /// per image. Exactly one per network, and nothing may consume it.
  layer_handle softmax_loss(layer_handle logits, std::string name = {});

  /// Any layer: `params` must hold the alternative matching `type`.
  layer_handle add_layer(layer_type type, layer_params params, std::span<const layer_handle> inputs,
                         std::string name = {});

  /// The output shape of a layer added so far.
  const shape4& shape(layer_handle h) const;
  /// The name of a layer added so far.
  const std::string& name_of(layer_handle h) const;
  /// Number of layers added so far.
  std::size_t size() const noexcept { return layers_.size(); }
  /// Whether a layer of that name was added (names are unique).
  bool has_layer(const std::string& name) const { return by_name_.count(name) != 0; }

  /// Checks the whole and returns the network: throws when there is no DATA layer, no loss
  /// layer, or a layer (other than the loss) that no layer consumes.
  network build() &&;

 private:
  const layer& get(layer_handle h, const char* what) const;
  std::string unique_name(const std::string& prefix, std::string name);

  std::string name_;
  std::uint64_t serial_;
  std::vector<layer> layers_;
  std::unordered_map<std::string, std::uint32_t> counters_;  // auto-name counter per prefix
  std::unordered_map<std::string, layer_id> by_name_;
  layer_id loss_ = invalid_layer;
};

/// A network from layer specs in any order (inputs by name): sorts them topologically and
/// adds them to a builder. Throws invalid_argument on duplicate or empty names, inputs naming
/// no layer, a cycle (naming its layers), and everything network_builder rejects.
network build_network(std::string name, std::span<const layer_spec> specs);

}  // namespace memweave
