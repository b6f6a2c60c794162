#include "engine/runtime/batch_prefetcher.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "engine/kernels/host/kernel_context.hpp"
#include "memweave/core/error.hpp"
#include "memweave/device/device.hpp"
#include "memweave/engine/data_source.hpp"

namespace memweave {

float* batch_buffer::ensure(std::size_t floats, device* pinned) {
  if (floats == floats_ && (data_ != nullptr || floats == 0)) return data_;
  release();
  if (pinned != nullptr && floats != 0) {
    try {
      data_ = static_cast<float*>(pinned->allocate_pinned(floats * sizeof(float)));
      pinned_from_ = pinned;
    } catch (const out_of_memory&) {
      data_ = nullptr;  // no page-locked memory to be had: ordinary memory copies slower
    }
  }
  if (data_ == nullptr) {
    plain_.resize(floats);
    data_ = plain_.data();
  }
  floats_ = floats;
  return data_;
}

void batch_buffer::release() noexcept {
  if (pinned_from_ != nullptr) pinned_from_->deallocate_pinned(data_, floats_ * sizeof(float));
  pinned_from_ = nullptr;
  plain_ = {};
  data_ = nullptr;
  floats_ = 0;
}

batch_prefetcher::batch_prefetcher() = default;

batch_prefetcher::~batch_prefetcher() {
  settle();
}

void batch_prefetcher::make_arena() {
  if (arena_ == nullptr) arena_ = std::make_unique<kernels::host::kernel_context>(threads_);
}

void batch_prefetcher::fill(data_source& source, std::int64_t iteration, std::int64_t n,
                            std::size_t image_floats, float* images, float* labels) {
  // One thread, or a source that must be filled whole: no arena is entered (from the thread
  // making a batch ahead, beside the kernels' own, ThreadSanitizer takes TBB's reuse of its
  // uninstrumented memory for races).
  if (arena_->threads() == 1 || !source.fills_concurrently() || n < 2) {
    source.fill(iteration, n, images, labels);
    return;
  }
  arena_->execute([&] {
    // Slices of the batch, one task each: fill_slice writes exactly what fill puts there.
    const std::size_t per = image_floats / static_cast<std::size_t>(n);
    tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n), [&](const auto& r) {
      source.fill_slice(iteration, n, r.begin(), r.end() - r.begin(),
                        images + static_cast<std::size_t>(r.begin()) * per, labels + r.begin());
    });
  });
}

const float* batch_prefetcher::take(data_source& source, std::int64_t iteration, std::int64_t n,
                                    std::size_t image_floats) {
  make_arena();
  const int other = 1 - handed_;
  if (ahead_.done.valid()) {
    const bool wanted = ahead_.source == source.identity() && ahead_.iteration == iteration &&
                        ahead_.n == n &&
                        buffers_[other].size() == image_floats + static_cast<std::size_t>(n);
    std::future<void> done = std::move(ahead_.done);
    ahead_ = {};
    if (wanted) {
      done.get();  // the source's failure, as making the batch now would have thrown it
      handed_ = other;
      ++hits_;
      return buffers_[handed_].data();
    }
    try {
      done.get();
    } catch (...) {
      // A batch nobody asked for: its failure is nobody's.
    }
  }
  float* b = buffers_[other].ensure(image_floats + static_cast<std::size_t>(n), pinned_);
  fill(source, iteration, n, image_floats, b, b + image_floats);
  handed_ = other;
  return b;
}

void batch_prefetcher::start_next(data_source& source, std::int64_t iteration, std::int64_t n,
                                  std::size_t image_floats) {
  settle();
  ahead_ = {};
  make_arena();
  float* b = buffers_[1 - handed_].ensure(image_floats + static_cast<std::size_t>(n), pinned_);
  ahead_.source = source.identity();
  ahead_.iteration = iteration;
  ahead_.n = n;
  try {
    ahead_.done = std::async(std::launch::async, [this, &source, iteration, n, image_floats, b] {
      fill(source, iteration, n, image_floats, b, b + image_floats);
    });
  } catch (...) {
    // No thread (or no memory for one) to be had: the batch is made when it is asked for.
    ahead_ = {};
  }
}

void batch_prefetcher::settle() noexcept {
  if (ahead_.done.valid()) ahead_.done.wait();
}

}  // namespace memweave
