// The input pipeline of the DATA step: batch k + 1 is made on a thread of its own while the
// device runs iteration k, as a framework's data loader does, its images in parallel where
// the source allows it (data_source::fills_concurrently), on the run's host threads. Making a
// batch is host work (the synthetic images cost about 70 ms for 64 of 224 px on one core,
// 9 ms on 16): done in the DATA step itself, it left a GPU idle for that long at the start of
// every iteration.
//
// What is made ahead is a guess (the next iteration of the same source and batch size); a
// batch asked for that is not the one guessed is made there and then, so the bytes a step
// sees never depend on the guess. A source is known by its identity(), not its address. One batch
// is made at a time (a source runs fill_slice on several threads at once only where
// fills_concurrently says it may); settle() waits for the one ahead, and the executor calls it
// before an iteration returns, since the caller may destroy the source after that.
//
// Buffers: two, handed out in turn. The one handed out for iteration k is read by that
// iteration's copy to the device (on `host` a stream worker reads it later, on `cuda` the
// copy engine), which has landed when the iteration ends; the batch ahead is made into the
// other one. On cuda they are page-locked (pin_on): from pageable memory the 38.5 MB of a
// ResNet-50 b64 batch went through the driver's bounce buffer in 5 to 7 ms on an H200.
#pragma once

#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <vector>

namespace memweave {

class data_source;
class device;
namespace kernels::host {
class kernel_context;
}  // namespace kernels::host

/// One batch's host memory: page-locked from a device, or ordinary.
class batch_buffer {
 public:
  batch_buffer() = default;
  ~batch_buffer() { release(); }
  batch_buffer(const batch_buffer&) = delete;
  batch_buffer& operator=(const batch_buffer&) = delete;
  /// `floats` floats (what they hold is undefined after a change of size), page-locked from
  /// `pinned` when it is non-null and can give them, else ordinary memory.
  float* ensure(std::size_t floats, device* pinned);
  float* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return floats_; }

 private:
  void release() noexcept;
  device* pinned_from_ = nullptr;  // where data_ came from when page-locked
  float* data_ = nullptr;
  std::size_t floats_ = 0;
  std::vector<float> plain_;
};

class batch_prefetcher {
 public:
  batch_prefetcher();
  ~batch_prefetcher();
  /// Batches from now on live in page-locked memory of `dev` (which must outlive this).
  void pin_on(device& dev) noexcept { pinned_ = &dev; }
  /// A source's fill runs in an arena of `threads` workers (0 = every core), as the host
  /// kernels do (executor_options::threads, --threads): a run told to use one thread makes
  /// its batches on one. Call before the first take().
  void use_threads(int threads) noexcept { threads_ = threads; }
  batch_prefetcher(const batch_prefetcher&) = delete;
  batch_prefetcher& operator=(const batch_prefetcher&) = delete;

  /// Batch `iteration` of `n` images from `source`: `image_floats` floats of images, then n
  /// labels. The one made ahead when it is that batch, else made now (exceptions of the
  /// source propagate). Valid until the next take().
  const float* take(data_source& source, std::int64_t iteration, std::int64_t n,
                    std::size_t image_floats);

  /// Starts making batch `iteration` (same source, size and shape as the last take) into
  /// the buffer not handed out.
  void start_next(data_source& source, std::int64_t iteration, std::int64_t n,
                  std::size_t image_floats);

  /// Waits for the batch being made ahead, if any. A failure of that batch is kept for the
  /// take() that asks for it (and dropped if none does). Never throws.
  void settle() noexcept;

  /// Batches made ahead and then asked for (a test's check that the pipeline runs).
  std::int64_t hits() const noexcept { return hits_; }

 private:
  struct ahead {
    std::uint64_t source = 0;  // data_source::identity(): not the address, which a new
                               // source may take once the caller destroyed the old one
    std::int64_t iteration = -1;
    std::int64_t n = 0;
    std::future<void> done;
  };
  batch_buffer buffers_[2];
  device* pinned_ = nullptr;
  int threads_ = 0;
  std::unique_ptr<kernels::host::kernel_context> arena_;  // made at the first fill
  void make_arena();
  // Batch `iteration` into images/labels, in arena_: in slices on its workers where the
  // source allows it (data_source::fills_concurrently).
  void fill(data_source& source, std::int64_t iteration, std::int64_t n, std::size_t image_floats,
            float* images, float* labels);
  int handed_ = 1;  // the buffer take() handed out last
  ahead ahead_;
  std::int64_t hits_ = 0;
};

}  // namespace memweave
