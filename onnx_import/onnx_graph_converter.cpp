// Maps ONNX nodes onto engine layers. Each ONNX value computed by the graph is an engine
// layer's output seen with the value's ONNX dims; Flatten, Reshape and Identity make a new
// value over the same layer (a "view"), which only layers that read a tensor as a flat
// vector per image (FC, the loss, element-wise layers) may consume. Everything the engine
// cannot run exactly as ONNX defines it is refused here, naming the node.
#include "onnx_graph_converter.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <set>
#include <unordered_map>

#include "memweave/core/error.hpp"
#include "memweave/core/log.hpp"
#include "memweave/core/quoted.hpp"
#include "onnx/defs/schema.h"
#include "onnx_model_file.hpp"

namespace memweave::onnx_detail {
namespace {

using dims_t = std::vector<std::int64_t>;

// A value the graph computes: the layer producing its data, and its ONNX dims (batch first).
struct value {
  layer_handle layer;
  dims_t dims;
};

std::string text(const dims_t& d) {
  std::string s = "[";
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// A float as the model holds it: enough digits to read back as the same value.
std::string text(float f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(f));
  return buf;
}

std::int64_t product(const dims_t& d, std::size_t from) {
  return std::accumulate(d.begin() + static_cast<std::ptrdiff_t>(std::min(from, d.size())), d.end(),
                         std::int64_t{1}, std::multiplies<>());
}

// The engine's NCHW shape of ONNX dims of rank 2 (N, C), 3 (N, C, L) or 4 (N, C, H, W).
shape4 as_shape4(const dims_t& d) {
  shape4 s{d[0], d[1], 1, 1};
  if (d.size() > 2) s.h = d[2];
  if (d.size() > 3) s.w = d[3];
  return s;
}

// ONNX dims of rank `rank` (2..4) for an engine shape.
dims_t dims_of(const shape4& s, std::size_t rank) {
  dims_t d{s.n, s.c, s.h, s.w};
  d.resize(rank);
  return d;
}

// Spatial window of a CONV or POOL node: 1-D windows run as (k x 1) on (L x 1) images.
struct window {
  std::int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};

class converter {
 public:
  converter(const onnx::ModelProto& m, std::string name, std::int64_t batch, std::int64_t classes,
            bool weights)
      : model_(m), graph_(m.graph()), batch_(batch), classes_(classes), weights_(weights) {
    out_.builder.emplace(std::move(name));
  }

  conversion run() {
    read_opset();
    for (const auto& t : graph_.initializer()) constants_[t.name()] = &t;
    for (const auto& n : graph_.node())
      for (const auto& in : n.input()) ++uses_[in];
    for (int i = 0; i < graph_.node_size(); ++i)
      for (const auto& in : graph_.node(i).input()) consumers_[in].push_back(i);
    read_input();
    if (graph_.output_size() != 1)
      throw invalid_argument("the graph has " + std::to_string(graph_.output_size()) +
                             " outputs; memweave trains networks with one output (the "
                             "logits or the Softmax the loss reads)");
    const std::string& output = graph_.output(0).name();
    ++uses_[output];
    for (int i = 0; i < graph_.node_size(); ++i) {
      if (fused_.count(i)) continue;
      convert(graph_.node(i), i);
    }
    finish(output);
    return std::move(out_);
  }

 private:
  void read_opset() {
    // '' and 'ai.onnx' name one domain, but the ONNX checker validates each node by the
    // entry of its own spelling: two different versions would have the model checked as one
    // opset and read as the other (session 42's hostile run: Softmax checked as opset 13,
    // trained as opset 11's).
    for (const auto& o : model_.opset_import()) {
      if (!o.domain().empty() && o.domain() != "ai.onnx") continue;
      if (out_.opset != 0 && o.version() != out_.opset) {
        throw invalid_argument("the model imports the default ONNX domain twice, as opset " +
                               std::to_string(out_.opset) + " and as opset " +
                               std::to_string(o.version()) +
                               " (its '' and 'ai.onnx' entries name one domain); import one "
                               "version");
      }
      out_.opset = o.version();
    }
    if (out_.opset == 0)
      throw invalid_argument(
          "the model imports no opset of the default ONNX domain; "
          "memweave maps only standard ONNX operators");
    // The operators are read as the ONNX library defines them, up to its newest opset; a
    // newer model may mean something else by one of them, so say so (not refused: the
    // operators memweave maps kept their float semantics through the opsets since).
    const int newest =
        onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map().at(onnx::ONNX_DOMAIN).second;
    if (out_.opset > newest)
      log(log_level::warn, "the model imports opset " + std::to_string(out_.opset) +
                               " of the default ONNX domain, newer than the " +
                               std::to_string(newest) +
                               " this ONNX library knows; its operators are read as opset " +
                               std::to_string(newest) + " defines them");
  }

