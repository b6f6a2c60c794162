// The ONNX backend test data Debian ships (libonnx-testdata: node tests and PyTorch-converted
// ones, each a model.onnx with test_data_set_0/input_*.pb and output_0.pb), run through
// import_onnx and the engine's evaluation pass (executor::evaluate: BN on running statistics,
// dropout off) on the host device and compared with the expected outputs: a test suite
// written by the ONNX project, not here. Not listed: the Dropout cases in training mode with
// a ratio above 0 (test_training_dropout, _default), whose expected output is one draw of
// ONNX's random mask.
//
// The engine's networks read one input (the DATA layer) and end in a loss, so each case is
// adapted the way a user would: the node's other inputs (weights, BN statistics) become
// initializers with their test values; the compared value is the output of the layer that
// produces the graph's output (watched in the executor), or the loss layer's probabilities
// when the graph ends in Softmax. Every case listed runs and must match within
// |got - want| <= k_atol + k_rtol * |want| (float32); the cases the engine cannot express are
// listed with the error import_onnx must give for them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "memweave/core/error.hpp"
#include "memweave/device/device.hpp"
#include "memweave/engine/data_source.hpp"
#include "memweave/engine/executor.hpp"
#include "memweave/onnx/import_onnx.hpp"
#include "onnx/onnx_pb.h"
#include "onnx_test_models.hpp"

namespace memweave {
namespace {

namespace fs = std::filesystem;

const fs::path k_data = "/usr/share/libonnx-testdata/data";
constexpr float k_atol = 1e-5f;
constexpr float k_rtol = 1e-4f;

template <class M>
M parse(const fs::path& path) {
  M m;
  std::ifstream in(path, std::ios::binary);
  if (!in || !m.ParseFromIstream(&in)) throw std::runtime_error("cannot parse " + path.string());
  return m;
}

std::vector<float> values(const onnx::TensorProto& t) {
  if (t.data_type() != onnx::TensorProto::FLOAT) return {};
  if (t.has_raw_data()) {
    std::vector<float> v(t.raw_data().size() / sizeof(float));
    std::memcpy(v.data(), t.raw_data().data(), t.raw_data().size());
    return v;
  }
  return {t.float_data().begin(), t.float_data().end()};
}

// One fixed batch: the case's input, label 0.
class fixed_source : public data_source {
 public:
  fixed_source(std::vector<float> images, shape4 shape, std::int64_t classes)
      : images_(std::move(images)), shape_(shape), classes_(classes) {}
  std::string name() const override { return "onnx test data"; }
  shape4 image_shape() const override { return shape_; }
  std::int64_t classes() const override { return classes_; }
  void fill(std::int64_t, std::int64_t n, float* images, float* labels) override {
    std::copy(images_.begin(), images_.end(), images);
    std::fill(labels, labels + n, 0.0f);
  }

 private:
  std::vector<float> images_;
  shape4 shape_;
  std::int64_t classes_;
};

struct case_result {
  bool imported = false;
  std::string error;  // import's message when not imported, else a mismatch ("" = match)
  std::size_t compared = 0;
};

// Runs the case in `dir`: returns whether it imported, and how it compared.
case_result run_case(const fs::path& dir) {
  case_result r;
  onnx::ModelProto model = parse<onnx::ModelProto>(dir / "model.onnx");
  const fs::path set = dir / "test_data_set_0";
  // Graph inputs that are not initializers take input_<k>.pb in order; all but the first
  // become initializers.
  auto* g = model.mutable_graph();
  std::vector<std::string> initialized;
  for (const auto& t : g->initializer()) initialized.push_back(t.name());
  std::vector<float> image;
  int k = 0;
  for (const auto& in : g->input()) {
    if (std::find(initialized.begin(), initialized.end(), in.name()) != initialized.end()) continue;
    const fs::path pb = set / ("input_" + std::to_string(k) + ".pb");
    onnx::TensorProto t = parse<onnx::TensorProto>(pb);
    if (k++ == 0) {
      image = values(t);
      continue;
    }
    t.set_name(in.name());
    *g->add_initializer() = t;
  }
  const fs::path tmp =
      fs::temp_directory_path() / ("memweave_onnx_case_" + std::to_string(::getpid()) + ".onnx");
  {
    std::ofstream out(tmp, std::ios::binary);
    model.SerializeToOstream(&out);
  }
  std::optional<imported_model> m;
  try {
    const onnx::TensorProto first = parse<onnx::TensorProto>(set / "input_0.pb");
    m.emplace(import_onnx(tmp.string(), first.dims_size() > 0 ? first.dims(0) : 0, "case"));
  } catch (const invalid_argument& e) {
    r.error = e.what();
    fs::remove(tmp);
    return r;
  }
  fs::remove(tmp);
  r.imported = true;
  const network& net = m->net;
  test::imported_run run = test::start_imported(*m, "liveness");
  executor& ex = *run.ex;
  const std::string watched =
      (m->softmax_in_model ? net[net.loss_layer()].name : m->output_layer) + ".y";
  ex.watch(watched);
  fixed_source source(image, net[net.data_layer()].output_shape, net.classes());
  ex.evaluate(&source, 0, 1);
  const std::vector<float> got = ex.read(watched);
  const std::vector<float> want = values(parse<onnx::TensorProto>(set / "output_0.pb"));
  if (got.size() != want.size()) {
    r.error =
        "got " + std::to_string(got.size()) + " values, expected " + std::to_string(want.size());
    return r;
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= k_atol + k_rtol * std::fabs(want[i]))) {
      r.error = "value " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", expected " +
                std::to_string(want[i]);
      return r;
    }
  }
  r.compared = got.size();
  return r;
}

