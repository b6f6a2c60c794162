// The data sources: determinism, and the CIFAR-10 reader on files the test writes.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "engine/runtime/batch_prefetcher.hpp"
#include "memweave/core/error.hpp"
#include "memweave/engine/data_source.hpp"

namespace memweave {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("memweave_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

TEST(data_source_test, synthetic_batches_depend_only_on_seed_and_iteration) {
  auto a = make_synthetic_source({1, 3, 4, 4}, 5, 11);
  auto b = make_synthetic_source({1, 3, 4, 4}, 5, 11);
  std::vector<float> ia(4 * 48), la(4), ib(4 * 48), lb(4);
  a->fill(3, 4, ia.data(), la.data());
  b->fill(0, 4, ib.data(), lb.data());  // asking for another batch first changes nothing
  b->fill(3, 4, ib.data(), lb.data());
  EXPECT_EQ(ia, ib);
  EXPECT_EQ(la, lb);
  for (float l : la) EXPECT_TRUE(l >= 0 && l < 5 && l == std::floor(l));
  a->fill(4, 4, ib.data(), lb.data());
  EXPECT_NE(ia, ib);
}

// The DATA step's input pipeline makes a batch of a source that allows it in slices on
// several threads, the one made ahead too: the same bytes as one fill (here, not under
// ThreadSanitizer: TBB's workers are not instrumented).
class slice_counting final : public data_source {
 public:
  explicit slice_counting(data_source& inner) : inner_(inner) {}
  std::string name() const override { return "slice_counting"; }
  shape4 image_shape() const override { return inner_.image_shape(); }
  std::int64_t classes() const override { return inner_.classes(); }
  void fill(std::int64_t iteration, std::int64_t n, float* images, float* labels) override {
    ++whole;
    inner_.fill(iteration, n, images, labels);
  }
  void fill_slice(std::int64_t iteration, std::int64_t batch, std::int64_t first, std::int64_t n,
                  float* images, float* labels) override {
    ++sliced;
    inner_.fill_slice(iteration, batch, first, n, images, labels);
  }
  bool fills_concurrently() const override { return true; }
  std::atomic<int> whole{0}, sliced{0};

 private:
  data_source& inner_;
};

TEST(data_source_test, a_batch_made_in_slices_on_several_threads_is_what_fill_gives) {
  const shape4 s{1, 3, 7, 5};
  auto synthetic = make_synthetic_source(s, 4, 9);
  ASSERT_TRUE(synthetic->fills_concurrently());
  slice_counting source(*synthetic);
  constexpr std::int64_t n = 13;
  const auto floats = static_cast<std::size_t>(n * s.per_image());
  std::vector<float> expected(floats + n);
  synthetic->fill(5, n, expected.data(), expected.data() + floats);
  batch_prefetcher p;
  p.use_threads(2);
  const float* made = p.take(source, 5, n, floats);
  EXPECT_EQ(std::vector<float>(made, made + floats + n), expected);
  p.start_next(source, 6, n, floats);
  synthetic->fill(6, n, expected.data(), expected.data() + floats);
  made = p.take(source, 6, n, floats);
  EXPECT_EQ(std::vector<float>(made, made + floats + n), expected) << "made ahead";
  EXPECT_EQ(p.hits(), 1);
  if (std::thread::hardware_concurrency() >= 2) {  // one core: an arena of one, filled whole
    EXPECT_EQ(source.whole.load(), 0) << "both batches in slices";
    EXPECT_GE(source.sliced.load(), 2);
  }
}

// The CHW region r of image i of a whole batch `all` of images of `s`.
std::vector<float> cut(const std::vector<float>& all, const shape4& s, std::int64_t i,
                       const image_region& r) {
  std::vector<float> out;
  for (std::int64_t c = r.c0; c < r.c0 + r.c; ++c) {
    for (std::int64_t y = r.y0; y < r.y0 + r.h; ++y) {
      for (std::int64_t x = r.x0; x < r.x0 + r.w; ++x)
        out.push_back(all[static_cast<std::size_t>(((i * s.c + c) * s.h + y) * s.w + x)]);
    }
  }
  return out;
}

// A source with only fill(): every other entry point is data_source's default.
class fill_only final : public data_source {
 public:
  explicit fill_only(data_source& inner) : inner_(inner) {}
  std::string name() const override { return "fill_only"; }
  shape4 image_shape() const override { return inner_.image_shape(); }
  std::int64_t classes() const override { return inner_.classes(); }
  void fill(std::int64_t iteration, std::int64_t n, float* images, float* labels) override {
    inner_.fill(iteration, n, images, labels);
  }

 private:
  data_source& inner_;
};

TEST(data_source_test, a_region_or_the_labels_are_exactly_what_fill_writes_there) {
  const shape4 s{1, 3, 9, 7};
  auto synthetic = make_synthetic_source(s, 4, 5);
  fill_only defaults(*synthetic);
  std::vector<float> images(static_cast<std::size_t>(5 * s.per_image())), labels(5);
  synthetic->fill(2, 5, images.data(), labels.data());
  for (data_source* src :
       {static_cast<data_source*>(synthetic.get()), static_cast<data_source*>(&defaults)}) {
    SCOPED_TRACE(src->name());
    for (const image_region& r : {image_region{0, 3, 0, 9, 0, 7}, image_region{1, 2, 4, 5, 3, 4},
                                  image_region{2, 1, 8, 1, 6, 1}, image_region{0, 1, 3, 0, 0, 7}}) {
      for (std::int64_t i : {0, 4}) {
        std::vector<float> out(static_cast<std::size_t>(r.c * r.h * r.w));
        src->fill_region(2, 5, i, r, out.data());
        EXPECT_EQ(out, cut(images, s, i, r)) << "image " << i << " rows " << r.y0 << "+" << r.h;
      }
    }
    std::vector<float> some(3);
    src->fill_labels(2, 5, 1, 3, some.data());
    EXPECT_EQ(some, std::vector<float>(labels.begin() + 1, labels.begin() + 4));
    std::vector<float> out(100);
    EXPECT_THROW(src->fill_region(2, 5, 5, {0, 1, 0, 1, 0, 1}, out.data()), invalid_argument);
    EXPECT_THROW(src->fill_region(2, 5, 0, {0, 1, 5, 5, 0, 1}, out.data()), invalid_argument);
    EXPECT_THROW(src->fill_region(2, 5, 0, {3, 1, 0, 1, 0, 1}, out.data()), invalid_argument);
  }
  // A data-parallel rank's image i is the global batch's image first + i.
  auto rank = make_batch_slice(*synthetic, 5, 2);
  const image_region r{0, 3, 2, 3, 1, 4};
  std::vector<float> out(static_cast<std::size_t>(r.c * r.h * r.w)), label(1);
  rank->fill_region(2, 3, 1, r, out.data());
  EXPECT_EQ(out, cut(images, s, 3, r));
  rank->fill_labels(2, 3, 1, 1, label.data());
  EXPECT_EQ(label[0], labels[3]);
  // Its slices too, as safe on several threads as the whole source (train always makes one).
  EXPECT_TRUE(rank->fills_concurrently());
  std::vector<float> two(static_cast<std::size_t>(2 * s.per_image())), two_labels(2);
  rank->fill_slice(2, 3, 1, 2, two.data(), two_labels.data());
  EXPECT_EQ(two, std::vector<float>(images.begin() + 3 * s.per_image(), images.end()));
  EXPECT_EQ(two_labels, std::vector<float>(labels.begin() + 3, labels.end()));
  EXPECT_THROW(rank->fill_slice(2, 3, 2, 2, two.data(), two_labels.data()), invalid_argument);
}

// A copy of a source is another source: a batch made ahead for one is not the other's.
TEST(data_source_test, a_copy_of_a_source_has_an_identity_of_its_own) {
  auto synthetic = make_synthetic_source({1, 3, 4, 4}, 5, 11);
  fill_only a(*synthetic);
  const fill_only b(a);
  EXPECT_NE(a.identity(), b.identity());
  EXPECT_NE(a.identity(), synthetic->identity());
  EXPECT_FALSE(a.fills_concurrently()) << "a source says so itself";
}

TEST(data_source_test, a_tile_of_a_32768_image_costs_only_the_tile) {
  // 1000 classes of 3 x 32768 x 32768: a stored template per class would be 12 TiB.
  const shape4 s{1, 3, 32768, 32768};
  auto src = make_synthetic_source(s, 1000, 9);
  const image_region tile{0, 3, 32768 - 48, 48, 20000, 32};
  std::vector<float> a(static_cast<std::size_t>(3 * 48 * 32)), b(a.size());
  src->fill_region(7, 1, 0, tile, a.data());
  src->fill_region(7, 1, 0, tile, b.data());
  EXPECT_EQ(a, b);
  // Its lower half, made alone, is the same pixels.
  const image_region half{1, 1, 32768 - 24, 24, 20000, 32};
  std::vector<float> h(static_cast<std::size_t>(24 * 32));
  src->fill_region(7, 1, 0, half, h.data());
  for (std::int64_t y = 0; y < 24; ++y) {
    for (std::int64_t x = 0; x < 32; ++x)
      EXPECT_EQ(h[static_cast<std::size_t>(y * 32 + x)],
                a[static_cast<std::size_t>((48 + 24 + y) * 32 + x)]);
  }
  for (float v : a) EXPECT_TRUE(std::abs(v) <= 2.5f) << v;  // texture 1, waves 2 x 0.5, noise 0.5
}

TEST(data_source_test, synthetic_classes_survive_pooling_to_a_coarse_grid) {
  // At a large side what a network keeps after its pools is a coarse grid of averages:
  // there images of one class agree (the noise averages out) and classes differ.
  const shape4 s{1, 3, 256, 256};
  const std::int64_t n = 24, cell = 32, grid = 256 / cell;
  auto src = make_synthetic_source(s, 3, 4);
  std::vector<float> images(static_cast<std::size_t>(n * s.per_image())), labels(n);
  src->fill(0, n, images.data(), labels.data());
  std::vector<std::vector<double>> pooled(n, std::vector<double>(3 * grid * grid, 0.0));
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t c = 0; c < 3; ++c) {
      for (std::int64_t y = 0; y < 256; ++y) {
        for (std::int64_t x = 0; x < 256; ++x)
          pooled[i][(c * grid + y / cell) * grid + x / cell] +=
              images[static_cast<std::size_t>(((i * 3 + c) * 256 + y) * 256 + x)] /
              double(cell * cell);
      }
    }
  }
  auto rms = [&](std::int64_t a, std::int64_t b) {
    double sum = 0;
    for (std::size_t k = 0; k < pooled[a].size(); ++k)
      sum += (pooled[a][k] - pooled[b][k]) * (pooled[a][k] - pooled[b][k]);
    return std::sqrt(sum / double(pooled[a].size()));
  };
  int same = 0, different = 0;
  for (std::int64_t a = 0; a < n; ++a) {
    for (std::int64_t b = a + 1; b < n; ++b) {
      if (labels[a] == labels[b]) {
        EXPECT_LT(rms(a, b), 0.05) << a << " and " << b << ", class " << labels[a];
        ++same;
      } else {
        EXPECT_GT(rms(a, b), 0.15) << a << " and " << b;
        ++different;
      }
    }
  }
  EXPECT_GT(same, 0);
  EXPECT_GT(different, 0);
}

