// Where the training batches come from. A source fills batch `iteration` deterministically,
// so that two runs (two memory policies) see exactly the same images and labels.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "memweave/engine/layer_params.hpp"

namespace memweave {

/// A rectangle of one image: channels [c0, c0 + c), rows [y0, y0 + h), columns [x0, x0 + w).
struct image_region {
  std::int64_t c0 = 0, c = 0;
  std::int64_t y0 = 0, h = 0;
  std::int64_t x0 = 0, w = 0;
};

class data_source {
 public:
  data_source() = default;
  /// A copy is another source: it gets an identity of its own (it may be changed apart).
  data_source(const data_source&) noexcept {}
  data_source& operator=(const data_source&) noexcept { return *this; }
  virtual ~data_source() = default;
  /// "synthetic", "cifar10:<path>".
  virtual std::string name() const = 0;
  /// The image shape (n is ignored) and the number of classes it produces.
  virtual shape4 image_shape() const = 0;
  virtual std::int64_t classes() const = 0;
  /// How many distinct images the source holds, which batches walk through and wrap around
  /// (a dataset's records); 0 for a source without end (synthetic).
  virtual std::int64_t images() const { return 0; }
  /// Writes batch `iteration` of `n` images: n*c*h*w floats (NCHW) and n labels (class
  /// indices as floats). The same arguments always give the same bytes.
  virtual void fill(std::int64_t iteration, std::int64_t n, float* images, float* labels) = 0;
  /// Writes positions [first, first + n) of batch `iteration` of `batch` images: exactly
  /// what fill(iteration, batch, ...) puts there (a data-parallel rank's share of the global
  /// batch). The default fills the whole batch and copies the slice out.
  virtual void fill_slice(std::int64_t iteration, std::int64_t batch, std::int64_t first,
                          std::int64_t n, float* images, float* labels);
  /// Writes region `r` of image `image` of batch `iteration` of `batch` images into `out`
  /// (r.c x r.h x r.w floats, CHW): exactly what fill(iteration, batch, ...) puts there (a
  /// tile of a huge input). The default fills the one image (fill_slice) and copies the
  /// region out; a source that can make a region alone (synthetic) touches only it. Throws
  /// invalid_argument for an image outside the batch or a region outside the image.
  virtual void fill_region(std::int64_t iteration, std::int64_t batch, std::int64_t image,
                           const image_region& r, float* out);
  /// Writes the labels of positions [first, first + n) of batch `iteration` of `batch`
  /// images: what fill_slice writes. The default fills the images too, one at a time.
  virtual void fill_labels(std::int64_t iteration, std::int64_t batch, std::int64_t first,
                           std::int64_t n, float* labels);
  /// Whether fill_slice may run on several threads at once for disjoint positions of one
  /// batch: the DATA step's input pipeline then makes a batch's images in parallel. False
  /// unless a source says so (synthetic and CIFAR-10 do).
  virtual bool fills_concurrently() const { return false; }
  /// A number no other source object of this process was given (a copy gets its own): what a
  /// batch made ahead is kept for (the DATA step's input pipeline), since another source
  /// may be made where a destroyed one was.
  std::uint64_t identity() const noexcept { return identity_; }

 private:
  static std::uint64_t next_identity() noexcept;
  std::uint64_t identity_ = next_identity();
};

/// Checks that `image` is in a batch of `batch` and region `r` inside `source`'s image
/// shape; else invalid_argument naming the source, the region and the shape.
void check_image_region(const data_source& source, std::int64_t batch, std::int64_t image,
                        const image_region& r);

/// Rank r's view of `whole` in data parallelism: its fill(iteration, n) gives positions
/// [first, first + n) of `whole`'s batch `iteration` of `global_batch` images. `whole` must
/// outlive it.
std::unique_ptr<data_source> make_batch_slice(data_source& whole, std::int64_t global_batch,
                                              std::int64_t first);

/// A learnable synthetic task: each class has a fixed pattern; an image is its label's
/// pattern plus noise; labels are uniform. Made procedurally, pixel by pixel: the pattern of
/// class k, channel c at row y, column x is a white texture (uniform in [-1, 1), a hash of
/// (seed, k, pixel): what earlier versions stored as the class's template) plus two
/// triangle waves t(k,c,y) + u(k,c,x) of amplitude 0.5 and 1 to 3 periods across the image
/// with random phases (low frequency at any side, so pooled features keep the class; zero
/// mean over the image); the noise, in [-0.5, 0.5), is a hash of (seed, iteration, image
/// position, pixel). Nothing is kept per class or per image: a huge image costs only the
/// memory it is written to, and any region of it can be made alone (fill_region).
/// Deterministic in (seed, iteration, image position), whatever the batch size.
std::unique_ptr<data_source> make_synthetic_source(const shape4& image, std::int64_t classes,
                                                   std::uint64_t seed);

/// CIFAR-10 in its binary format (records of 1 label byte + 3072 pixel bytes, R, G, B
/// planes of 32x32): `path` is one .bin file or a directory of data_batch_*.bin files.
/// Pixels become (p/255 - 0.5). Batches walk the records in order, wrapping around.
/// Throws invalid_argument naming the path for an unreadable or malformed file (a size that
/// is not a whole number of records, a label above 9).
std::unique_ptr<data_source> make_cifar10_source(const std::string& path);

/// "synthetic" or "cifar10:PATH"; the synthetic source takes the network's image shape and
/// classes. For cifar10, the network must take 3x32x32 images and have 10 classes, else
/// invalid_argument says what to change.
std::unique_ptr<data_source> make_data_source(const std::string& spec, const shape4& image,
                                              std::int64_t classes, std::uint64_t seed);

}  // namespace memweave