  void read_input() {
    std::vector<const onnx::ValueInfoProto*> inputs;
    for (const auto& in : graph_.input())
      if (!constants_.count(in.name())) inputs.push_back(&in);
    if (inputs.empty()) {
      std::string names;
      for (const auto& in : graph_.input()) {
        names += (names.empty() ? "" : ", ") + quote_text(in.name());
      }
      throw invalid_argument("the graph has no input that is not an initializer (inputs: " +
                             (names.empty() ? std::string("none") : names) +
                             "); a memweave network reads its images from one: give the "
                             "images' input without an initializer of the same name");
    }
    if (inputs.size() != 1) {
      std::string names;
      for (const auto* in : inputs) names += (names.empty() ? "'" : ", '") + in->name() + "'";
      throw invalid_argument("the graph has " + std::to_string(inputs.size()) +
                             " inputs that are not initializers (" + names +
                             "); a memweave network reads one (the images of its DATA "
                             "layer): give every other input as an initializer");
    }
    const onnx::ValueInfoProto& in = *inputs[0];
    const std::string who = "graph input '" + in.name() + "'";
    if (!in.type().has_tensor_type() ||
        in.type().tensor_type().elem_type() != onnx::TensorProto::FLOAT)
      throw invalid_argument(who + ": expected a FLOAT tensor (the engine trains in float32)");
    const auto& shape = in.type().tensor_type().shape();
    if (shape.dim_size() < 2 || shape.dim_size() > 4)
      throw invalid_argument(who + " has rank " + std::to_string(shape.dim_size()) +
                             "; supported: (N, C), (N, C, L) or (N, C, H, W)");
    dims_t dims;
    for (int i = 0; i < shape.dim_size(); ++i) {
      const auto& d = shape.dim(i);
      if (i == 0) {
        if (d.has_dim_value() && d.dim_value() <= 0)
          throw invalid_argument(who + ": its batch dimension is " + std::to_string(d.dim_value()) +
                                 "; expected a size >= 1, or a symbolic batch (--batch N)");
        if (d.has_dim_value()) model_batch_ = d.dim_value();
        if (batch_ == 0 && model_batch_ == 0)
          throw invalid_argument(who + ": its batch dimension is symbolic ('" +
                                 (d.has_dim_param() ? d.dim_param() : std::string("unknown")) +
                                 "'); give the batch (--batch N)");
        dims.push_back(batch_ > 0 ? batch_ : model_batch_);
        continue;
      }
      if (d.has_dim_value() && d.dim_value() <= 0)
        throw invalid_argument(who + ": dimension " + std::to_string(i) + " is " +
                               std::to_string(d.dim_value()) + "; expected a size >= 1");
      if (!d.has_dim_value())
        throw invalid_argument(who + ": dimension " + std::to_string(i) + " is '" +
                               (d.has_dim_param() ? d.dim_param() : std::string("unknown")) +
                               "'; only the batch (dimension 0) may be symbolic: export the "
                               "model with a fixed image size");
      dims.push_back(d.dim_value());
    }
    batch_ = dims[0];
    const layer_handle h =
        out_.builder->data(as_shape4(dims), classes_ > 0 ? classes_ : 1, in.name());
    values_[in.name()] = {h, dims};
  }

  // --- node plumbing ---------------------------------------------------------------------

  std::string where(const onnx::NodeProto& n) const {
    return "ONNX node '" + layer_name(n) + "' (" + n.op_type() + ")";
  }

  [[noreturn]] void fail(const onnx::NodeProto& n, const std::string& why) const {
    throw invalid_argument(where(n) + ": " + why);
  }

  static std::string layer_name(const onnx::NodeProto& n) {
    if (!n.name().empty()) return n.name();
    return n.output_size() > 0 ? n.output(0) : n.op_type();
  }

  bool collecting() const noexcept { return weights_ && classes_ > 0; }

  // How many node inputs and graph outputs read value `name`.
  int uses(const std::string& name) const {
    auto it = uses_.find(name);
    return it == uses_.end() ? 0 : it->second;
  }

  static bool has_input(const onnx::NodeProto& n, int k) {
    return k < n.input_size() && !n.input(k).empty();
  }

  const onnx::TensorProto* constant(const std::string& name) const {
    auto it = constants_.find(name);
    return it == constants_.end() ? nullptr : it->second;
  }

  // constant(name), or the value of a Constant node that comes later in the graph (an
  // exporter may write a Linear's bias Constant, or an Identity of a constant, between its
  // MatMul and its Add), read now.
  const onnx::TensorProto* constant_from_anywhere(const std::string& name) {
    if (const auto* t = constant(name)) return t;
    for (const onnx::NodeProto& m : graph_.node()) {
      if (m.output_size() != 1 || m.output(0) != name) continue;
      if (m.op_type() == "Constant") {
        constant_node(m);
        return constant(name);
      }
      if (m.op_type() == "Identity" && m.input_size() == 1 && !values_.count(m.input(0)) &&
          constant_from_anywhere(m.input(0)) != nullptr) {
        identity(m);
        return constant(name);
      }
      return nullptr;
    }
    return nullptr;
  }

  const value& input_value(const onnx::NodeProto& n, int k) const {
    if (!has_input(n, k)) fail(n, "input " + std::to_string(k) + " is missing");
    auto it = values_.find(n.input(k));
    if (it != values_.end()) return it->second;
    if (constant(n.input(k)))
      fail(n, "input " + std::to_string(k) + " ('" + n.input(k) +
                  "') is a constant; the engine computes this operator only on tensors the "
                  "network computes");
    fail(n,
         "input " + std::to_string(k) + " ('" + n.input(k) + "') is produced by no earlier node");
  }

  const onnx::TensorProto& input_constant(const onnx::NodeProto& n, int k, const char* what) const {
    if (!has_input(n, k))
      fail(n, std::string("its ") + what + " (input " + std::to_string(k) + ") is missing");
    if (const auto* t = constant(n.input(k))) return *t;
    for (const auto& sparse : graph_.sparse_initializer()) {
      if (sparse.values().name() == n.input(k))
        fail(n, std::string("its ") + what + " ('" + n.input(k) +
                    "') is a sparse initializer, which the importer does not read; store it "
                    "dense");
    }
    fail(n, std::string("its ") + what + " ('" + n.input(k) +
                "') is computed by the graph; the engine needs it as an initializer (a "
                "constant of the model)");
  }

  // Unknown attributes are refused rather than ignored: each changes what a node computes.
  void check_attributes(const onnx::NodeProto& n, std::initializer_list<const char*> known) const {
    for (const auto& a : n.attribute()) {
      if (std::none_of(known.begin(), known.end(), [&](const char* k) { return a.name() == k; })) {
        std::string list;
        for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
        fail(n, "attribute '" + a.name() + "' is not supported (supported: " +
                    (list.empty() ? std::string("none") : list) + ")");
      }
    }
  }

  static const onnx::AttributeProto* attribute(const onnx::NodeProto& n, const char* name) {
    for (const auto& a : n.attribute())
      if (a.name() == name) return &a;
    return nullptr;
  }

