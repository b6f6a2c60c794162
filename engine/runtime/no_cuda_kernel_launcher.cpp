// Stands in for cuda_kernel_launcher.cpp when CMake did not find CUDA: a cuda device then
// cannot run the executor's kernels.
#include "engine/runtime/kernel_launcher.hpp"
#include "memweave/core/error.hpp"

namespace memweave {

std::unique_ptr<kernel_launcher> make_cuda_kernel_launcher(const launcher_context&) {
  throw invalid_argument("the executor was built without CUDA: run on --device host");
}

}  // namespace memweave
