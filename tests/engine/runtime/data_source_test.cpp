// The data sources: determinism, and the CIFAR-10 reader on files the test writes.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

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
  std::filesystem::remove(path);
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