  // Attribute `name` of `type`, or nullptr when absent; an error when of another type.
  const onnx::AttributeProto* typed(const onnx::NodeProto& n, const char* name,
                                    onnx::AttributeProto::AttributeType type) const {
    const auto* a = attribute(n, name);
    if (a && a->type() != type)
      fail(n, std::string("attribute '") + name + "' is a " +
                  onnx::AttributeProto::AttributeType_Name(a->type()) + "; expected " +
                  onnx::AttributeProto::AttributeType_Name(type));
    return a;
  }

  std::int64_t int_attr(const onnx::NodeProto& n, const char* name, std::int64_t fallback) const {
    const auto* a = typed(n, name, onnx::AttributeProto::INT);
    return a ? a->i() : fallback;
  }

  // No float attribute the importer maps means anything as NaN or infinity (Gemm's alpha,
  // BN's epsilon, LRN's alpha...): such a model would train NaN losses that blame --lr.
  float float_attr(const onnx::NodeProto& n, const char* name, float fallback) const {
    const auto* a = typed(n, name, onnx::AttributeProto::FLOAT);
    if (a != nullptr && !std::isfinite(a->f()))
      fail(n, std::string("attribute ") + name + " = " + std::to_string(a->f()) +
                  "; expected a finite number");
    return a ? a->f() : fallback;
  }

  dims_t ints_attr(const onnx::NodeProto& n, const char* name, dims_t fallback) const {
    const auto* a = typed(n, name, onnx::AttributeProto::INTS);
    return a ? dims_t(a->ints().begin(), a->ints().end()) : fallback;
  }

  std::string string_attr(const onnx::NodeProto& n, const char* name, std::string fallback) const {
    const auto* a = typed(n, name, onnx::AttributeProto::STRING);
    return a ? a->s() : fallback;
  }

  // Outputs past the first must be absent or unused (MaxPool's Indices, Dropout's mask, BN's
  // training statistics): the engine's layers have one output.
  void expect_single_output(const onnx::NodeProto& n, const char* what) const {
    for (int k = 1; k < n.output_size(); ++k)
      if (!n.output(k).empty() && uses(n.output(k)) > 0)
        fail(n, "its output " + std::to_string(k) + " ('" + n.output(k) + "', " + what +
                    ") is used; the engine's layer has one output");
  }

  void define(const onnx::NodeProto& n, layer_handle h, dims_t dims) {
    if (n.output_size() < 1 || n.output(0).empty()) fail(n, "it has no output");
    values_[n.output(0)] = {h, std::move(dims)};
  }

  // A value whose dims are the layout of its layer's output (not a flattened view): the
  // layers that read channels or windows need it.
  const value& laid_out(const onnx::NodeProto& n, int k) const {
    const value& v = input_value(n, k);
    if (v.dims.size() < 2 || v.dims.size() > 4)
      fail(n, "its input '" + n.input(k) + "' has rank " + std::to_string(v.dims.size()) +
                  "; supported: (N, C), (N, C, L) or (N, C, H, W)");
    if (!(as_shape4(v.dims) == out_.builder->shape(v.layer)))
      fail(n, "its input '" + n.input(k) + "' " + text(v.dims) + " is a Flatten/Reshape view of " +
                  to_string(out_.builder->shape(v.layer)) +
                  "; the engine runs this operator only on a tensor as its producer laid it "
                  "out (Flatten/Reshape are supported before Gemm/MatMul, Softmax and "
                  "element-wise operators)");
    return v;
  }

  // Node `n`'s layer `layer` takes initializer `initializer` as its parameter `param`.
  // Called in both passes, so that `plan` refuses what `train` would: the values are checked
  // (finite: a NaN weight trains NaN losses that blame --lr) and kept only when collecting.
  // An initializer is one layer's parameter: two layers reading one (tied weights) would be
  // trained as two and exported as whichever was written last.
  void bind(const onnx::NodeProto& n, const std::string& layer, const char* param,
            const std::string& input, std::vector<float> values, bool transposed = false,
            bool broadcast = false, float scale = 1.0f, const char* scale_attribute = "") {
    const std::string tensor = layer + "." + param;
    const auto a = alias_.find(input);
    const std::string& initializer = a == alias_.end() ? input : a->second;
    const auto [it, fresh] = bound_.emplace(initializer, tensor);
    if (!fresh)
      fail(n, "initializer '" + initializer + "' is also " + it->second +
                  "; tied (shared) weights are not supported: give each node its own copy");
    for (std::size_t i = 0; i < values.size(); ++i)
      if (!std::isfinite(values[i]))
        fail(n, "initializer '" + initializer + "' holds " + std::to_string(values[i]) +
                    " at element " + std::to_string(i) + "; weights must be finite");
    if (!collecting()) return;
    out_.weights[tensor] = std::move(values);
    out_.bindings.push_back({tensor, initializer, transposed, broadcast, scale,
                             scale != 1.0f ? n.output(0) : std::string(),
                             scale != 1.0f ? scale_attribute : ""});
  }

  std::vector<float> vector_of(const onnx::NodeProto& n, int k, const char* what,
                               std::int64_t c) const {
    const onnx::TensorProto& t = input_constant(n, k, what);
    std::vector<float> v = float_values(t, where(n) + " " + what + " '" + n.input(k) + "'");
    if (static_cast<std::int64_t>(v.size()) != c)
      fail(n, std::string("its ") + what + " '" + n.input(k) + "' holds " +
                  std::to_string(v.size()) + " values; expected " + std::to_string(c) +
                  " (one per channel)");
    return v;
  }

  // --- operators -----------------------------------------------------------------------

