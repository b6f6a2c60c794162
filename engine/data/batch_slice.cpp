// A data-parallel rank's share of the global batch, and the defaults of a source that
// cannot produce one image (or a region of one, or labels) alone.
#include <algorithm>
#include <atomic>
#include <vector>

#include "memweave/core/error.hpp"
#include "memweave/engine/data_source.hpp"

namespace memweave {

std::uint64_t data_source::next_identity() noexcept {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

void data_source::fill_slice(std::int64_t iteration, std::int64_t batch, std::int64_t first,
                             std::int64_t n, float* images, float* labels) {
  const std::int64_t per = image_shape().per_image();
  std::vector<float> all_images(static_cast<std::size_t>(batch * per));
  std::vector<float> all_labels(static_cast<std::size_t>(batch));
  fill(iteration, batch, all_images.data(), all_labels.data());
  std::copy_n(all_images.begin() + first * per, n * per, images);
  std::copy_n(all_labels.begin() + first, n, labels);
}

void check_image_region(const data_source& source, std::int64_t batch, std::int64_t image,
                        const image_region& r) {
  const shape4 s = source.image_shape();
  auto inside = [](std::int64_t lo, std::int64_t n, std::int64_t size) {
    return lo >= 0 && n >= 0 && lo <= size && n <= size - lo;
  };
  MEMWEAVE_EXPECTS(
      image >= 0 && image < batch && inside(r.c0, r.c, s.c) && inside(r.y0, r.h, s.h) &&
          inside(r.x0, r.w, s.w),
      source.name() + ": region channels " + std::to_string(r.c0) + "+" + std::to_string(r.c) +
          ", rows " + std::to_string(r.y0) + "+" + std::to_string(r.h) + ", columns " +
          std::to_string(r.x0) + "+" + std::to_string(r.w) + " of image " + std::to_string(image) +
          " is outside the batch of " + std::to_string(batch) + " images of " + to_string(s));
}

void data_source::fill_region(std::int64_t iteration, std::int64_t batch, std::int64_t image,
                              const image_region& r, float* out) {
  check_image_region(*this, batch, image, r);
  const shape4 s = image_shape();
  std::vector<float> one(static_cast<std::size_t>(s.per_image()));
  float label = 0;
  fill_slice(iteration, batch, image, 1, one.data(), &label);
  for (std::int64_t c = 0; c < r.c; ++c) {
    for (std::int64_t y = 0; y < r.h; ++y) {
      std::copy_n(one.begin() + ((r.c0 + c) * s.h + r.y0 + y) * s.w + r.x0, r.w,
                  out + (c * r.h + y) * r.w);
    }
  }
}

void data_source::fill_labels(std::int64_t iteration, std::int64_t batch, std::int64_t first,
                              std::int64_t n, float* labels) {
  std::vector<float> one(static_cast<std::size_t>(image_shape().per_image()));
  for (std::int64_t i = 0; i < n; ++i)
    fill_slice(iteration, batch, first + i, 1, one.data(), labels + i);
}

namespace {

class batch_slice final : public data_source {
 public:
  batch_slice(data_source& whole, std::int64_t global_batch, std::int64_t first)
      : whole_(whole), global_batch_(global_batch), first_(first) {}
  std::string name() const override { return whole_.name(); }
  shape4 image_shape() const override { return whole_.image_shape(); }
  std::int64_t classes() const override { return whole_.classes(); }
  void fill(std::int64_t iteration, std::int64_t n, float* images, float* labels) override {
    MEMWEAVE_EXPECTS(first_ + n <= global_batch_,
                     "a slice of " + std::to_string(n) + " images from position " +
                         std::to_string(first_) + " overruns the global batch of " +
                         std::to_string(global_batch_));
    whole_.fill_slice(iteration, global_batch_, first_, n, images, labels);
  }
  // Positions [first, first + count) of the rank's batch are [first_ + first, ...) of the
  // global one: as safe on several threads as the whole source's.
  void fill_slice(std::int64_t iteration, std::int64_t n, std::int64_t first, std::int64_t count,
                  float* images, float* labels) override {
    MEMWEAVE_EXPECTS(first >= 0 && count >= 0 && first + count <= n && first_ + n <= global_batch_,
                     "images " + std::to_string(first) + "+" + std::to_string(count) +
                         " of a slice of " + std::to_string(n) + " images from position " +
                         std::to_string(first_) + " overrun it or the global batch of " +
                         std::to_string(global_batch_));
    whole_.fill_slice(iteration, global_batch_, first_ + first, count, images, labels);
  }
  bool fills_concurrently() const override { return whole_.fills_concurrently(); }

  // Image i of the rank's batch is image first + i of the global one.
  void fill_region(std::int64_t iteration, std::int64_t n, std::int64_t image,
                   const image_region& r, float* out) override {
    MEMWEAVE_EXPECTS(image >= 0 && image < n && first_ + n <= global_batch_,
                     "image " + std::to_string(image) + " of a slice of " + std::to_string(n) +
                         " images from position " + std::to_string(first_) +
                         " is outside it or the global batch of " + std::to_string(global_batch_));
    whole_.fill_region(iteration, global_batch_, first_ + image, r, out);
  }
  void fill_labels(std::int64_t iteration, std::int64_t n, std::int64_t first, std::int64_t count,
                   float* labels) override {
    MEMWEAVE_EXPECTS(first >= 0 && count >= 0 && first + count <= n && first_ + n <= global_batch_,
                     "labels " + std::to_string(first) + "+" + std::to_string(count) +
                         " of a slice of " + std::to_string(n) + " images from position " +
                         std::to_string(first_) + " overrun it or the global batch of " +
                         std::to_string(global_batch_));
    whole_.fill_labels(iteration, global_batch_, first_ + first, count, labels);
  }

 private:
  data_source& whole_;
  std::int64_t global_batch_, first_;
};

}  // namespace

std::unique_ptr<data_source> make_batch_slice(data_source& whole, std::int64_t global_batch,
                                              std::int64_t first) {
  return std::make_unique<batch_slice>(whole, global_batch, first);
}

}  // namespace memweave
