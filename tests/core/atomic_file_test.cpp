// write_file_atomically under a file size limit (what a full disk does to a write, without
// a disk to fill): the earlier file stays whole and no temporary file is left beside it.
#include "memweave/core/atomic_file.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "memweave/core/error.hpp"
#include "tests/core/file_size_limit.hpp"

namespace memweave {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path scratch_dir() {
  const fs::path d = fs::temp_directory_path() / ("memweave_atomic_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

TEST(atomic_file_test, a_write_replaces_the_file_whole) {
  const fs::path d = scratch_dir();
  const std::string path = (d / "out.json").string();
  std::ofstream(path) << "old";
  write_file_atomically(path, "new contents", "--json");
  EXPECT_EQ(slurp(path), "new contents");
  EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator()), 1);
  fs::remove_all(d);
}

TEST(atomic_file_test, a_write_that_fails_half_way_keeps_the_earlier_file_and_leaves_nothing) {
  const fs::path d = scratch_dir();
  const std::string path = (d / "out.json").string();
  std::ofstream(path) << "old";
  std::string message;
  {
    const test::file_size_limit limit(4096);
    try {
      write_file_atomically(path, std::string(1 << 20, 'x'), "--trace-timeline");
    } catch (const invalid_argument& e) {
      message = e.what();
    }
  }
  EXPECT_NE(message.find("--trace-timeline '" + path + "'"), std::string::npos) << message;
  EXPECT_NE(message.find("File too large"), std::string::npos) << message;
  EXPECT_EQ(slurp(path), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator()), 1)
      << "a temporary file was left";
  fs::remove_all(d);
}

}  // namespace
}  // namespace memweave
