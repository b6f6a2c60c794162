// Shape inference and validation of one layer given its inputs (private to engine/graph).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "memweave/engine/layer.hpp"

namespace memweave::detail {

/// What a layer's type, parameters and inputs determine.
struct inferred_layer {
  shape4 output;
  std::vector<param_tensor_spec> param_tensors;
  std::vector<aux_tensor_spec> aux_tensors;
};

/// Infers the output and parameter shapes of layer `name` of type `type` with parameters
/// `params` (whose alternative must match `type`) over `inputs` (already validated layers,
/// in order). `classes` is the DATA layer's class count (used by SOFTMAX). Throws
/// invalid_argument naming the layer, its inputs and shapes on any inconsistency.
inferred_layer infer_layer(const std::string& name, layer_type type, const layer_params& params,
                           std::span<const layer* const> inputs, std::int64_t classes);

/// "'conv1' (2x64x8x8)".
std::string describe_input(const layer& l);

}  // namespace memweave::detail