  void convert(const onnx::NodeProto& n, int index) {
    if (!n.domain().empty() && n.domain() != "ai.onnx")
      fail(n,
           "operator domain '" + n.domain() + "' is not supported (only the default ONNX domain)");
    const std::string& op = n.op_type();
    try {
      if (op == "Conv") return conv(n);
      if (op == "Gemm") return gemm(n);
      if (op == "MatMul") return matmul(n);
      if (op == "MaxPool") return pool(n, pool_mode::max);
      if (op == "AveragePool") return pool(n, pool_mode::average);
      if (op == "GlobalAveragePool") return global_pool(n, pool_mode::average);
      if (op == "GlobalMaxPool") return global_pool(n, pool_mode::max);
      if (op == "Relu") return activation(n, act_mode::relu);
      if (op == "Tanh") return activation(n, act_mode::tanh);
      if (op == "Sigmoid") return activation(n, act_mode::sigmoid);
      if (op == "BatchNormalization") return batch_norm(n);
      if (op == "LRN") return lrn(n);
      if (op == "Dropout") return dropout(n);
      if (op == "Concat") return concat(n);
      if (op == "Add") return add(n);
      if (op == "Flatten") return flatten(n);
      if (op == "Reshape") return reshape(n);
      if (op == "Identity") return identity(n);
      if (op == "Constant") return constant_node(n);
      if (op == "Softmax") return softmax(n);
    } catch (const invalid_argument& e) {
      // The builder's checks name the layer; say which ONNX node it is.
      const std::string what = e.what();
      if (what.rfind("ONNX node", 0) == 0) throw;
      fail(n, what);
    }
    std::string list;
    for (const auto& s : onnx_supported_operators()) list += (list.empty() ? "" : ", ") + s;
    fail(n, "operator " + op + " is not supported (node #" + std::to_string(index) +
                "); supported operators: " + list);
  }

  // Kernel, strides, dilations and pads of a CONV or POOL node over input `x`.
  window read_window(const onnx::NodeProto& n, const dims_t& x, dims_t kernel) const {
    const std::size_t s = x.size() - 2;
    if (s < 1 || s > 2)
      fail(n, "its input has rank " + std::to_string(x.size()) +
                  "; supported: 1-D (N, C, L) and 2-D (N, C, H, W) windows");
    kernel = ints_attr(n, "kernel_shape", kernel);
    if (kernel.size() != s)
      fail(n, "kernel_shape " + text(kernel) + " does not match its " + std::to_string(s) +
                  "-D input");
    const dims_t strides = ints_attr(n, "strides", dims_t(s, 1));
    const dims_t dilations = ints_attr(n, "dilations", dims_t(s, 1));
    dims_t pads = ints_attr(n, "pads", dims_t(2 * s, 0));
    if (strides.size() != s || dilations.size() != s || pads.size() != 2 * s)
      fail(n, "strides " + text(strides) + ", dilations " + text(dilations) + ", pads " +
                  text(pads) + " do not match its " + std::to_string(s) + "-D input");
    // Checked before the SAME padding divides by the stride (a stride of 0 was a SIGFPE)
    // and multiplies kernel and dilation; the builder checks the rest of the geometry.
    constexpr std::int64_t k_most = std::int64_t{1} << 31;
    for (std::size_t i = 0; i < s; ++i)
      if (strides[i] < 1 || dilations[i] < 1 || kernel[i] < 1 || strides[i] > k_most ||
          dilations[i] > k_most || kernel[i] > k_most)
        fail(n, "kernel_shape " + text(kernel) + ", strides " + text(strides) + ", dilations " +
                    text(dilations) + ": expected each from 1 to 2147483648");
    const std::string auto_pad = string_attr(n, "auto_pad", "NOTSET");
    if (auto_pad == "VALID") {
      pads.assign(2 * s, 0);
    } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      for (std::size_t i = 0; i < s; ++i) {
        const std::int64_t in = x[2 + i], st = strides[i];
        const std::int64_t span = (kernel[i] - 1) * dilations[i] + 1;
        const std::int64_t total =
            std::max<std::int64_t>(0, ((in + st - 1) / st - 1) * st + span - in);
        pads[i] = auto_pad == "SAME_LOWER" ? (total + 1) / 2 : total / 2;
        pads[i + s] = total - pads[i];
      }
    } else if (auto_pad != "NOTSET") {
      fail(n, "auto_pad " + quote_text(auto_pad) +
                  " is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER");
    }
    for (std::size_t i = 0; i < s; ++i)
      if (pads[i] != pads[i + s])
        fail(n, "pads " + text(pads) +
                    (auto_pad == "NOTSET" ? "" : " (from auto_pad " + auto_pad + ")") +
                    " pad the two ends of an axis differently; the engine pads both ends "
                    "equally (supported: pads with begin == end)");
    window w;
    w.kh = kernel[0], w.sh = strides[0], w.dh = dilations[0], w.ph = pads[0];
    if (s == 2) w.kw = kernel[1], w.sw = strides[1], w.dw = dilations[1], w.pw = pads[1];
    return w;
  }

  void conv(const onnx::NodeProto& n) {
    check_attributes(n, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
    const value& x = laid_out(n, 0);
    const onnx::TensorProto& w = input_constant(n, 1, "weight W");
    const dims_t wd(w.dims().begin(), w.dims().end());
    if (wd.size() != x.dims.size())
      fail(n, "weight W " + text(wd) + " does not match its input " + text(x.dims) +
                  " (expected (M, C/group, kernel...))");
    const std::int64_t group = int_attr(n, "group", 1);
    // Bounded before the product (a group of 2^62 overflowed it).
    if (group < 1 || group > x.dims[1] || wd[1] < 1 || wd[1] > x.dims[1] ||
        x.dims[1] != wd[1] * group)
      fail(n, "group = " + std::to_string(group) + " and weight W " + text(wd) +
                  " do not match the input's " + std::to_string(x.dims[1]) + " channels");
    const window g = read_window(n, x.dims, dims_t(wd.begin() + 2, wd.end()));
    if (g.kh != wd[2] || (wd.size() == 4 && g.kw != wd[3]))
      fail(n, "kernel_shape disagrees with weight W " + text(wd));
    conv_params p{.out_channels = wd[0],
                  .kernel_h = g.kh,
                  .kernel_w = g.kw,
                  .stride_h = g.sh,
                  .stride_w = g.sw,
                  .pad_h = g.ph,
                  .pad_w = g.pw,
                  .dilation_h = g.dh,
                  .dilation_w = g.dw,
                  .groups = group,
                  .bias = has_input(n, 2)};
    const std::string name = layer_name(n);
    const layer_handle h = out_.builder->conv(x.layer, p, name);
    bind(n, name, "weight", n.input(1), float_values(w, where(n) + " weight '" + n.input(1) + "'"));
    if (p.bias) bind(n, name, "bias", n.input(2), vector_of(n, 2, "bias B", wd[0]));
    define(n, h, dims_of(out_.builder->shape(h), x.dims.size()));
  }

  // A (N, K) input: its per-image features, whichever layer laid them out.
  const value& matrix_input(const onnx::NodeProto& n) const {
    const value& a = input_value(n, 0);
    if (a.dims.size() != 2)
      fail(n, "its input '" + n.input(0) + "' " + text(a.dims) +
                  " is not a matrix (N, K); Flatten it first (batched MatMul is not supported)");
    return a;
  }

  // (K, N) row-major -> (N, K).
  static std::vector<float> transpose(const std::vector<float>& m, std::int64_t rows,
                                      std::int64_t cols) {
    std::vector<float> t(m.size());
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) t[c * rows + r] = m[r * cols + c];
    return t;
  }

