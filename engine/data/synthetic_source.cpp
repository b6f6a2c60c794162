// The synthetic task. Stateless (the shape, class count and seed), so fill() is
// thread-safe. Every value is a pure function of (seed, iteration, image position, channel,
// row, column) through a counter-based hash, never a stateful RNG: batch k does not depend
// on which batches were asked for before, and a region of an image is made without the
// rest of it. The waves are separable (a row term plus a column term per channel): an image
// or region of h x w costs O(h + w) for them plus two hashes per pixel (texture, noise).
#include <cmath>
#include <vector>

#include "engine/random.hpp"
#include "memweave/core/error.hpp"
#include "memweave/engine/data_source.hpp"

namespace memweave {
namespace {

using detail::mix64;

float symmetric(std::uint64_t key) noexcept {
  return static_cast<float>(detail::symmetric_unit(key));
}

// Uniform in [0, 1) from `key`.
double unit(std::uint64_t key) noexcept {
  return 0.5 * (detail::symmetric_unit(key) + 1.0);
}

// A triangle wave of period 1 with values in [-1, 1]: exact arithmetic, the same bits on
// every machine (a cosine's last bit may differ between libms).
double triangle(double u) noexcept {
  return 4.0 * std::abs(u - std::floor(u) - 0.5) - 1.0;
}

// One axis of a class's pattern in one channel: amplitude 0.5, 1 to 3 periods across
// `length` pixels, a random phase.
struct wave {
  double periods = 1, phase = 0;
  float at(std::int64_t i, std::int64_t length) const noexcept {
    return static_cast<float>(
        0.5 *
        triangle(periods * (static_cast<double>(i) + 0.5) / static_cast<double>(length) + phase));
  }
};

wave make_wave(std::uint64_t key) noexcept {
  return {static_cast<double>(1 + mix64(key) % 3), unit(key + 1)};
}

class synthetic_source final : public data_source {
 public:
  synthetic_source(const shape4& image, std::int64_t classes, std::uint64_t seed)
      : image_(image), classes_(classes), seed_(seed) {
    MEMWEAVE_EXPECTS(classes > 0,
                     "synthetic data needs at least one class, got " + std::to_string(classes));
    MEMWEAVE_EXPECTS(image.c > 0 && image.h > 0 && image.w > 0,
                     "synthetic data needs a non-empty image shape, got " + to_string(image));
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
    const image_region whole{0, image_.c, 0, image_.h, 0, image_.w};
    for (std::int64_t i = 0; i < n; ++i) {
      const std::uint64_t key = image_key(iteration, first + i);
      labels[i] = static_cast<float>(label_of(key));
      write(key, whole, images + i * per);
    }
  }

  // Stateless: slices of one batch may be made on several threads at once.
  bool fills_concurrently() const override { return true; }

  void fill_region(std::int64_t iteration, std::int64_t batch, std::int64_t image,
                   const image_region& r, float* out) override {
    check_image_region(*this, batch, image, r);
    write(image_key(iteration, image), r, out);
  }

  void fill_labels(std::int64_t iteration, std::int64_t, std::int64_t first, std::int64_t n,
                   float* labels) override {
    for (std::int64_t i = 0; i < n; ++i)
      labels[i] = static_cast<float>(label_of(image_key(iteration, first + i)));
  }

 private:
  std::uint64_t image_key(std::int64_t iteration, std::int64_t position) const noexcept {
    return mix64(seed_ + mix64(static_cast<std::uint64_t>(iteration) * 1000003u +
                               static_cast<std::uint64_t>(position)));
  }

  std::int64_t label_of(std::uint64_t key) const noexcept {
    return static_cast<std::int64_t>(key % static_cast<std::uint64_t>(classes_));
  }

  // Region r of the image of `key` (its label's pattern plus its noise) into out (CHW).
  void write(std::uint64_t key, const image_region& r, float* out) const {
    const std::int64_t label = label_of(key);
    // The class's texture: white, one value per pixel of the class.
    const std::uint64_t texture =
        mix64(seed_ ^ 0x7e3a11ull) +
        static_cast<std::uint64_t>(label) * static_cast<std::uint64_t>(image_.per_image());
    std::vector<float> rows(static_cast<std::size_t>(r.h)), cols(static_cast<std::size_t>(r.w));
    for (std::int64_t c = r.c0; c < r.c0 + r.c; ++c) {
      const std::uint64_t k =
          mix64(mix64(seed_ ^ 0x5a7e11ull) + static_cast<std::uint64_t>(label * image_.c + c));
      const wave down = make_wave(k), across = make_wave(k + 2);
      for (std::int64_t y = 0; y < r.h; ++y)
        rows[static_cast<std::size_t>(y)] = down.at(r.y0 + y, image_.h);
      for (std::int64_t x = 0; x < r.w; ++x)
        cols[static_cast<std::size_t>(x)] = across.at(r.x0 + x, image_.w);
      for (std::int64_t y = 0; y < r.h; ++y) {
        // The counters are the pixel's index in the whole image.
        const auto pixel = static_cast<std::uint64_t>((c * image_.h + r.y0 + y) * image_.w + r.x0);
        const std::uint64_t noise_key = key + pixel, texture_key = texture + pixel;
        float* o = out + ((c - r.c0) * r.h + y) * r.w;
        for (std::int64_t x = 0; x < r.w; ++x) {
          const auto i = static_cast<std::uint64_t>(x);
          o[x] = symmetric(texture_key + i) + rows[static_cast<std::size_t>(y)] +
                 cols[static_cast<std::size_t>(x)] + 0.5f * symmetric(noise_key + i);
        }
      }
    }
  }

  shape4 image_;
  std::int64_t classes_;
  std::uint64_t seed_;
};

}  // namespace

std::unique_ptr<data_source> make_synthetic_source(const shape4& image, std::int64_t classes,
                                                   std::uint64_t seed) {
  return std::make_unique<synthetic_source>(image, classes, seed);
}

}  // namespace memweave
