// The CIFAR-10 binary reader. All records are read and checked at construction (the whole
// training set is 150 MB of bytes); fill() only converts, so it is thread-safe.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "memweave/core/error.hpp"
#include "memweave/core/whole_file.hpp"
#include "memweave/engine/data_source.hpp"

namespace memweave {
namespace {

constexpr std::size_t k_side = 32;
constexpr std::size_t k_pixels = 3 * k_side * k_side;
constexpr std::size_t k_record = 1 + k_pixels;

// The file's bytes (records of a label byte and the pixels), checked.
std::string read_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
    // A device or a pipe (/dev/zero) would be read until memory runs out.
    throw invalid_argument("'" + path.string() +
                           "' is not a regular file; give --data cifar10:PATH a CIFAR-10 "
                           "binary file or the directory of the binary version");
  }
  // Its size first: a large file of another kind was read whole before it was refused. (A
  // size of 0 may be a file of /proc, whose reading tells: checked after it.)
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size % k_record != 0) {
    throw invalid_argument("'" + path.string() + "' is not a CIFAR-10 binary file: its size " +
                           std::to_string(size) + " bytes is not a positive multiple of " +
                           std::to_string(k_record) +
                           " (1 label byte + 3072 pixel bytes per record)");
  }
  std::string bytes;
  try {
    bytes = read_whole_file(path.string(), "CIFAR-10 file");
  } catch (const invalid_argument& e) {
    throw invalid_argument(std::string(e.what()) + "; check the path given to --data");
  }
  if (bytes.empty() || bytes.size() % k_record != 0) {
    throw invalid_argument("'" + path.string() + "' is not a CIFAR-10 binary file: its size " +
                           std::to_string(bytes.size()) + " bytes is not a positive multiple of " +
                           std::to_string(k_record) +
                           " (1 label byte + 3072 pixel bytes per record)");
  }
  for (std::size_t r = 0; r < bytes.size() / k_record; ++r) {
    const auto label = static_cast<unsigned char>(bytes[r * k_record]);
    if (label > 9) {
      throw invalid_argument("'" + path.string() + "' record " + std::to_string(r) + " has label " +
                             std::to_string(label) +
                             "; CIFAR-10 labels are 0..9: the file is corrupt or not CIFAR-10");
    }
  }
  return bytes;
}

class cifar10_source final : public data_source {
 public:
  explicit cifar10_source(const std::string& path) : path_(path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    std::vector<fs::path> files;
    if (fs::is_directory(path, ec)) {
      for (const auto& e : fs::directory_iterator(path, ec)) {
        const std::string n = e.path().filename().string();
        if (n.starts_with("data_batch_") && n.ends_with(".bin")) files.push_back(e.path());
      }
      // In the order of their numbers (data_batch_2 before data_batch_10: name order put 10
      // first; session 47's hostile run), then by name.
      const auto number = [](const fs::path& f) {
        const std::string n = f.filename().string();
        const std::string digits = n.substr(11, n.size() - 11 - 4);  // data_batch_N.bin
        std::uint64_t v = 0;
        const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
        return ec == std::errc() && end == digits.data() + digits.size()
                   ? v
                   : std::numeric_limits<std::uint64_t>::max();
      };
      std::sort(files.begin(), files.end(), [&](const fs::path& a, const fs::path& b) {
        const std::uint64_t na = number(a), nb = number(b);
        return na != nb ? na < nb : a < b;
      });
      if (files.empty()) {
        throw invalid_argument("directory '" + path +
                               "' has no data_batch_*.bin files; give a CIFAR-10 binary file or "
                               "the directory of the binary version");
      }
    } else {
      files.push_back(path);
    }
    for (const auto& f : files) {
      auto bytes = read_file(f);
      records_.insert(records_.end(), bytes.begin(), bytes.end());
    }
  }

  std::string name() const override { return "cifar10:" + path_; }
  shape4 image_shape() const override { return {1, 3, k_side, k_side}; }
  std::int64_t classes() const override { return 10; }
  std::int64_t images() const override {
    return static_cast<std::int64_t>(records_.size() / k_record);
  }

  void fill(std::int64_t iteration, std::int64_t n, float* images, float* labels) override {
    fill_slice(iteration, n, 0, n, images, labels);
  }

  // fill_slice only converts bytes read at construction: thread-safe.
  bool fills_concurrently() const override { return true; }

  void fill_slice(std::int64_t iteration, std::int64_t batch, std::int64_t first, std::int64_t n,
                  float* images, float* labels) override {
    const std::size_t count = records_.size() / k_record;
    for (std::int64_t i = 0; i < n; ++i) {
      // In 128 bits: a resumed run's iteration goes up to 2^53 (checkpoint_max_iteration),
      // whose product with a batch over 1024 overflowed int64 (session 42's hostile run:
      // undefined behaviour, wrapped record indices in release).
      const auto at =
          static_cast<unsigned __int128>(iteration) * static_cast<std::uint64_t>(batch) +
          static_cast<std::uint64_t>(first + i);
      const auto r = static_cast<std::size_t>(at % count);
      const unsigned char* rec = records_.data() + r * k_record;
      labels[i] = static_cast<float>(rec[0]);
      for (std::size_t j = 0; j < k_pixels; ++j) {
        images[static_cast<std::size_t>(i) * k_pixels + j] = rec[1 + j] / 255.0f - 0.5f;
      }
    }
  }

 private:
  std::string path_;
  std::vector<unsigned char> records_;  // all records, back to back
};

}  // namespace

std::unique_ptr<data_source> make_cifar10_source(const std::string& path) {
  return std::make_unique<cifar10_source>(path);
}

std::unique_ptr<data_source> make_data_source(const std::string& spec, const shape4& image,
                                              std::int64_t classes, std::uint64_t seed) {
  if (spec == "synthetic") return make_synthetic_source(image, classes, seed);
  if (spec.starts_with("cifar10:")) {
    auto source = make_cifar10_source(spec.substr(8));
    const shape4 s = source->image_shape();
    if (image.c != s.c || image.h != s.h || image.w != s.w || classes != 10) {
      throw invalid_argument(
          "--data " + spec +
          " gives 3x32x32 images of 10 classes, but the "
          "network takes " +
          std::to_string(image.c) + "x" + std::to_string(image.h) + "x" + std::to_string(image.w) +
          " and " + std::to_string(classes) +
          " classes; use --image-side 32 --classes 10 with a zoo network, a model whose input is "
          "3x32x32 and whose logits are 10 (--net PATH.onnx), or synthetic data");
    }
    return source;
  }
  throw invalid_argument("--data '" + spec +
                         "' is not a data source: expected 'synthetic' or 'cifar10:PATH'");
}

}  // namespace memweave