TEST(data_source_test, cifar10_records_are_read_in_order_and_normalized) {
  const std::string path = temp_path("cifar.bin");
  std::vector<unsigned char> bytes;
  for (int r = 0; r < 3; ++r) {
    bytes.push_back(static_cast<unsigned char>(r + 7));
    for (int j = 0; j < 3072; ++j) bytes.push_back(static_cast<unsigned char>((j + r) % 256));
  }
  write_bytes(path, bytes);
  auto src = make_data_source("cifar10:" + path, {1, 3, 32, 32}, 10, 1);
  std::vector<float> images(2 * 3072), labels(2);
  src->fill(1, 2, images.data(), labels.data());  // records 2 and 0 (wrapping)
  EXPECT_EQ(labels[0], 9.0f);
  EXPECT_EQ(labels[1], 7.0f);
  EXPECT_FLOAT_EQ(images[0], 2 / 255.0f - 0.5f);
  EXPECT_FLOAT_EQ(images[3072 + 5], 5 / 255.0f - 0.5f);
  // A run resumed at the checkpoint's largest iteration, 2^53, with a batch of 2048: its
  // first image is record (2^53 * 2048) mod 3 = 1. In int64 the product overflowed (2^64
  // wrapped to 0: record 0, and undefined behaviour; session 42's hostile run).
  src->fill_slice(std::int64_t{1} << 53, 2048, 0, 2, images.data(), labels.data());
  EXPECT_EQ(labels[0], 8.0f);
  EXPECT_EQ(labels[1], 9.0f);
  std::filesystem::remove(path);
}

