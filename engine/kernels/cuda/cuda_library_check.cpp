// The throwing half of MEMWEAVE_CUDNN_CHECK / MEMWEAVE_CUBLAS_CHECK. Stateless and
// thread-safe: cudnnGetErrorString and cublasGetStatus* return static strings.
#include "engine/kernels/cuda/cuda_library_check.hpp"

#include <string>

#include "memweave/core/error.hpp"

namespace memweave::kernels::cuda::detail {

namespace {

std::string where(const char* file, int line) {
  return " (at " + std::string(file) + ":" + std::to_string(line) + ")";
}

}  // namespace

void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line) {
  // cudnnGetErrorString gives the status's name ("CUDNN_STATUS_BAD_PARAM..."); the last
  // error string, when the library kept one, says which argument it rejected.
  std::string detail;
  char last[512] = {0};
  cudnnGetLastErrorString(last, sizeof(last));
  if (last[0] != '\0') detail = std::string(": ") + last;
  throw device_error(std::string(call) + " failed: " + cudnnGetErrorString(status) + " (" +
                     std::to_string(static_cast<int>(status)) + ")" + detail + where(file, line) +
                     "; check the shapes and parameters of the step, and the device's state");
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw device_error(std::string(call) + " failed: " + cublasGetStatusName(status) + ": " +
                     cublasGetStatusString(status) + where(file, line) +
                     "; check the matrix sizes of the step, and the device's state");
}

}  // namespace memweave::kernels::cuda::detail