  // Gemm's alpha (beta) folded into its weights (bias): the engine trains alpha * B. Refused
  // where the product leaves float's range: a weight scaled to 0 (alpha 1e-45) would train
  // from zero unsaid, one scaled to infinity cannot train.
  void scale_checked(const onnx::NodeProto& n, std::vector<float>& v, float s, const char* attr,
                     const char* what) const {
    if (s == 1.0f) return;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const float x = v[i] * s;
      // A value not finite already is bind's to name (weights must be finite).
      if (std::isfinite(v[i]) && ((v[i] != 0.0f && x == 0.0f) || !std::isfinite(x)))
        fail(n, std::string(attr) + " = " + text(s) + " times its " + what + " element " +
                    std::to_string(i) + " (" + text(v[i]) + ") is " + text(x) +
                    ": the engine trains that product in float32, where it is out of range; "
                    "this model cannot train as it is");
      v[i] = x;
    }
  }

  // FC bias from a constant of (N), (1, N), or one value spread over N (Gemm's broadcast).
  void fc_bias(const onnx::NodeProto& n, int k, const std::string& name, std::int64_t out,
               float beta, bool allow_scalar) {
    const onnx::TensorProto& c = input_constant(n, k, "bias");
    const dims_t cd(c.dims().begin(), c.dims().end());
    const std::int64_t count = product(cd, 0);
    const bool vector = count == out && (cd.size() == 1 || (cd.size() == 2 && cd[0] == 1));
    const bool one = allow_scalar && count == 1;
    if (!vector && !one)
      fail(n, "its bias '" + n.input(k) + "' has shape " + text(cd) + "; supported: (" +
                  std::to_string(out) + "), (1, " + std::to_string(out) + ")" +
                  (allow_scalar ? " or one value" : "") +
                  " (a bias per image of the batch is not a trainable parameter)");
    std::vector<float> v = float_values(c, where(n) + " bias '" + n.input(k) + "'");
    if (!vector) v.assign(static_cast<std::size_t>(out), v[0]);
    scale_checked(n, v, beta, "beta", "bias");
    bind(n, name, "bias", n.input(k), std::move(v), false, !vector, beta, "beta");
  }

  void gemm(const onnx::NodeProto& n) {
    // broadcast (opset < 7) allowed C to broadcast, which every bias the engine takes does.
    check_attributes(n, {"alpha", "beta", "broadcast", "transA", "transB"});
    if (const std::int64_t t = int_attr(n, "transA", 0); t != 0)
      fail(n, "transA = " + std::to_string(t) +
                  " is not supported (only 0: the input must be (N, K), batch first)");
    const bool trans_b = int_attr(n, "transB", 0) != 0;
    const float alpha = float_attr(n, "alpha", 1.0f), beta = float_attr(n, "beta", 1.0f);
    if (alpha == 0.0f) fail(n, "alpha = 0 multiplies the weights away; nothing to train");
    const value& a = matrix_input(n);
    const onnx::TensorProto& b = input_constant(n, 1, "weight B");
    const dims_t bd(b.dims().begin(), b.dims().end());
    const std::int64_t k = a.dims[1];
    if (bd.size() != 2 || bd[trans_b ? 1 : 0] != k)
      fail(n, "weight B " + text(bd) + " with transB = " + std::to_string(trans_b) +
                  " does not match its input " + text(a.dims) + " (expected " +
                  (trans_b ? "(N, " + std::to_string(k) + ")" : "(" + std::to_string(k) + ", N)") +
                  ")");
    const std::int64_t out = bd[trans_b ? 0 : 1];
    const bool bias = has_input(n, 2) && beta != 0.0f;
    const std::string name = layer_name(n);
    const layer_handle h =
        out_.builder->fc(a.layer, fc_params{.out_features = out, .bias = bias}, name);
    {
      std::vector<float> w = float_values(b, where(n) + " weight '" + n.input(1) + "'");
      if (!trans_b && collecting()) w = transpose(w, k, out);
      scale_checked(n, w, alpha, "alpha", "weight B");
      bind(n, name, "weight", n.input(1), std::move(w), !trans_b, false, alpha, "alpha");
    }
    if (bias) fc_bias(n, 2, name, out, beta, true);
    define(n, h, {batch_, out});
  }

