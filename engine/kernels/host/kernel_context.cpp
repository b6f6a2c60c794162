// kernel_context: a tbb::task_arena of a fixed size.
//
// Invariants the kernels keep so that results do not depend on the thread count:
//   - every output element is computed by exactly one task, as one fixed sequence of
//     floating-point operations; a parallel_for only decides which thread runs it;
//   - reductions (over the batch, over a channel) run sequentially inside one task, in a
//     fixed order, usually in double;
//   - GEMMs are cut into tiles whose sizes depend only on the matrix shapes (gemm.cpp),
//     each tile one single-threaded cblas_sgemm; OpenBLAS's own threading is switched off
//     here once per process, so no reduction happens inside a thread pool we do not own.
// Thread safety: the arena is initialized in the constructor; execute() may be called
// from any number of threads at once (task_arena::execute is thread-safe).
#include "engine/kernels/host/kernel_context.hpp"

#include <cblas.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <string>

#include <tbb/info.h>
#include <tbb/task_arena.h>

#include "memweave/core/config.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"

namespace memweave::kernels::host {

namespace {

constexpr int k_max_threads = 4096;

// OpenBLAS's thread count is process-wide; one level of parallelism (ours) is enough and
// keeps every GEMM's summation order independent of OpenBLAS's scheduling.
void single_threaded_blas_once() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

// The table checks the range (0 or 1..4096), naming the variable.
int threads_from_environment() {
  static_assert(k_max_threads == 4096, "keep MEMWEAVE_THREADS' range in core/config.cpp equal");
  return static_cast<int>(option_int("MEMWEAVE_THREADS").value_or(0));
}

}  // namespace

struct kernel_context::impl {
  tbb::task_arena arena;
  explicit impl(int threads) : arena(threads) {}
};

kernel_context::kernel_context() : kernel_context(threads_from_environment()) {}

kernel_context::kernel_context(int threads) {
  MEMWEAVE_EXPECTS(
      threads >= 0 && threads <= k_max_threads,
      "kernel_context: threads = " + std::to_string(threads) + ": expected 0 (every core) to 4096");
  single_threaded_blas_once();
  // TBB never runs more workers than cores (asking for more only prints a warning), so
  // the count is capped there; results do not depend on it anyway.
  const int cores = std::max(1, tbb::info::default_concurrency());
  threads_ = threads == 0 ? cores : std::min(threads, cores);
  impl_ = std::make_unique<impl>(threads_);
  impl_->arena.initialize();
}

kernel_context::~kernel_context() = default;

void kernel_context::execute(const std::function<void()>& f) const {
  impl_->arena.execute(f);
}

void kernel_context::check_blas_address_space() const {
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return;
  // OpenBLAS's BUFFER_SIZE (128 MiB on x86-64) plus its page of bookkeeping, per thread.
  constexpr std::size_t per_thread = (std::size_t{128} << 20) + 4096;
  const std::size_t threads = static_cast<std::size_t>(threads_) + 2;
  const std::size_t need = threads * per_thread;
  // A reservation that commits nothing: it fails exactly when the limit leaves no room.
  void* p = mmap(nullptr, need, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p != MAP_FAILED) {
    munmap(p, need);
    return;
  }
  throw out_of_memory(
      "the address-space limit (ulimit -v: " + std::to_string(limit.rlim_cur / 1024) +
          " KiB) leaves too little for OpenBLAS, which takes " + format_bytes(per_thread) +
          " per thread that calls it (" + std::to_string(threads) +
          " threads: " + format_bytes(need) +
          "); it would retry forever. Raise `ulimit -v`, or lower --threads / MEMWEAVE_THREADS, "
          "MEMWEAVE_DEVICE_BYTES or MEMWEAVE_HOST_POOL_BYTES",
      need, 0, 0);
}

}  // namespace memweave::kernels::host
