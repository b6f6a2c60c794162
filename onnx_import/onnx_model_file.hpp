// Reading and writing ONNX model files and their tensors, with errors that name the file
// and the tensor. Private to memweave_onnx (it names the protobuf classes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"

namespace memweave::onnx_detail {

/// Parses and validates (onnx::checker) the model at `path`. invalid_argument, prefixed
/// with `knob` and the path, for a missing or unreadable file, bytes that are not a model
/// (truncated, foreign) and a model the checker rejects.
onnx::ModelProto load_model(const std::string& path, const std::string& knob);

/// Writes `model` to `path` through a temporary file beside it renamed over it
/// (write_file_atomically).
void save_model(const onnx::ModelProto& model, const std::string& path);

/// Elements of a tensor of `dims` (each >= 0); invalid_argument naming `what` otherwise.
std::int64_t element_count(const onnx::TensorProto& t, const std::string& what);

/// The values of a FLOAT tensor (raw_data or float_data); invalid_argument naming `what`
/// for another type, external data, or a size that disagrees with its dims.
std::vector<float> float_values(const onnx::TensorProto& t, const std::string& what);

/// The values of an INT64 tensor (Reshape's shape), likewise.
std::vector<std::int64_t> int64_values(const onnx::TensorProto& t, const std::string& what);

/// Replaces a FLOAT tensor's values (written as raw_data) and its dims.
void set_float_values(onnx::TensorProto& t, const std::vector<float>& values,
                      const std::vector<std::int64_t>& dims);

/// "FLOAT", "INT64", ... for messages.
std::string data_type_name(std::int32_t type);

}  // namespace memweave::onnx_detail