  // MatMul(X, W) with W constant (K, N) is an FC; an Add of a constant (N) right after it,
  // as exporters write Linear layers, is its bias.
  void matmul(const onnx::NodeProto& n) {
    check_attributes(n, {});
    const value& a = matrix_input(n);
    const onnx::TensorProto& b = input_constant(n, 1, "weight (right-hand side)");
    const dims_t bd(b.dims().begin(), b.dims().end());
    if (bd.size() != 2 || bd[0] != a.dims[1])
      fail(n, "weight '" + n.input(1) + "' " + text(bd) + " does not match its input " +
                  text(a.dims) + " (expected (" + std::to_string(a.dims[1]) + ", N))");
    const std::int64_t out = bd[1];
    const onnx::NodeProto* bias_add = nullptr;
    int bias_k = 0;
    const std::string& y = n.output(0);
    if (auto it = consumers_.find(y);
        it != consumers_.end() && it->second.size() == 1 && uses(y) == 1) {
      const int j = it->second[0];
      const onnx::NodeProto& next = graph_.node(j);
      if (next.op_type() == "Add" && next.input_size() == 2 && next.attribute_size() == 0) {
        bias_k = next.input(0) == y ? 1 : 0;
        if (next.input(1 - bias_k) == y && constant_from_anywhere(next.input(bias_k))) {
          bias_add = &next;
          fused_.insert(j);
        }
      }
    }
    const std::string name = layer_name(n);
    const layer_handle h = out_.builder->fc(
        a.layer, fc_params{.out_features = out, .bias = bias_add != nullptr}, name);
    {
      std::vector<float> w = float_values(b, where(n) + " weight '" + n.input(1) + "'");
      if (collecting()) w = transpose(w, bd[0], out);
      bind(n, name, "weight", n.input(1), std::move(w), true);
    }
    define(n, h, {batch_, out});
    if (bias_add) {
      fc_bias(*bias_add, bias_k, name, out, 1.0f, false);
      define(*bias_add, h, {batch_, out});
    }
  }

  void pool(const onnx::NodeProto& n, pool_mode mode) {
    if (mode == pool_mode::max) {
      check_attributes(n, {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads",
                           "storage_order", "strides"});
      expect_single_output(n, "Indices");
    } else {
      check_attributes(
          n, {"auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides"});
    }
    const value& x = laid_out(n, 0);
    if (!attribute(n, "kernel_shape")) fail(n, "attribute 'kernel_shape' is required");
    if (const std::int64_t c = int_attr(n, "ceil_mode", 0); c != 0)
      fail(n, "ceil_mode = " + std::to_string(c) +
                  " is not supported (only 0: the engine's pooling rounds the output size "
                  "down)");
    const window g = read_window(n, x.dims, {});
    if (g.dh != 1 || g.dw != 1) fail(n, "dilations other than 1 are not supported for pooling");
    if (mode == pool_mode::average && (g.ph > 0 || g.pw > 0) &&
        int_attr(n, "count_include_pad", 0) == 0)
      fail(n,
           "padding with count_include_pad = 0 is not supported: the engine's average "
           "pooling divides by the whole window, padding included (export with "
           "count_include_pad = 1, or without padding)");
    pool_params p{.mode = mode,
                  .kernel_h = g.kh,
                  .kernel_w = g.kw,
                  .stride_h = g.sh,
                  .stride_w = g.sw,
                  .pad_h = g.ph,
                  .pad_w = g.pw};
    const layer_handle h = out_.builder->pool(x.layer, p, layer_name(n));
    define(n, h, dims_of(out_.builder->shape(h), x.dims.size()));
  }

  void global_pool(const onnx::NodeProto& n, pool_mode mode) {
    check_attributes(n, {});
    const value& x = laid_out(n, 0);
    if (x.dims.size() < 3) fail(n, "its input " + text(x.dims) + " has no spatial dimensions");
    const layer_handle h =
        out_.builder->pool(x.layer, pool_params{.mode = mode, .global = true}, layer_name(n));
    define(n, h, dims_of(out_.builder->shape(h), x.dims.size()));
  }

  void activation(const onnx::NodeProto& n, act_mode mode) {
    check_attributes(n, {});
    const value& x = input_value(n, 0);
    const dims_t dims = x.dims;
    define(n, out_.builder->act(x.layer, act_params{mode}, layer_name(n)), dims);
  }

  void batch_norm(const onnx::NodeProto& n) {
    check_attributes(
        n, {"epsilon", "momentum", "spatial", "training_mode", "is_test", "consumed_inputs"});
    if (int_attr(n, "spatial", 1) != 1)
      fail(n,
           "spatial = 0 (statistics per element) is not supported; the engine normalizes per "
           "channel");
    if (const std::int64_t t = int_attr(n, "training_mode", 0); t != 0)
      fail(n, "training_mode = " + std::to_string(t) +
                  " is not supported (only 0): export the model in evaluation mode "
                  "(memweave's training updates the statistics itself)");
    expect_single_output(n, "a training statistic");
    const value& x = laid_out(n, 0);
    const std::int64_t c = x.dims[1];
    // ONNX: running = momentum * running + (1 - momentum) * batch; the engine's momentum
    // weighs the batch.
    const float momentum = float_attr(n, "momentum", 0.9f);
    if (!(momentum >= 0.0f && momentum <= 1.0f))
      fail(n, "momentum = " + std::to_string(momentum) + "; expected a value in [0, 1]");
    bn_params p{.epsilon = float_attr(n, "epsilon", 1e-5f), .momentum = 1.0f - momentum};
    const std::string name = layer_name(n);
    const dims_t dims = x.dims;
    const layer_handle h = out_.builder->bn(x.layer, p, name);
    const char* params[] = {"gamma", "beta", "running_mean", "running_var"};
    const char* what[] = {"scale", "bias B", "mean", "var"};
    for (int k = 1; k <= 4; ++k) {
      std::vector<float> v = vector_of(n, k, what[k - 1], c);
      if (k == 4) {
        // A negative variance has no square root: evaluation would print NaN losses.
        for (std::size_t i = 0; i < v.size(); ++i)
          if (v[i] < 0.0f)
            fail(n, "its var '" + n.input(k) + "' holds " + std::to_string(v[i]) + " for channel " +
                        std::to_string(i) + "; a variance is >= 0");
      }
      bind(n, name, params[k - 1], n.input(k), std::move(v));
    }
    define(n, h, dims);
  }