// A directory's data_batch_N.bin files are read in the order of N: data_batch_10 after
// data_batch_2 (name order put it first; session 47's hostile run).
TEST(data_source_test, a_directorys_cifar10_files_are_read_in_the_order_of_their_numbers) {
  const std::string dir = temp_path("cifar_dir");
  std::filesystem::create_directories(dir);
  for (int number : {10, 2, 1}) {
    std::vector<unsigned char> record(1 + 3072, 0);
    record[0] = static_cast<unsigned char>(number % 10);  // the label names the file
    write_bytes(dir + "/data_batch_" + std::to_string(number) + ".bin", record);
  }
  auto src = make_data_source("cifar10:" + dir, {3, 3, 32, 32}, 10, 1);
  std::vector<float> images(3 * 3072), labels(3);
  src->fill(0, 3, images.data(), labels.data());
  EXPECT_EQ(labels, (std::vector<float>{1.0f, 2.0f, 0.0f}));
  std::filesystem::remove_all(dir);
}

TEST(data_source_test, malformed_cifar10_files_are_rejected_with_the_reason) {
  const std::string truncated = temp_path("truncated.bin");
  write_bytes(truncated, std::vector<unsigned char>(3073 + 100, 1));
  try {
    make_cifar10_source(truncated);
    FAIL();
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("not a positive multiple of 3073"), std::string::npos)
        << e.what();
  }
  const std::string bad_label = temp_path("label.bin");
  std::vector<unsigned char> bytes(2 * 3073, 0);
  bytes[3073] = 200;
  write_bytes(bad_label, bytes);
  try {
    make_cifar10_source(bad_label);
    FAIL();
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("record 1 has label 200"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_cifar10_source(temp_path("missing.bin")), invalid_argument);
  std::filesystem::remove(truncated);
  std::filesystem::remove(bad_label);
}

TEST(data_source_test, cifar10_needs_a_network_of_its_shape) {
  const std::string path = temp_path("shape.bin");
  write_bytes(path, std::vector<unsigned char>(3073, 1));
  EXPECT_THROW(make_data_source("cifar10:" + path, {1, 3, 224, 224}, 1000, 1), invalid_argument);
  EXPECT_THROW(make_data_source("imagenet", {1, 3, 32, 32}, 10, 1), invalid_argument);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace memweave
