// cuda_kernel_context: handle creation and binding, math modes, scratch, the cuBLAS
// workspace taken from a heap, and the options read from the environment.
//
// Invariants: after construction both handles are bound to stream_, which never changes
// (cublasSetStream would reset the workspace to cuBLAS's own pool, and one stream per
// handle is what keeps cuBLAS deterministic); loss_ and label_error_ point into one
// cudaMalloc'd block; the cuBLAS handle has no workspace (set after its stream, which
// would reset it to cuBLAS's own pool). A constructor
// that fails part way releases what it made. Thread safety: see the header (one thread at
// a time).
#include "engine/kernels/cuda/cuda_kernel_context.hpp"

#include <string>

#include "engine/kernels/cuda/conv_algo_cache.hpp"
#include "engine/kernels/cuda/cuda_library_check.hpp"
#include "memweave/core/config.hpp"
#include "memweave/core/error.hpp"

namespace memweave::kernels::cuda {

cuda_kernel_options cuda_kernel_options::from_environment() {
  cuda_kernel_options o;
  o.deterministic = option_bool("MEMWEAVE_CUDNN_DETERMINISTIC");
  return o;
}

cuda_kernel_context::cuda_kernel_context(cudaStream_t stream, const cuda_kernel_options& options)
    : options_(options), stream_(stream), conv_cache_(std::make_unique<detail::conv_algo_cache>()) {
  try {
    MEMWEAVE_CUDA_CHECK(cudaGetDevice(&ordinal_));
    MEMWEAVE_CUDNN_CHECK(cudnnCreate(&cudnn_));
    MEMWEAVE_CUDNN_CHECK(cudnnSetStream(cudnn_, stream_));
    MEMWEAVE_CUBLAS_CHECK(cublasCreate(&cublas_));
    MEMWEAVE_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    // No workspace: cuBLAS then allocates none and picks kernels that need none. A workspace
    // from the heap (NVIDIA recommends 32 MiB on Hopper) would be memory `plan` does not
    // model, so a budget `plan` found enough would not hold on a GPU; cuBLAS's own pool would
    // sit outside the budget. The GEMMs are the FC layers', a small share of a CNN's time.
    MEMWEAVE_CUBLAS_CHECK(cublasSetWorkspace(cublas_, nullptr, 0));
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

double* cuda_kernel_context::sums_scratch(std::size_t doubles) {
  if (doubles <= sums_doubles_) return sums_;
  void* grown = nullptr;
  MEMWEAVE_CUDA_CHECK(cudaMalloc(&grown, doubles * sizeof(double)));
  if (sums_ != nullptr) (void)cudaFree(sums_);  // waits for the work that used it
  sums_ = static_cast<double*>(grown);
  sums_doubles_ = doubles;
  return sums_;
}

const cuda_kernel_context::link_streams& cuda_kernel_context::side_links() {
  if (links_.out != nullptr) return links_;
  link_streams made;
  try {
    MEMWEAVE_CUDA_CHECK(cudaStreamCreateWithFlags(&made.out, cudaStreamNonBlocking));
    MEMWEAVE_CUDA_CHECK(cudaStreamCreateWithFlags(&made.in, cudaStreamNonBlocking));
    for (cudaEvent_t* e : {&made.forked, &made.out_done, &made.in_done}) {
      MEMWEAVE_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    }
  } catch (...) {
    destroy(made);
    throw;
  }
  links_ = made;
  return links_;
}

const cuda_kernel_context::fp16_staging& cuda_kernel_context::fp16_links() {
  if (fp16_.error_host != nullptr) return fp16_;
  constexpr std::size_t halves = fp16_staging::chunk * sizeof(std::uint16_t);
  void* device = nullptr;
  MEMWEAVE_CUDA_CHECK(cudaMalloc(&device, 2 * halves + sizeof(unsigned)));
  void* pinned = nullptr;
  try {
    MEMWEAVE_CUDA_CHECK(cudaMallocHost(&pinned, sizeof(unsigned)));
  } catch (...) {
    (void)cudaFree(device);
    throw;
  }
  auto* base = static_cast<char*>(device);
  fp16_.in = reinterpret_cast<std::uint16_t*>(base);
  fp16_.out = reinterpret_cast<std::uint16_t*>(base + halves);
  fp16_.error = reinterpret_cast<unsigned*>(base + 2 * halves);
  fp16_.error_host = static_cast<unsigned*>(pinned);
  return fp16_;
}

void cuda_kernel_context::destroy(link_streams& l) noexcept {
  for (cudaEvent_t e : {l.forked, l.out_done, l.in_done}) {
    if (e != nullptr) (void)cudaEventDestroy(e);
  }
  for (cudaStream_t s : {l.out, l.in}) {
    if (s != nullptr) (void)cudaStreamDestroy(s);
  }
  l = link_streams{};
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
  if (sums_ != nullptr) {
    (void)cudaFree(sums_);
    sums_ = nullptr;
    sums_doubles_ = 0;
  }
  destroy(links_);
  if (fp16_.in != nullptr) (void)cudaFree(fp16_.in);  // the start of the one allocation
  if (fp16_.error_host != nullptr) (void)cudaFreeHost(fp16_.error_host);
  fp16_ = fp16_staging{};
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
