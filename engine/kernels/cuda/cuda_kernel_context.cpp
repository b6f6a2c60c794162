// cuda_kernel_context: handle creation and binding, math modes, scratch, the cuBLAS
// workspace taken from a heap, and the options read from the environment.
//
// Invariants: after construction both handles are bound to stream_, which never changes
// (cublasSetStream would reset the workspace to cuBLAS's own pool, and one stream per
// handle is what keeps cuBLAS deterministic); loss_ and label_error_ point into one
// cudaMalloc'd block; cublas_workspace_, when set, is a live block of its heap that the
// cuBLAS handle uses, and it goes back only after the handle is destroyed. A constructor
// that fails part way releases what it made. Thread safety: see the header (one thread at
// a time).
#include "engine/kernels/cuda/cuda_kernel_context.hpp"

#include <string>

#include "engine/kernels/cuda/conv_algo_cache.hpp"
#include "engine/kernels/cuda/cuda_library_check.hpp"
#include "memweave/alloc/device_heap.hpp"
#include "memweave/core/config.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"

namespace memweave::kernels::cuda {

cuda_kernel_options cuda_kernel_options::from_environment() {
  cuda_kernel_options o;
  o.deterministic = option_bool("MEMWEAVE_CUDNN_DETERMINISTIC");
  return o;
}

std::size_t recommended_cublas_workspace_bytes(int ordinal) {
  // cuBLAS's guide (cublasSetWorkspace) recommends 32 MiB on Hopper and 4 MiB on the
  // architectures before it; later ones get Hopper's size, as they run its larger kernels.
  int major = 0;
  MEMWEAVE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal));
  return major >= 9 ? std::size_t{32} << 20 : std::size_t{4} << 20;
}

void detail::heap_return::operator()(void* p) const noexcept {
  if (heap != nullptr) (void)heap->deallocate(p);
}

cuda_kernel_context::cuda_kernel_context(cudaStream_t stream, const cuda_kernel_options& options)
    : options_(options), stream_(stream), conv_cache_(std::make_unique<detail::conv_algo_cache>()) {
  try {
    MEMWEAVE_CUDA_CHECK(cudaGetDevice(&ordinal_));
    MEMWEAVE_CUDNN_CHECK(cudnnCreate(&cudnn_));
    MEMWEAVE_CUDNN_CHECK(cudnnSetStream(cudnn_, stream_));
    MEMWEAVE_CUBLAS_CHECK(cublasCreate(&cublas_));
    MEMWEAVE_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    MEMWEAVE_CUBLAS_CHECK(cublasSetMathMode(cublas_, cublas_math));
    // Device pointers for alpha/beta would need device scalars; every call passes host ones.
    MEMWEAVE_CUBLAS_CHECK(cublasSetPointerMode(cublas_, CUBLAS_POINTER_MODE_HOST));
    MEMWEAVE_CUDA_CHECK(cudaMalloc(&scratch_, 16));
    loss_ = static_cast<double*>(scratch_);
    label_error_ = reinterpret_cast<int*>(static_cast<char*>(scratch_) + sizeof(double));
    MEMWEAVE_CUDA_CHECK(cudaMemsetAsync(scratch_, 0, 16, stream_));
  } catch (...) {
    release();
    throw;
  }
}

void cuda_kernel_context::take_cublas_workspace(device_heap& heap) {
  MEMWEAVE_EXPECTS(cublas_workspace_ == nullptr,
                   "cuda_kernel_context::take_cublas_workspace: the context already has a "
                   "cuBLAS workspace from a heap; take it once, when the context is made");
  const std::size_t bytes = recommended_cublas_workspace_bytes(ordinal_);
  // Heap blocks are whole blocks from a cudaMalloc'd arena, at least 256-byte aligned as
  // cublasSetWorkspace requires (the heap's block size is a power of two of 256 or more).
  std::unique_ptr<void, detail::heap_return> block(heap.try_allocate(bytes),
                                                   detail::heap_return{&heap});
  if (block == nullptr) {
    throw out_of_memory("cuBLAS workspace of " + format_bytes(bytes) +
                            " (NVIDIA's recommended size for this GPU) does not fit in the "
                            "device heap: " +
                            heap.describe_failure(bytes),
                        bytes, heap.stats().free_bytes, heap.largest_free_run());
  }
  MEMWEAVE_CUBLAS_CHECK(cublasSetWorkspace(cublas_, block.get(), bytes));
  cublas_workspace_ = std::move(block);
  cublas_workspace_bytes_ = bytes;
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
  // Only now that no handle can use it: kernels still queued on the stream may, which is
  // why the caller synchronizes the stream before destroying the context.
  cublas_workspace_.reset();
  cublas_workspace_bytes_ = 0;
  if (cudnn_ != nullptr) {
    (void)cudnnDestroy(cudnn_);
    cudnn_ = nullptr;
  }
  (void)cudaGetLastError();  // no failure of the teardown may leak into later calls
}

}  // namespace memweave::kernels::cuda
