// export_onnx_weights: the source model with its bound initializers (or Constant nodes)
// replaced by the engine's values, each binding's transposition undone and a Gemm's folded
// alpha/beta set to 1 (the values stay as trained).
#include <unordered_map>

#include "memweave/core/error.hpp"
#include "memweave/onnx/import_onnx.hpp"
#include "onnx_model_file.hpp"

namespace memweave {
namespace {

void set_scale_to_one(onnx::ModelProto& m, const onnx_weight_binding& b) {
  for (auto& n : *m.mutable_graph()->mutable_node()) {
    if (n.output_size() == 0 || n.output(0) != b.node) continue;
    for (auto& a : *n.mutable_attribute()) {
      if (a.name() == b.scale_attribute) a.set_f(1.0f);
    }
    return;
  }
  throw invalid_argument("export_onnx_weights: no node writes '" + b.node + "' (its " +
                         b.scale_attribute + " scales initializer '" + b.initializer + "')");
}

}  // namespace

void export_onnx_weights(const imported_model& model,
                         const std::map<std::string, std::vector<float>>& weights,
                         const std::string& out_path) {
  onnx::ModelProto m = onnx_detail::load_model(model.source_path, "export_onnx_weights");
  std::unordered_map<std::string, onnx::TensorProto*> tensors;
  for (auto& t : *m.mutable_graph()->mutable_initializer()) tensors[t.name()] = &t;
  for (auto& n : *m.mutable_graph()->mutable_node()) {
    if (n.op_type() != "Constant" || n.output_size() != 1) continue;
    for (auto& a : *n.mutable_attribute())
      if (a.name() == "value" && a.has_t()) tensors[n.output(0)] = a.mutable_t();
  }
  for (const onnx_weight_binding& b : model.bindings) {
    auto w = weights.find(b.tensor);
    if (w == weights.end())
      throw invalid_argument("export_onnx_weights: no values for tensor '" + b.tensor +
                             "' (bound to initializer '" + b.initializer + "')");
    auto t = tensors.find(b.initializer);
    if (t == tensors.end())
      throw invalid_argument("export_onnx_weights: " + model.source_path + " has no initializer '" +
                             b.initializer + "' (the file changed since it was imported)");
    onnx::TensorProto& init = *t->second;
    const std::int64_t count = onnx_detail::element_count(init, b.initializer);
    std::vector<std::int64_t> dims(init.dims().begin(), init.dims().end());
    std::vector<float> v = w->second;
    if (v.empty() || (!b.broadcast && v.size() != static_cast<std::size_t>(count)))
      throw invalid_argument("export_onnx_weights: tensor '" + b.tensor + "' holds " +
                             std::to_string(v.size()) + " values; initializer '" + b.initializer +
                             "' needs " + std::to_string(count));
    // The trained values as they are, the node's scale set to 1: the same function, exactly.
    if (!b.scale_attribute.empty()) set_scale_to_one(m, b);
    if (b.transposed) {
      // The engine's (N, K) back to the file's (K, N).
      const std::int64_t k = dims.at(0), n = dims.at(1);
      std::vector<float> t2(v.size());
      for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t c = 0; c < k; ++c) t2[c * n + r] = v[r * k + c];
      v = std::move(t2);
    }
    // A scalar bias the engine trained per output becomes a vector: Gemm broadcasts C.
    if (b.broadcast) dims = {static_cast<std::int64_t>(v.size())};
    onnx_detail::set_float_values(init, v, dims);
  }
  onnx_detail::save_model(m, out_path);
}

}  // namespace memweave