bool have_data() {
  return fs::exists(k_data / "node");
}

// Every case of the operators the importer maps that the engine can express.
const std::vector<std::string> k_matching = {
    "node/test_averagepool_1d_default",
    "node/test_averagepool_2d_default",
    "node/test_averagepool_2d_pads_count_include_pad",
    "node/test_averagepool_2d_precomputed_pads_count_include_pad",
    "node/test_averagepool_2d_precomputed_strides",
    "node/test_averagepool_2d_strides",
    "node/test_basic_conv_with_padding",
    "node/test_basic_conv_without_padding",
    "node/test_batchnorm_epsilon",
    "node/test_batchnorm_example",
    "node/test_conv_with_autopad_same",
    "node/test_conv_with_strides_and_asymmetric_padding",
    "node/test_conv_with_strides_no_padding",
    "node/test_conv_with_strides_padding",
    "node/test_dropout_default",
    "node/test_dropout_default_ratio",
    "node/test_dropout_random_old",
    "node/test_flatten_axis1",
    "node/test_flatten_default_axis",
    "node/test_flatten_negative_axis3",
    "node/test_gemm_alpha",
    "node/test_gemm_beta",
    "node/test_gemm_default_no_bias",
    "node/test_gemm_default_scalar_bias",
    "node/test_gemm_default_single_elem_vector_bias",
    "node/test_gemm_default_vector_bias",
    "node/test_gemm_default_zero_bias",
    "node/test_gemm_transposeB",
    "node/test_globalaveragepool",
    "node/test_globalaveragepool_precomputed",
    "node/test_globalmaxpool",
    "node/test_globalmaxpool_precomputed",
    "node/test_identity",
    "node/test_lrn",
    "node/test_lrn_default",
    "node/test_matmul_2d",
    "node/test_maxpool_1d_default",
    "node/test_maxpool_2d_default",
    "node/test_maxpool_2d_pads",
    "node/test_maxpool_2d_precomputed_pads",
    "node/test_maxpool_2d_precomputed_same_upper",
    "node/test_maxpool_2d_precomputed_strides",
    "node/test_maxpool_2d_strides",
    "node/test_relu",
    "node/test_reshape_reduced_dims",
    "node/test_sigmoid",
    "node/test_softmax_example",
    "node/test_softmax_large_number",
    "node/test_tanh",
    "node/test_training_dropout_zero_ratio",
    "pytorch-converted/test_AvgPool2d",
    "pytorch-converted/test_AvgPool2d_stride",
    "pytorch-converted/test_BatchNorm1d_3d_input_eval",
    "pytorch-converted/test_BatchNorm2d_eval",
    "pytorch-converted/test_BatchNorm2d_momentum_eval",
    "pytorch-converted/test_Conv1d",
    "pytorch-converted/test_Conv1d_dilated",
    "pytorch-converted/test_Conv1d_groups",
    "pytorch-converted/test_Conv1d_pad1",
    "pytorch-converted/test_Conv1d_pad1size1",
    "pytorch-converted/test_Conv1d_pad2",
    "pytorch-converted/test_Conv1d_pad2size1",
    "pytorch-converted/test_Conv1d_stride",
    "pytorch-converted/test_Conv2d",
    "pytorch-converted/test_Conv2d_depthwise",
    "pytorch-converted/test_Conv2d_depthwise_padded",
    "pytorch-converted/test_Conv2d_depthwise_strided",
    "pytorch-converted/test_Conv2d_depthwise_with_multiplier",
    "pytorch-converted/test_Conv2d_dilated",
    "pytorch-converted/test_Conv2d_groups",
    "pytorch-converted/test_Conv2d_groups_thnn",
    "pytorch-converted/test_Conv2d_no_bias",
    "pytorch-converted/test_Conv2d_padding",
    "pytorch-converted/test_Conv2d_strided",
    "pytorch-converted/test_Linear",
    "pytorch-converted/test_MaxPool1d",
    "pytorch-converted/test_MaxPool1d_stride",
    "pytorch-converted/test_MaxPool2d",
    "pytorch-converted/test_ReLU",
    "pytorch-converted/test_Sigmoid",
    "pytorch-converted/test_Softmax",
    "pytorch-converted/test_Tanh",
    "pytorch-converted/test_softmax_lastdim",
    "pytorch-operator/test_operator_conv",
    "pytorch-operator/test_operator_flatten",
    "pytorch-operator/test_operator_maxpool",
    "pytorch-operator/test_operator_mm",
    "simple/test_single_relu_model",
};

