// A data-parallel rank's share of the global batch, and the default slice of a source that
// cannot produce one image alone.
#include <algorithm>
#include <vector>

#include "memweave/core/error.hpp"
#include "memweave/engine/data_source.hpp"

namespace memweave {

void data_source::fill_slice(std::int64_t iteration, std::int64_t batch, std::int64_t first,
                             std::int64_t n, float* images, float* labels) {
  const std::int64_t per = image_shape().per_image();
  std::vector<float> all_images(static_cast<std::size_t>(batch * per));
  std::vector<float> all_labels(static_cast<std::size_t>(batch));
  fill(iteration, batch, all_images.data(), all_labels.data());
  std::copy_n(all_images.begin() + first * per, n * per, images);
  std::copy_n(all_labels.begin() + first, n, labels);
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
