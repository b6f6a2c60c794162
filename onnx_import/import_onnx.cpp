// import_onnx: load and check the model, map its graph twice (the DATA layer's class count
// is the logits' size, known only once the graph is mapped), build the network.
#include "memweave/onnx/import_onnx.hpp"

#include <filesystem>

#include "memweave/core/error.hpp"
#include "onnx_graph_converter.hpp"
#include "onnx_model_file.hpp"

namespace memweave {

const std::vector<std::string>& onnx_supported_operators() {
  static const std::vector<std::string> ops = {"Conv",          "Gemm",
                                               "MatMul",        "MaxPool",
                                               "AveragePool",   "GlobalAveragePool",
                                               "GlobalMaxPool", "Relu",
                                               "Tanh",          "BatchNormalization",
                                               "LRN",           "Dropout",
                                               "Concat",        "Add",
                                               "Flatten",       "Reshape",
                                               "Identity",      "Constant",
                                               "Softmax"};
  return ops;
}

imported_model import_onnx(const std::string& path, std::int64_t batch, const std::string& knob) {
  if (batch < 0)
    throw invalid_argument(knob + " " + path + ": batch " + std::to_string(batch) +
                           "; expected > 0, or 0 for the model's own");
  const onnx::ModelProto model = onnx_detail::load_model(path, knob);
  const std::string name = std::filesystem::path(path).stem().string();
  try {
    const onnx_detail::conversion shapes = onnx_detail::convert_graph(model, name, batch, 0);
    onnx_detail::conversion full =
        onnx_detail::convert_graph(model, name, batch, shapes.logits_per_image);
    imported_model m;
    m.net = std::move(*full.builder).build();
    m.weights = std::move(full.weights);
    m.bindings = std::move(full.bindings);
    m.source_path = path;
    m.output = full.logits_value;
    m.output_layer = m.net[m.net[m.net.loss_layer()].inputs.at(0)].name;
    m.softmax_in_model = !full.softmax_node.empty();
    m.opset = full.opset;
    return m;
  } catch (const invalid_argument& e) {
    throw invalid_argument(knob + " " + path + ": " + e.what());
  }
}

}  // namespace memweave