  void lrn(const onnx::NodeProto& n) {
    check_attributes(n, {"alpha", "beta", "bias", "size"});
    if (!attribute(n, "size")) fail(n, "attribute 'size' is required");
    const std::int64_t size = int_attr(n, "size", 0);
    if (size < 1 || size % 2 == 0)
      fail(n, "size = " + std::to_string(size) +
                  "; the engine's window is centred: supported: an odd size >= 1");
    const value& x = laid_out(n, 0);
    lrn_params p{.size = size,
                 .alpha = float_attr(n, "alpha", 1e-4f),
                 .beta = float_attr(n, "beta", 0.75f),
                 .k = float_attr(n, "bias", 1.0f)};
    const dims_t dims = x.dims;
    define(n, out_.builder->lrn(x.layer, p, layer_name(n)), dims);
  }

  // The engine drops at training and passes through at evaluation, whatever the model's
  // training_mode input or is_test attribute says (they describe the exporter's run).
  void dropout(const onnx::NodeProto& n) {
    check_attributes(n, {"ratio", "seed", "is_test"});
    expect_single_output(n, "mask");
    const value& x = input_value(n, 0);
    float ratio = float_attr(n, "ratio", 0.5f);
    if (has_input(n, 1)) {
      const auto v = float_values(input_constant(n, 1, "ratio"), where(n) + " ratio");
      if (v.size() != 1)
        fail(n, "its ratio holds " + std::to_string(v.size()) + " values; expected one");
      ratio = v[0];
    }
    const dims_t dims = x.dims;
    define(n, out_.builder->dropout(x.layer, dropout_params{ratio}, layer_name(n)), dims);
  }

  void concat(const onnx::NodeProto& n) {
    check_attributes(n, {"axis"});
    if (!attribute(n, "axis")) fail(n, "attribute 'axis' is required");
    std::vector<layer_handle> xs;
    dims_t dims;
    for (int k = 0; k < n.input_size(); ++k) {
      const value& v = laid_out(n, k);
      if (k == 0) {
        dims = v.dims;
        dims[1] = 0;
      }
      std::int64_t axis = int_attr(n, "axis", 1);
      if (axis < 0) axis += static_cast<std::int64_t>(v.dims.size());
      if (axis != 1)
        fail(n, "axis = " + std::to_string(int_attr(n, "axis", 1)) +
                    " is not the channel axis (1); the engine concatenates channels only");
      if (v.dims.size() != dims.size()) fail(n, "its inputs differ in rank");
      dims[1] += v.dims[1];
      xs.push_back(v.layer);
    }
    if (xs.size() == 1) return define(n, xs[0], dims);
    define(n, out_.builder->concat(std::span<const layer_handle>(xs), layer_name(n)), dims);
  }

  void add(const onnx::NodeProto& n) {
    check_attributes(n, {});
    for (int k = 0; k < 2; ++k)
      if (has_input(n, k) && constant(n.input(k)) && !values_.count(n.input(k)))
        fail(n, "adding the constant '" + n.input(k) +
                    "' is supported only as the bias right after a MatMul (MatMul + Add -> "
                    "FC); the engine's ADD sums two computed tensors of one shape");
    if (n.input_size() != 2) fail(n, "expected 2 inputs");
    const value& a = input_value(n, 0);
    const value& b = input_value(n, 1);
    if (a.dims != b.dims)
      fail(
          n,
          "its inputs " + text(a.dims) + " and " + text(b.dims) +
              " differ in shape; broadcasting is not supported (the engine's ADD needs one shape)");
    const dims_t dims = a.dims;
    define(n, out_.builder->add({a.layer, b.layer}, layer_name(n)), dims);
  }

  // A view of (N, features), batch first: what FC and the loss read anyway.
  void flat_view(const onnx::NodeProto& n, const value& x, const dims_t& to) {
    if (to.size() != 2 || to[0] != batch_ || to[1] != product(x.dims, 1))
      fail(n, "it reshapes " + text(x.dims) + " to " + text(to) +
                  "; supported only to (batch, features) = (" + std::to_string(batch_) + ", " +
                  std::to_string(product(x.dims, 1)) +
                  "), before Gemm/MatMul, Softmax or "
                  "element-wise operators");
    values_[n.output(0)] = {x.layer, to};
  }

  void flatten(const onnx::NodeProto& n) {
    check_attributes(n, {"axis"});
    const value& x = input_value(n, 0);
    std::int64_t axis = int_attr(n, "axis", 1);
    if (axis < 0) axis += static_cast<std::int64_t>(x.dims.size());
    if (axis != 1)
      fail(n, "axis = " + std::to_string(int_attr(n, "axis", 1)) +
                  "; supported: 1 (keep the batch, flatten the rest)");
    const value copy = x;
    flat_view(n, copy, {batch_, product(copy.dims, 1)});
  }

  void reshape(const onnx::NodeProto& n) {
    check_attributes(n, {"allowzero", "shape"});
    const value x = input_value(n, 0);
    dims_t shape;
    if (has_input(n, 1)) {
      shape = int64_values(input_constant(n, 1, "shape"), where(n) + " shape '" + n.input(1) + "'");
    } else {
      shape = ints_attr(n, "shape", {});  // opset < 5
    }
    const bool allow_zero = int_attr(n, "allowzero", 0) != 0;
    dims_t to = shape;
    std::int64_t known = 1;
    int infer = -1;
    for (std::size_t i = 0; i < to.size(); ++i) {
      if (to[i] == 0 && !allow_zero) {
        if (i >= x.dims.size())
          fail(n, "shape " + text(shape) + " copies a dimension its input lacks");
        to[i] = x.dims[i];
      } else if (to[i] == -1) {
        if (infer >= 0) fail(n, "shape " + text(shape) + " has two -1");
        infer = static_cast<int>(i);
        continue;
      } else if (i == 0 && model_batch_ > 0 && to[i] == model_batch_) {
        // The batch the model was exported with, now --batch. Not a 0 where the file's batch
        // is symbolic (model_batch_ 0): with allowzero that asks for an empty tensor, which
        // was taken for the batch (session 42's hostile run).
        to[i] = batch_;
      }
      if (to[i] < 0 || __builtin_mul_overflow(known, to[i], &known))
        fail(n, "shape " + text(shape) + " is not a shape of the input's " +
                    std::to_string(product(x.dims, 0)) + " elements");
    }
    const std::int64_t total = product(x.dims, 0);
    if (infer >= 0) {
      if (known <= 0 || total % known != 0)
        fail(n, "shape " + text(shape) + " does not divide the input's " + std::to_string(total) +
                    " elements");
      to[static_cast<std::size_t>(infer)] = total / known;
    } else if (known != total) {
      fail(n, "shape " + text(shape) + " is not a shape of the input's " + std::to_string(total) +
                  " elements");
    }
    if (to == x.dims) return (void)(values_[n.output(0)] = x);
    flat_view(n, x, to);
  }

