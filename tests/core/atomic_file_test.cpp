// write_file_atomically under a file size limit (what a full disk does to a write, without
// a disk to fill): the earlier file stays whole and no temporary file is left beside it; and
// read_whole_file of a file larger than memory.
#include "memweave/core/atomic_file.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "memweave/core/error.hpp"
#include "memweave/core/whole_file.hpp"
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

// A file larger than this machine's memory (sparse: no disk taken) is refused by size before
// any of it is read, naming it (the bad_alloc of reading it whole reached the command line's
// handler, which blamed the options; session 45's hostile run).
TEST(whole_file_test, a_file_larger_than_memory_is_refused_naming_it) {
  const fs::path d = scratch_dir();
  const std::string path = (d / "huge.ckpt").string();
  std::ofstream(path) << "MWCKPT";
  const std::uintmax_t memory = static_cast<std::uintmax_t>(::sysconf(_SC_PHYS_PAGES)) *
                                static_cast<std::uintmax_t>(::sysconf(_SC_PAGE_SIZE));
  std::error_code ec;
  fs::resize_file(path, memory + 4096, ec);
  if (ec) GTEST_SKIP() << "cannot make a sparse file of " << memory << " bytes: " << ec.message();
  std::string message;
  try {
    (void)read_whole_file(path, "checkpoint");
  } catch (const invalid_argument& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("checkpoint '" + path + "' is "), std::string::npos) << message;
  EXPECT_NE(message.find("more than this machine's memory holds"), std::string::npos) << message;
  fs::remove_all(d);
}

}  // namespace
}  // namespace memweave
