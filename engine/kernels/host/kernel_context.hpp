// The execution context of the host (CPU) kernels: a oneTBB task arena of a fixed number
// of worker threads in which every kernel runs its parallel loops.
//
// Determinism: every host kernel gives bit-identical results for identical inputs,
// whatever the thread count, the tensors' addresses or the timing. The thread count only
// decides which thread computes an output element, never the order of the floating-point
// operations that produce it (see kernel_context.cpp).
#pragma once

#include <functional>
#include <memory>

namespace memweave::kernels::host {

/// A fixed-size pool of worker threads (a tbb::task_arena) that the kernels run in.
/// Thread-safe: several threads may run kernels on one context at the same time.
///
/// Creating the first context sets OpenBLAS to one thread for the whole process
/// (openblas_set_num_threads(1)): the kernels parallelize only at one level, with TBB over
/// fixed GEMM tiles, each tile one single-threaded cblas_sgemm call.
class kernel_context {
 public:
  /// Threads from MEMWEAVE_THREADS (0 = every core; capped at the number of cores). Throws
  /// invalid_argument when the variable is not a whole number in [0, 4096].
  kernel_context();

  /// `threads` workers, at most the number of cores; 0 = every core. Throws
  /// invalid_argument when negative or > 4096.
  explicit kernel_context(int threads);

  ~kernel_context();
  kernel_context(const kernel_context&) = delete;
  kernel_context& operator=(const kernel_context&) = delete;

  /// The number of worker threads (including the calling thread), at least 1.
  int threads() const noexcept { return threads_; }

  /// Runs `f` inside this context's arena: TBB algorithms called from `f` use its threads.
  void execute(const std::function<void()>& f) const;

  /// OpenBLAS takes a 128 MiB buffer for each thread that first calls it, and when the
  /// address space cannot hold one (a `ulimit -v` limit) it retries forever. Throws
  /// out_of_memory, naming the limit and what to change, when the address space left now
  /// cannot hold one for each of this context's threads and the two that call kernels
  /// from outside it; call it once the process's other large mappings are made.
  void check_blas_address_space() const;

 private:
  struct impl;
  int threads_ = 1;
  std::unique_ptr<impl> impl_;
};

}  // namespace memweave::kernels::host