// Cases the engine cannot express, one or two per reason, with what import_onnx says.
const std::vector<std::pair<std::string, std::string>> k_refused = {
    {"node/test_leakyrelu", "operator LeakyRelu is not supported"},
    {"node/test_logsoftmax_axis_1", "operator LogSoftmax is not supported"},
    {"node/test_convtranspose", "operator ConvTranspose is not supported"},
    {"pytorch-converted/test_Conv3d", "has rank 5"},
    {"node/test_maxpool_2d_same_upper", "pad the two ends of an axis differently"},
    {"node/test_averagepool_2d_pads", "count_include_pad = 0"},
    {"node/test_maxpool_2d_ceil", "ceil_mode = 1"},
    {"node/test_maxpool_2d_dilations", "dilations other than 1"},
    {"node/test_matmul_3d", "batched MatMul is not supported"},
    {"node/test_gemm_transposeA", "transA = 1"},
    {"node/test_gemm_default_matrix_bias", "a bias per image"},
    {"pytorch-operator/test_operator_addmm", "tied (shared) weights are not supported"},
    {"node/test_dropout_default_mask", "the graph has 2 outputs"},
    {"node/test_concat_2d_axis_0", "axis = 0 is not the channel axis"},
    {"node/test_reshape_reordered_all_dims", "supported only to (batch, features)"},
    {"node/test_flatten_axis2", "axis = 2; supported: 1"},
    {"node/test_softmax_axis_1", "not a softmax over each image's features"},
    {"node/test_add", "adding the constant"},
    {"node/test_maxpool_2d_uint8", "expected a FLOAT tensor"},
};

TEST(OnnxBackendData, EveryExpressibleCaseMatchesTheExpectedOutput) {
  if (!have_data()) GTEST_SKIP() << k_data << " is missing: install libonnx-testdata";
  std::size_t values = 0;
  for (const auto& c : k_matching) {
    const case_result r = run_case(k_data / c);
    EXPECT_TRUE(r.imported && r.error.empty()) << c << ": " << r.error;
    values += r.compared;
  }
  std::printf("%zu ONNX backend test cases matched (%zu values, |got - want| <= %g + %g |want|)\n",
              k_matching.size(), values, static_cast<double>(k_atol), static_cast<double>(k_rtol));
}

// The same harness on cases the onnx Python helper writes with numpy's expected outputs,
// for what the backend data cannot give one input: ADD and CONCAT joins, MatMul + Add with a
// Gemm after it.
TEST(OnnxBackendData, JoinsAndFullyConnectedLayersMatchNumpy) {
  MEMWEAVE_ONNX_MODELS_OR_SKIP();
  for (const char* c : {"case_add_concat", "case_fc"}) {
    const case_result r = run_case(fs::path(test::onnx_models_dir()) / c);
    EXPECT_TRUE(r.imported && r.error.empty()) << c << ": " << r.error;
    EXPECT_GT(r.compared, 0u) << c;
  }
}

TEST(OnnxBackendData, CasesTheEngineCannotExpressAreRefusedNamingWhy) {
  if (!have_data()) GTEST_SKIP() << k_data << " is missing: install libonnx-testdata";
  for (const auto& [c, why] : k_refused) {
    const case_result r = run_case(k_data / c);
    EXPECT_FALSE(r.imported) << c;
    EXPECT_NE(r.error.find(why), std::string::npos) << c << ": " << r.error;
  }
}

}  // namespace
}  // namespace memweave
