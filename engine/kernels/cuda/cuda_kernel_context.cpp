// cuda_kernel_context: handle creation and binding, math modes, scratch.
//
// Invariants: after construction both handles are bound to stream_ (cuBLAS's workspace set
// after its stream, since cublasSetStream resets the workspace to cuBLAS's own pool);
// loss_ and label_error_ point into one cudaMalloc'd block. A constructor that fails part
// way releases what it made. Thread safety: see the header (one thread at a time).
#include "engine/kernels/cuda/cuda_kernel_context.hpp"

#include "engine/kernels/cuda/conv_algo_cache.hpp"
#include "engine/kernels/cuda/cuda_library_check.hpp"

namespace memweave::kernels::cuda {

cuda_kernel_context::cuda_kernel_context(cudaStream_t stream, void* cublas_workspace,
                                         std::size_t cublas_workspace_bytes)
    : stream_(stream), conv_cache_(std::make_unique<detail::conv_algo_cache>()) {
  try {
    MEMWEAVE_CUDNN_CHECK(cudnnCreate(&cudnn_));
    MEMWEAVE_CUDNN_CHECK(cudnnSetStream(cudnn_, stream_));
    MEMWEAVE_CUBLAS_CHECK(cublasCreate(&cublas_));
    MEMWEAVE_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    MEMWEAVE_CUBLAS_CHECK(cublasSetMathMode(cublas_, cublas_math));
    // Device pointers for alpha/beta would need device scalars; every call passes host ones.
    MEMWEAVE_CUBLAS_CHECK(cublasSetPointerMode(cublas_, CUBLAS_POINTER_MODE_HOST));
    if (cublas_workspace != nullptr) {
      MEMWEAVE_CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_workspace, cublas_workspace_bytes));
    }
    MEMWEAVE_CUDA_CHECK(cudaMalloc(&scratch_, 16));
    loss_ = static_cast<double*>(scratch_);
    label_error_ = reinterpret_cast<int*>(static_cast<char*>(scratch_) + sizeof(double));
    MEMWEAVE_CUDA_CHECK(cudaMemsetAsync(scratch_, 0, 16, stream_));
  } catch (...) {
    release();
    throw;
  }
}

cuda_kernel_context::~cuda_kernel_context() {
  release();
}

void cuda_kernel_context::release() noexcept {
  // Statuses are ignored: a destructor cannot report them, and a failing destroy leaves
  // nothing the caller could act on.
  if (scratch_ != nullptr) {
    (void)cudaFree(scratch_);
    scratch_ = nullptr;
  }
  if (cublas_ != nullptr) {
    (void)cublasDestroy(cublas_);
    cublas_ = nullptr;
  }
  if (cudnn_ != nullptr) {
    (void)cudnnDestroy(cudnn_);
    cudnn_ = nullptr;
  }
  (void)cudaGetLastError();  // no failure of the teardown may leak into later calls
}

}  // namespace memweave::kernels::cuda
