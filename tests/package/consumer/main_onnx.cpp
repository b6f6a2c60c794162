// An outside program of the installed package's onnx component: it links, and its import
// reports a missing model file as the documented error.
#include <cstdio>
#include <string>

#include "memweave/core/error.hpp"
#include "memweave/onnx/import_onnx.hpp"

int main() {
  if (memweave::onnx_supported_operators().empty()) return 1;
  try {
    memweave::import_onnx("/nonexistent/model.onnx", 1);
  } catch (const memweave::invalid_argument& e) {
    if (std::string(e.what()).find("no such file") != std::string::npos) return 0;
    std::fprintf(stderr, "unexpected error: %s\n", e.what());
  }
  return 1;
}
