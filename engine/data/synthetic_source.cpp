// The synthetic task. Stateless apart from the class templates made at construction, so
// fill() is thread-safe. Values come from a counter-based hash, never from a stateful RNG,
// so batch k does not depend on which batches were asked for before.
#include <cmath>
#include <vector>

#include "engine/random.hpp"
#include "memweave/core/checked.hpp"
#include "memweave/core/error.hpp"
#include "memweave/engine/data_source.hpp"

namespace memweave {
namespace {

using detail::mix64;

float symmetric(std::uint64_t key) noexcept {
  return static_cast<float>(detail::symmetric_unit(key));
}

class synthetic_source final : public data_source {
 public:
  synthetic_source(const shape4& image, std::int64_t classes, std::uint64_t seed)
      : image_(image), classes_(classes), seed_(seed) {
    MEMWEAVE_EXPECTS(classes > 0,
                     "synthetic data needs at least one class, got " + std::to_string(classes));
    MEMWEAVE_EXPECTS(image.per_image() > 0,
                     "synthetic data needs a non-empty image shape, got " + to_string(image));
    // One template image per class: a size from two user numbers, checked.
    const auto count = checked_mul(classes, image.per_image());
    const auto bytes = count ? checked_mul(*count, std::int64_t{sizeof(float)}) : std::nullopt;
    MEMWEAVE_EXPECTS(bytes && static_cast<std::uint64_t>(*bytes) <= k_max_tensor_bytes,
                     "synthetic data: " + std::to_string(classes) + " classes of " +
                         to_string(image) +
                         " template images are more than an address space holds; lower "
                         "--classes or --image-side");
    templates_.resize(static_cast<std::size_t>(*count));
    for (std::size_t i = 0; i < templates_.size(); ++i) {
      templates_[i] = symmetric(mix64(seed_ ^ 0x7e3a11ull) + i);
    }
  }

  std::string name() const override { return "synthetic"; }
  shape4 image_shape() const override { return image_; }
  std::int64_t classes() const override { return classes_; }

  void fill(std::int64_t iteration, std::int64_t n, float* images, float* labels) override {
    fill_slice(iteration, n, 0, n, images, labels);
  }

  // Image i of a batch depends on (iteration, i) only, not on the batch size.
  void fill_slice(std::int64_t iteration, std::int64_t, std::int64_t first, std::int64_t n,
                  float* images, float* labels) override {
    const std::int64_t per = image_.per_image();
    for (std::int64_t i = 0; i < n; ++i) {
      const std::uint64_t key =
          mix64(seed_ + mix64(static_cast<std::uint64_t>(iteration) * 1000003u +
                              static_cast<std::uint64_t>(first + i)));
      const std::int64_t label =
          static_cast<std::int64_t>(key % static_cast<std::uint64_t>(classes_));
      labels[i] = static_cast<float>(label);
      const float* t = templates_.data() + label * per;
      for (std::int64_t j = 0; j < per; ++j) {
        images[i * per + j] = t[j] + 0.5f * symmetric(key + static_cast<std::uint64_t>(j));
      }
    }
  }

 private:
  shape4 image_;
  std::int64_t classes_;
  std::uint64_t seed_;
  std::vector<float> templates_;  // classes x per_image
};

}  // namespace

std::unique_ptr<data_source> make_synthetic_source(const shape4& image, std::int64_t classes,
                                                   std::uint64_t seed) {
  return std::make_unique<synthetic_source>(image, classes, seed);
}

}  // namespace memweave
