// One layer of a network: what it is (type and parameters), where it sits in the DAG (its
// inputs and consumers), and what it needs of memory (its output shape, its parameter and
// auxiliary tensors, and what its backward pass reads of the forward pass).
//
// Plain data, filled in by network_builder (which infers and validates every field) and read
// by the route, the tensor table and the executor.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "memweave/engine/layer_params.hpp"

namespace memweave::tiling {
struct tiled_segment;
}

namespace memweave {

/// Index of a layer in its network, 0..size()-1. Ids follow the order the builder added the
/// layers in, which is a topological order (every input has a smaller id).
using layer_id = std::uint32_t;
inline constexpr layer_id invalid_layer = std::numeric_limits<layer_id>::max();

/// Parameters of the DATA layer: the shape of one batch of images and the number of classes
/// its labels range over.
struct data_params {
  shape4 shape;              ///< n images of c x h x w
  std::int64_t classes = 0;  ///< labels are integers in [0, classes)
};

/// SOFTMAX is softmax followed by the cross-entropy loss against the DATA layer's labels.
/// It has no parameters.
struct softmax_loss_params {};

/// CONCAT joins its inputs along the channel axis, in input order. No parameters.
struct concat_params {};

/// ADD sums its inputs element-wise (a residual join). No parameters.
struct add_params {};

/// TILED: the segment it runs (its members, renumbered, and the tile grid) and the
/// workspace its forward and backward steps take (one tile's buffers), fixed when the
/// segment is cut (engine/tiling/tiled_segment.hpp).
struct tiled_params {
  std::shared_ptr<const tiling::tiled_segment> segment;
  std::size_t forward_workspace_bytes = 0;
  std::size_t backward_workspace_bytes = 0;
  /// Bytes of the segment's input that its tiles read, halos included (each pass over the
  /// tiles reads them again): what crosses the host link when the input stays on the host.
  std::size_t input_tile_bytes = 0;
  /// The null device's cost of its steps (tiling::tiled_forward_flops / backward), worked
  /// out once when the segment is cut: the cost model asks at every step.
  double forward_flops = 0;
  double backward_flops = 0;
};

/// The parameters of any layer; the alternative must match the layer's type.
using layer_params = std::variant<data_params, conv_params, fc_params, pool_params, act_params,
                                  bn_params, lrn_params, dropout_params, softmax_loss_params,
                                  concat_params, add_params, tiled_params>;

/// The paper's split of layers by cost (§3.4): compute-heavy layers are checkpoints, which
/// recomputation never replays and the tensor pool offloads; the others are cheap to redo.
enum class cost_class {
  checkpoint,  ///< CONV, FC, DATA
  cheap,       ///< POOL, ACT, BN, LRN, DROPOUT, CONCAT, ADD, SOFTMAX
};

/// "checkpoint" / "cheap".
const char* to_string(cost_class c) noexcept;

/// What a layer's backward computation reads of its forward pass (besides the gradient of
/// its output, which every type but SOFTMAX reads).
struct backward_reads {
  bool output_grad = true;   ///< dL/dy of its own output (false only for SOFTMAX)
  bool input_data = false;   ///< its input x (CONV, FC, BN, LRN, POOL max)
  bool output_data = false;  ///< its output y (ACT, LRN, POOL max, SOFTMAX)
  bool weights = false;      ///< parameters read by the gradient computation (CONV/FC weight,
                             ///< BN gamma); the solver reads and updates all trained ones anyway
  bool aux = false;          ///< its auxiliary tensors (BN saved stats, DROPOUT mask)
  bool labels = false;       ///< the DATA layer's labels (SOFTMAX)
  friend bool operator==(const backward_reads&, const backward_reads&) = default;
};

/// The backward needs of a layer of type `type` with parameters `params` (the pooling mode
/// decides for POOL: max reads x and y, average reads neither).
backward_reads backward_reads_of(layer_type type, const layer_params& params) noexcept;

/// The cost class of a layer type.
cost_class cost_class_of(layer_type type) noexcept;

/// A parameter tensor of a layer: trained ones (CONV/FC weight and bias, BN gamma and beta)
/// get a gradient and a momentum; the others (BN running mean and variance) are persistent
/// state updated by the forward pass.
struct param_tensor_spec {
  std::string name;               ///< "weight", "bias", "gamma", "beta", "running_mean", ...
  shape4 shape;                   ///< CONV weight (out, in/groups, kh, kw); FC weight (out,
                                  ///< in, 1, 1); biases and BN vectors (1, c, 1, 1)
  bool trained = true;            ///< has a gradient and a momentum; counted in parameters
  bool read_by_backward = false;  ///< read by the gradient computation (not only the solver)
};

/// An auxiliary tensor: written by the forward step, read by the backward step.
struct aux_tensor_spec {
  std::string name;  ///< "saved_mean", "saved_inv_std" (BN), "mask" (DROPOUT)
  shape4 shape;      ///< BN: (1, c, 1, 1); DROPOUT: the output's shape
};

/// A layer of a network. Every field is set and validated by network_builder.
struct layer {
  layer_id id = invalid_layer;  ///< position in network::layers()
  std::string name;             ///< unique in the network
  layer_type type = layer_type::data;
  layer_params params;              ///< the alternative matching `type`
  std::vector<layer_id> inputs;     ///< ordered (CONCAT's order is the channel order); distinct
  std::vector<layer_id> consumers;  ///< layers reading this one's output, in id order
  shape4 output_shape;              ///< inferred
  std::vector<param_tensor_spec> param_tensors;  ///< in a fixed order per type (see above)
  std::vector<aux_tensor_spec> aux_tensors;      ///< in a fixed order per type (see above)
  cost_class cost = cost_class::cheap;
  backward_reads reads;  ///< what its backward reads of the forward pass

  /// Elements in its trained parameters (weights, biases, BN gamma/beta).
  std::int64_t parameter_count() const noexcept;
  /// Elements in its untrained parameter state (BN running mean and variance).
  std::int64_t state_count() const noexcept;
};

}  // namespace memweave
