// import_onnx: load and check the model, map its graph twice (the DATA layer's class count
// is the logits' size, known only once the graph is mapped), build the network.
#include "memweave/onnx/import_onnx.hpp"

#include <filesystem>
#include <memory>

#include "memweave/core/error.hpp"
#include "onnx_graph_converter.hpp"
#include "onnx_model_file.hpp"

namespace memweave {

const std::vector<std::string>& onnx_supported_operators() {
  static const std::vector<std::string> ops = {"Conv",
                                               "Gemm",
                                               "MatMul",
                                               "MaxPool",
                                               "AveragePool",
                                               "GlobalAveragePool",
                                               "GlobalMaxPool",
                                               "Relu",
                                               "Tanh",
                                               "Sigmoid",
                                               "BatchNormalization",
                                               "LRN",
                                               "Dropout",
                                               "Concat",
                                               "Add",
                                               "Flatten",
                                               "Reshape",
                                               "Identity",
                                               "Constant",
                                               "Softmax"};
  return ops;
}

struct onnx_model::impl {
  onnx::ModelProto model;
  std::string path, knob, name;
};

onnx_model::onnx_model(const std::string& path, const std::string& knob)
    : impl_(std::make_unique<impl>()) {
  impl_->model = onnx_detail::load_model(path, knob);
  impl_->path = path;
  impl_->knob = knob;
  impl_->name = std::filesystem::path(path).stem().string();
}

onnx_model::~onnx_model() = default;
onnx_model::onnx_model(onnx_model&&) noexcept = default;
onnx_model& onnx_model::operator=(onnx_model&&) noexcept = default;

const std::string& onnx_model::path() const noexcept {
  return impl_->path;
}

imported_model onnx_model::import(std::int64_t batch, bool with_weights) const {
  const impl& f = *impl_;
  if (batch < 0)
    throw invalid_argument(f.knob + " " + f.path + ": batch " + std::to_string(batch) +
                           "; expected > 0, or 0 for the model's own");
  try {
    const onnx_detail::conversion shapes =
        onnx_detail::convert_graph(f.model, f.name, batch, 0, false);
    onnx_detail::conversion full =
        onnx_detail::convert_graph(f.model, f.name, batch, shapes.logits_per_image, with_weights);
    imported_model m;
    m.net = std::move(*full.builder).build();
    m.weights = std::move(full.weights);
    m.bindings = std::move(full.bindings);
    m.source_path = f.path;
    m.output = full.logits_value;
    m.output_layer = m.net[m.net[m.net.loss_layer()].inputs.at(0)].name;
    m.softmax_in_model = !full.softmax_node.empty();
    m.opset = full.opset;
    return m;
  } catch (const invalid_argument& e) {
    throw invalid_argument(f.knob + " " + f.path + ": " + e.what());
  }
}

imported_model import_onnx(const std::string& path, std::int64_t batch, const std::string& knob) {
  return onnx_model(path, knob).import(batch);
}

}  // namespace memweave