  void identity(const onnx::NodeProto& n) {
    check_attributes(n, {});
    if (const auto* t = constant(n.input(0)); t && !values_.count(n.input(0))) {
      constants_[n.output(0)] = t;
      // The constant it passes on, through any Identity before it.
      const auto a = alias_.find(n.input(0));
      alias_[n.output(0)] = a == alias_.end() ? n.input(0) : a->second;
      return;
    }
    values_[n.output(0)] = input_value(n, 0);
  }

  void constant_node(const onnx::NodeProto& n) {
    check_attributes(n, {"value"});
    const auto* a = attribute(n, "value");
    if (!a || a->type() != onnx::AttributeProto::TENSOR)
      fail(n,
           "only a tensor 'value' is supported (not value_float, value_ints, sparse_value, ...)");
    constants_[n.output(0)] = &a->t();
  }

  // Softmax over each image's features, as the engine's loss computes it: it must produce
  // the graph's output.
  void softmax(const onnx::NodeProto& n) {
    check_attributes(n, {"axis"});
    const value& x = input_value(n, 0);
    const std::int64_t rank = static_cast<std::int64_t>(x.dims.size());
    std::int64_t axis = int_attr(n, "axis", out_.opset >= 13 ? -1 : 1);
    if (axis < 0) axis += rank;
    // Before opset 13 Softmax flattens from `axis`; from 13 it normalizes along `axis` alone,
    // the same when every other non-batch dimension is 1.
    const bool per_image = out_.opset < 13
                               ? axis == 1
                               : axis >= 1 && axis < rank &&
                                     product(x.dims, 1) == x.dims[static_cast<std::size_t>(axis)];
    if (!per_image)
      fail(n, "axis = " + std::to_string(int_attr(n, "axis", 0)) + " on " + text(x.dims) +
                  " (opset " + std::to_string(out_.opset) +
                  ") is not a softmax over each image's features; the engine's loss layer "
                  "computes that one only");
    if (n.output(0) != graph_.output(0).name())
      fail(n,
           "Softmax is supported only as the graph's output (the engine's loss layer); this "
           "one writes '" +
               n.output(0) + "', the graph's output is '" + graph_.output(0).name() + "'");
    if (uses(n.output(0)) != 1)
      fail(n,
           "Softmax is supported only as the graph's output (the engine's loss layer), read "
           "by nothing else; another node reads '" +
               n.output(0) + "' too");
    out_.softmax_node = layer_name(n);
    out_.logits = x.layer;
    out_.logits_value = n.input(0);
    out_.logits_per_image = product(x.dims, 1);
  }

  void finish(const std::string& output) {
    if (out_.softmax_node.empty()) {
      auto it = values_.find(output);
      if (it == values_.end())
        throw invalid_argument("the graph's output '" + output +
                               "' is not computed from its input (a constant?)");
      out_.logits = it->second.layer;
      out_.logits_value = output;
      out_.logits_per_image = product(it->second.dims, 1);
      // The loss memweave appends takes one vector per image: a map of scores per position (a
      // segmentation head) trains as one classification over every score of the image, which
      // is seldom what such a model means (a Softmax of the model's own that reads them so,
      // opset 11's over axes 1 and on, says it is).
      const std::int64_t positions = product(it->second.dims, 2);
      if (classes_ > 0 && positions > 1) {
        log(log_level::warn, "the scores '" + output + "' have " + std::to_string(positions) +
                                 " positions per image: memweave trains them as one "
                                 "classification over all " +
                                 std::to_string(out_.logits_per_image) +
                                 " values of an image (one label each), not one per position; "
                                 "pool or flatten them in the model if that is not meant");
      }
    }
    if (classes_ > 0) {
      // The loss layer memweave appends takes a name no node of the model has (a node named
      // '<output>_loss' made a clash naming a layer the user never wrote).
      std::string name = out_.softmax_node;
      if (name.empty()) {
        name = output + "_loss";
        for (int k = 2; out_.builder->has_layer(name); ++k) {
          name = output + "_loss" + std::to_string(k);
        }
      }
      out_.builder->softmax_loss(out_.logits, name);
    }
  }

  const onnx::ModelProto& model_;
  const onnx::GraphProto& graph_;
  std::int64_t batch_;
  std::int64_t model_batch_ = 0;  // the input's fixed batch in the file (0: symbolic)
  std::int64_t classes_;
  bool weights_;  // collect the weights (in the pass with classes known)
  conversion out_;
  std::unordered_map<std::string, value> values_;
  std::unordered_map<std::string, const onnx::TensorProto*> constants_;
  std::unordered_map<std::string, int> uses_;
  std::unordered_map<std::string, std::vector<int>> consumers_;
  std::set<int> fused_;  // Add nodes folded into the MatMul before them
  std::unordered_map<std::string, std::string> bound_;  // initializer -> "layer.param" it is
  // An Identity's output that passes a constant on -> the constant's own name (an initializer
  // or a Constant node's output): a weight bound through it is that constant's, for the
  // tied-weights check and for export.
  std::unordered_map<std::string, std::string> alias_;
};

}  // namespace

conversion convert_graph(const onnx::ModelProto& model, const std::string& name, std::int64_t batch,
                         std::int64_t classes, bool weights) {
  return converter(model, name, batch, classes, weights).run();
}

}  // namespace memweave::onnx_detail
