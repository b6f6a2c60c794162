// Model files are read whole and parsed with protobuf; the ONNX checker then rejects what
// parses but is not a well-formed model (a foreign protobuf often parses as an empty one).
#include "onnx_model_file.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "memweave/core/atomic_file.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/quoted.hpp"
#include "onnx/checker.h"

namespace memweave::onnx_detail {

namespace {

static_assert(std::endian::native == std::endian::little,
              "ONNX raw_data is little-endian; this reader copies it as is");

std::string file_error(const std::string& knob, const std::string& path, const std::string& why) {
  return knob + " " + path + ": " + why;
}

template <class T>
std::vector<T> raw_values(const onnx::TensorProto& t, std::int64_t count, const std::string& what) {
  const std::string& raw = t.raw_data();
  if (raw.size() != static_cast<std::size_t>(count) * sizeof(T))
    throw invalid_argument(what + ": raw_data holds " + std::to_string(raw.size()) +
                           " bytes; its dims need " +
                           std::to_string(static_cast<std::size_t>(count) * sizeof(T)));
  std::vector<T> v(static_cast<std::size_t>(count));
  if (count > 0) std::memcpy(v.data(), raw.data(), raw.size());
  return v;
}

// Refuses a tensor whose data lives outside the model file, which the importer does not read.
void expect_inside(const onnx::TensorProto& t, const std::string& what) {
  if (t.data_location() == onnx::TensorProto::EXTERNAL)
    throw invalid_argument(what +
                           ": its data is stored outside the model file (external "
                           "data), which the importer does not read; save the model with "
                           "its weights inside (onnx.save(..., save_as_external_data=False))");
}

void expect_type(const onnx::TensorProto& t, std::int32_t type, const std::string& what) {
  expect_inside(t, what);
  if (t.data_type() != type)
    throw invalid_argument(what + ": element type " + data_type_name(t.data_type()) +
                           "; expected " + data_type_name(type));
}

}  // namespace

std::string data_type_name(std::int32_t type) {
  if (onnx::TensorProto::DataType_IsValid(type))
    return onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(type));
  return "type " + std::to_string(type);
}

onnx::ModelProto load_model(const std::string& path, const std::string& knob) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw invalid_argument(file_error(knob, path, "no such file (expected an ONNX model, .onnx)"));
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw invalid_argument(file_error(
        knob, path,
        std::string(std::filesystem::is_directory(path, ec) ? "is a directory"
                                                            : "is not a regular file (a device "
                                                              "or a pipe)") +
            " (expected an ONNX model file, .onnx)"));
  }
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const std::streamsize size = in ? static_cast<std::streamsize>(in.tellg()) : -1;
  if (size > std::numeric_limits<int>::max())
    throw invalid_argument(
        file_error(knob, path, "larger than the 2 GiB a protobuf message holds"));
  std::string bytes(static_cast<std::size_t>(std::max<std::streamsize>(size, 0)), '\0');
  if (size < 0 || !in.seekg(0) || !in.read(bytes.data(), size))
    throw invalid_argument(
        file_error(knob, path, std::string("cannot be read (") + std::strerror(errno) + ")"));
  onnx::ModelProto model;
  if (bytes.empty() || !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    throw invalid_argument(file_error(
        knob, path,
        "is not an ONNX model (" + std::to_string(bytes.size()) +
            " bytes that do not parse as onnx.ModelProto: truncated, or another format)"));
  if (!model.has_graph() || model.ir_version() <= 0)
    throw invalid_argument(file_error(knob, path,
                                      "parses but holds no ONNX graph or IR version: not an "
                                      "ONNX model (truncated, or another protobuf)"));
  // External data is refused before the checker runs: the checker looks for the files
  // (relative to the working directory, not the model's), so whether a location exists
  // changed the message, and the message told whether any path exists (session 42's hostile
  // run). The importer does not read external data anyway.
  for (const onnx::TensorProto& t : model.graph().initializer()) {
    expect_inside(t, file_error(knob, path, "initializer " + quote_text(t.name())));
  }
  for (const onnx::NodeProto& n : model.graph().node()) {
    for (const onnx::AttributeProto& a : n.attribute()) {
      if (a.type() == onnx::AttributeProto::TENSOR) {
        expect_inside(a.t(),
                      file_error(knob, path, "node " + quote_text(n.name()) + "'s " + a.name()));
      }
    }
  }
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    throw invalid_argument(
        file_error(knob, path, std::string("not a valid ONNX model: ") + e.what()));
  }
  return model;
}

void save_model(const onnx::ModelProto& model, const std::string& path) {
  std::string bytes;
  if (!model.SerializeToString(&bytes))
    throw invalid_argument(path + ": the model does not serialize (larger than 2 GiB?)");
  write_file_atomically(path, bytes, "the trained model");
}

std::int64_t element_count(const onnx::TensorProto& t, const std::string& what) {
  std::int64_t n = 1;
  for (std::int64_t d : t.dims()) {
    if (d < 0 || (d > 0 && n > std::numeric_limits<std::int32_t>::max() / d))
      throw invalid_argument(what + ": dimension " + std::to_string(d) +
                             " is negative or the tensor too large for the importer");
    n *= d;
  }
  return n;
}

std::vector<float> float_values(const onnx::TensorProto& t, const std::string& what) {
  expect_type(t, onnx::TensorProto::FLOAT, what);
  const std::int64_t count = element_count(t, what);
  if (t.has_raw_data()) return raw_values<float>(t, count, what);
  if (t.float_data_size() != count)
    throw invalid_argument(what + ": holds " + std::to_string(t.float_data_size()) +
                           " values; its dims need " + std::to_string(count));
  return {t.float_data().begin(), t.float_data().end()};
}

std::vector<std::int64_t> int64_values(const onnx::TensorProto& t, const std::string& what) {
  expect_type(t, onnx::TensorProto::INT64, what);
  const std::int64_t count = element_count(t, what);
  if (t.has_raw_data()) return raw_values<std::int64_t>(t, count, what);
  if (t.int64_data_size() != count)
    throw invalid_argument(what + ": holds " + std::to_string(t.int64_data_size()) +
                           " values; its dims need " + std::to_string(count));
  return {t.int64_data().begin(), t.int64_data().end()};
}

void set_float_values(onnx::TensorProto& t, const std::vector<float>& values,
                      const std::vector<std::int64_t>& dims) {
  t.clear_float_data();
  t.clear_dims();
  for (std::int64_t d : dims) t.add_dims(d);
  t.set_data_type(onnx::TensorProto::FLOAT);
  t.set_raw_data(
      std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
}

}  // namespace memweave::onnx_detail
