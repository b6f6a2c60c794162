// ONNX import and export: a model file becomes a memweave network and its initial weights,
// and trained weights go back into the model's initializers.
//
// The model is read with the ONNX protobuf classes (Debian's libonnx-dev); this header
// names none of them, so a program using it needs no protobuf headers. Each supported ONNX
// node maps to one engine layer (or to none: Identity, Flatten, Reshape, a MatMul's bias Add,
// Constant are no layer: the engine reads the same tensor). Supported operators:
//   Conv (1-D and 2-D; groups, dilations, symmetric pads or auto_pad, strides, bias optional)
//   Gemm (transA = 0; alpha and beta folded into the weights), MatMul with a constant
//     right-hand side, followed or not by an Add of a constant bias      -> FC
//   MaxPool, AveragePool (floor mode; AveragePool counts padding, as the engine does: pads
//     with count_include_pad = 0 are refused), GlobalAveragePool, GlobalMaxPool  -> POOL
//   Relu, Tanh, Sigmoid -> ACT; LRN (odd size) -> LRN; Dropout -> DROPOUT (off in evaluation)
//   BatchNormalization -> BN (ONNX's momentum weighs the running value, the engine's the
//     batch: the engine's is 1 - ONNX's)
//   Concat (channel axis), Add (two computed tensors of one shape) -> CONCAT, ADD
//   Flatten / Reshape to (batch, features) before FC, Softmax or element-wise layers
//   Softmax over the features of the graph's single output -> the SOFTMAX loss layer; a
//     graph whose output is not a Softmax gets one appended (the loss trains its logits)
//   Identity, Constant (for Reshape's shape and Dropout's ratio)
// Anything else is an invalid_argument naming the node, its operator and what is supported.
//
// Weights are named as the executor names its persistent tensors: "<layer>.<param>", the
// layer being the ONNX node's name (its first output's name when it has none), the param
// "weight", "bias", "gamma", "beta", "running_mean", "running_var"; executor::write sets
// them before training.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "memweave/engine/network.hpp"

namespace memweave {

/// How one engine parameter tensor relates to an ONNX initializer: engine = scale *
/// (initializer, transposed when `transposed`), broadcast from one value when `broadcast`.
struct onnx_weight_binding {
  std::string tensor;       ///< the engine's persistent tensor ("fc1.weight")
  std::string initializer;  ///< the ONNX initializer it came from
  bool transposed = false;  ///< a (K, N) MatMul/Gemm matrix stored as the engine's (N, K)
  bool broadcast = false;   ///< a scalar Gemm bias spread over the N outputs
  float scale = 1.0f;       ///< Gemm's alpha (weight) or beta (bias), folded in
  /// Where scale != 1: the node (by its first output) and its attribute ("alpha", "beta")
  /// that export sets to 1, the trained values written as they are (dividing them by the
  /// scale again was not exact, or not finite: alpha 1e-45).
  std::string node;
  std::string scale_attribute;
};

/// What import_onnx gives: the network, its initial weights and where each came from.
struct imported_model {
  network net;
  /// Initial values of the persistent tensors the model sets, by engine name. Momenta are
  /// not here (they start at 0), nor are BN running statistics the model does not give.
  std::map<std::string, std::vector<float>> weights;
  std::vector<onnx_weight_binding> bindings;  ///< one per entry of `weights`
  std::string source_path;                    ///< the file read, for export_onnx_weights
  std::string output;                         ///< the ONNX value the loss layer reads (the logits)
  std::string output_layer;                   ///< the engine layer producing it (Softmax's input)
  bool softmax_in_model = false;  ///< the graph ended in a Softmax (else one was appended)
  std::int64_t opset = 0;         ///< the default domain's opset version
};

/// Reads the ONNX model at `path` into a network named after the file's stem. `batch` sets
/// the batch dimension of the graph's input (which may be symbolic); 0 keeps the model's
/// own and is an error when that is symbolic. Throws invalid_argument for a missing,
/// truncated or malformed file, an unsupported operator or attribute (naming the node, its
/// operator and what is supported), and every shape the engine cannot run. `knob` is the
/// option the path came from, for messages ("--net").
imported_model import_onnx(const std::string& path, std::int64_t batch,
                           const std::string& knob = "import_onnx");
// (onnx_model(path, knob).import(batch).)

/// A model file read and checked once, to import at several batches (a search for the
/// largest batch that fits) without reading it again. Not thread-safe to construct; import
/// may be called from several threads.
class onnx_model {
 public:
  /// Reads and checks the model at `path`: the file errors of import_onnx.
  explicit onnx_model(const std::string& path, const std::string& knob = "import_onnx");
  ~onnx_model();
  onnx_model(onnx_model&&) noexcept;
  onnx_model& operator=(onnx_model&&) noexcept;

  /// import_onnx's result at `batch`; without `with_weights` (planning) no weights nor
  /// bindings are copied out of the model.
  imported_model import(std::int64_t batch, bool with_weights = true) const;
  const std::string& path() const noexcept;

 private:
  struct impl;  // the parsed ModelProto: protobuf stays out of this header
  std::unique_ptr<impl> impl_;
};

/// Writes a copy of `model.source_path` to `out_path` whose initializers hold `weights`
/// (engine names, as executor::read gives them) through model.bindings,
/// undoing each binding's transposition and scale. Every binding must have its tensor in
/// `weights` with the right size; initializers no binding names are copied unchanged. The
/// file is written beside `out_path` and renamed over it, so a failure leaves nothing
/// half-written. Throws invalid_argument naming the tensor or the path.
void export_onnx_weights(const imported_model& model,
                         const std::map<std::string, std::vector<float>>& weights,
                         const std::string& out_path);

/// The ONNX operators import_onnx maps, for messages and documentation.
const std::vector<std::string>& onnx_supported_operators();

}  // namespace memweave
