// The mapping of an ONNX graph onto a network_builder, node by node. Private to
// memweave_onnx; import_onnx.cpp drives it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "memweave/engine/network_builder.hpp"
#include "memweave/onnx/import_onnx.hpp"
#include "onnx/onnx_pb.h"

namespace memweave::onnx_detail {

/// What one pass over the graph gives. The DATA layer needs the class count, which is the
/// logits' size, known only at the end: import runs a first pass with `classes` unknown
/// (no loss layer, no weights) and a second with it.
struct conversion {
  std::optional<network_builder> builder;  ///< every layer but the loss
  layer_handle logits;                     ///< what the loss layer reads
  std::string logits_value;                ///< its ONNX value
  std::int64_t logits_per_image = 0;
  std::string softmax_node;  ///< the Softmax node that ends the graph ("" if none)
  std::map<std::string, std::vector<float>> weights;
  std::vector<onnx_weight_binding> bindings;
  std::int64_t opset = 0;
};

/// Maps `model`'s graph onto a builder named `name`. `batch` (> 0) replaces the input's
/// batch dimension (0: the model's, an error when symbolic). `classes` is the DATA layer's
/// class count (0 in the first pass, which collects no weights); `weights`: collect the
/// weights and their bindings (in the pass with classes known).
conversion convert_graph(const onnx::ModelProto& model, const std::string& name, std::int64_t batch,
                         std::int64_t classes, bool weights);

}  // namespace memweave::onnx_detail
