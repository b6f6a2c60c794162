#include "memweave/conv_workspace/conv_algorithm_cache.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "memweave/conv_workspace/conv_workspace_selector.hpp"
#include "memweave/core/error.hpp"

namespace memweave {
namespace {

std::string temp(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("memweave_conv_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// The whole of a file.
std::string slurp_file(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// What a backend measures for key "k" (direct without workspace, "fast" with 64 bytes),
// counting the calls.
conv_workspace_selector::measure_fn measured_k(int& calls) {
  return [&calls] {
    ++calls;
    return std::vector<conv_candidate>{{"direct", 0, 2.0}, {"fast", 64, 1.0}};
  };
}

TEST(conv_algorithm_cache_test, file_round_trips) {
  const std::string path = temp("roundtrip");
  conv_algorithm_cache a;
  a.insert("host|forward|2x3x8x8|k3", {{"direct", 0, 0.5}, {"im2col_image", 4096, 0.125}});
  a.insert("host|backward_data|2x3x8x8|k3", {{"direct", 0, 1e-6}});
  a.save(path, "host threads=2");
  EXPECT_FALSE(a.dirty());
  conv_algorithm_cache b;
  EXPECT_TRUE(b.load(path, "host threads=2"));
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(*b.find("host|forward|2x3x8x8|k3"), *a.find("host|forward|2x3x8x8|k3"));
  EXPECT_EQ(*b.find("host|backward_data|2x3x8x8|k3"), *a.find("host|backward_data|2x3x8x8|k3"));
  std::filesystem::remove(path);
}

TEST(conv_algorithm_cache_test, missing_file_is_an_empty_cache) {
  conv_algorithm_cache c;
  EXPECT_TRUE(c.load(temp("never-written"), "x"));
  EXPECT_EQ(c.size(), 0u);
}

TEST(conv_algorithm_cache_test, foreign_and_corrupt_files_are_not_trusted) {
  const std::string path = temp("bad");
  conv_algorithm_cache a;
  a.insert("k", {{"direct", 0, 0.5}});
  a.save(path, "host threads=2");
  conv_algorithm_cache foreign;
  EXPECT_FALSE(foreign.load(path, "cuda NVIDIA H100"));
  EXPECT_EQ(foreign.size(), 0u);

  for (const std::string body :
       {"k\tdirect 0\n", "k\tdirect zero 0.5\n", "k\n", "k\tdirect 0 -1\n",
        // Issue 11: numbers out of range, and an entry the selector could not choose from
        // (no workspace-free algorithm: a logic_error, "internal error", when chosen).
        "k\tdirect 0 inf\n", "k\tdirect 0 nan\n", "k\tdirect 0 0.5\tbig 999999999999999999 1\n",
        "k\tim2col_image 4096 0.5\n"}) {
    std::ofstream(path) << "# memweave-conv-cache v1 host threads=2\n" << body;
    conv_algorithm_cache corrupt;
    EXPECT_FALSE(corrupt.load(path, "host threads=2")) << body;
    EXPECT_EQ(corrupt.size(), 0u) << body;
  }
  std::ofstream(path) << "hello\n";
  conv_algorithm_cache junk;
  EXPECT_FALSE(junk.load(path, "host threads=2"));
  std::filesystem::remove(path);
}

// A corrupt line is quoted short and with its control bytes escaped: a 100 MB candidate was
// logged whole (100 MB of stderr), a terminal's escape sequences as they were (session 45's
// hostile run).
TEST(conv_algorithm_cache_test, a_corrupt_lines_text_is_quoted_short_and_escaped) {
  const std::string path = temp("long");
  std::ofstream(path) << "# memweave-conv-cache v1 host threads=2\nk\tdirect 0 1\x1b[31m"
                      << std::string(1 << 20, 'A') << "\n";
  conv_algorithm_cache c;
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(c.load(path, "host threads=2"));
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_LT(logged.size(), 1000u);
  EXPECT_NE(logged.find("candidate 'direct 0 1\\x1b[31mAAA"), std::string::npos) << logged;
  EXPECT_EQ(logged.find('\x1b'), std::string::npos) << logged;
  std::filesystem::remove(path);
}

// Issue 11: a cache file written under another mode lacks the fixed algorithm; choosing
// from it threw std::logic_error ("internal error").
TEST(conv_algorithm_cache_test, selector_remeasures_a_cached_entry_without_the_fixed_algorithm) {
  const std::string path = temp("fixed");
  std::ofstream(path) << "# memweave-conv-cache v1 fp\nk\tdirect 0 2\n";
  conv_ws_options o = conv_ws_options::parse("fixed:fast", "--conv-ws");
  o.cache_path = path;
  int calls = 0;
  const auto measure = measured_k(calls);
  conv_workspace_selector s(o, "fp");
  EXPECT_EQ(s.choose(s.candidates("k", measure), 0).algorithm, "fast");
  EXPECT_EQ(calls, 1);
  conv_ws_options missing = conv_ws_options::parse("fixed:nonexistent", "--conv-ws");
  conv_workspace_selector t(missing, "fp");
  try {
    (void)t.candidates("k", measure);
    FAIL();
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--conv-ws 'fixed:nonexistent' names no algorithm"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove(path);
}

TEST(conv_algorithm_cache_test, a_device_or_directory_is_neither_read_nor_replaced) {
  conv_algorithm_cache c;
  EXPECT_FALSE(c.load("/dev/zero", "fp"));  // would be read until memory runs out
  c.insert("k", {{"direct", 0, 0.5}});
  EXPECT_THROW(c.save("/dev/null", "fp"), invalid_argument);
  EXPECT_TRUE(std::filesystem::is_character_file("/dev/null"));
  EXPECT_THROW(c.save(std::filesystem::temp_directory_path().string(), "fp"), invalid_argument);
}

// MEMWEAVE_CONV_CACHE naming another file by mistake (a checkpoint): it is neither trusted
// nor written over; the timings go unsaved. A corrupt conv cache is still rewritten (the test
// below); one of another backend is kept (the test after it).
TEST(conv_algorithm_cache_test, a_file_that_is_not_a_conv_cache_is_never_written_over) {
  const std::string path = temp("precious");
  const std::string precious = "MWCKPT weights of a week of training\n";
  std::ofstream(path) << precious;
  conv_algorithm_cache c;
  EXPECT_FALSE(c.load(path, "fp"));
  c.insert("k", {{"direct", 0, 0.5}});
  c.save(path, "fp");
  std::ifstream in(path);
  const std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(kept, precious);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  std::filesystem::remove(path);
}

// A user's file named like a temporary file beside the cache is not touched by a save: with
// a fixed "<path>.tmp" it was written over and renamed onto the cache (session 42's hostile
// run). The cache is written whole, and nothing is left beside it.
TEST(conv_algorithm_cache_test, a_save_leaves_files_beside_the_cache_alone) {
  const std::string path = temp("beside");
  const std::string precious = "precious\n";
  std::ofstream(path + ".tmp") << precious;
  conv_algorithm_cache c;
  c.insert("k", {{"direct", 0, 0.5}});
  c.save(path, "fp");
  std::ifstream in(path + ".tmp");
  const std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(kept, precious);
  conv_algorithm_cache back;
  EXPECT_TRUE(back.load(path, "fp"));
  EXPECT_NE(back.find("k"), nullptr);
  std::size_t beside = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(std::filesystem::path(path).parent_path())) {
    beside += e.path().filename().string().starts_with(
        std::filesystem::path(path).filename().string() + ".tmp-");
  }
  EXPECT_EQ(beside, 0u);
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".tmp");
}

// A cache of another backend, device or thread count (a GPU's cuDNN timings, the host's at
// another thread count) is not written over by a run that cannot use it: a run elsewhere
// threw those timings away, and the next run there measured them all again.
TEST(conv_algorithm_cache_test,
     a_cache_of_another_fingerprint_is_kept_and_the_new_timings_unsaved) {
  const std::string path = temp("foreign");
  const std::string theirs = "# memweave-conv-cache v1 cuda H200\nk\tALGO_1 0 0.25\n";
  std::ofstream(path) << theirs;
  conv_algorithm_cache c;
  EXPECT_FALSE(c.load(path, "host threads=2"));
  c.insert("k", {{"direct", 0, 0.5}});
  c.save(path, "host threads=2");
  std::ifstream in(path);
  const std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(kept, theirs);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  std::filesystem::remove(path);
}

// An entry the backend cannot run as written (an algorithm it does not have, or less workspace
// than the algorithm needs: a file edited by hand) failed its step with an internal error
// (exit 3); it is measured again, replaced, and the file rewritten.
TEST(conv_algorithm_cache_test, an_entry_the_backend_refuses_is_measured_again_and_replaced) {
  const std::string path = temp("refused");
  std::ofstream(path) << "# memweave-conv-cache v1 fp\nk\tdirect 0 2\tfast 0 1e-12\n";
  conv_ws_options o;
  o.cache_path = path;
  int calls = 0;
  const auto measure = measured_k(calls);
  // "fast" needs 64 bytes of workspace.
  auto runs = [](const conv_candidate& c) {
    return c.algorithm == "direct" || (c.algorithm == "fast" && c.workspace_bytes >= 64);
  };
  {
    conv_workspace_selector s(o, "fp");
    const auto& got = s.candidates("k", measure, runs);
    EXPECT_EQ(calls, 1);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[1].workspace_bytes, 64u);
  }
  {
    conv_workspace_selector s(o, "fp");  // the rewritten entry runs: a hit
    (void)s.candidates("k", measure, runs);
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(s.hits(), 1u);
  }
  std::filesystem::remove(path);
}

// A header ending in a carriage return (a file edited on Windows) names the same fingerprint:
// trusted, and rewritten (it was foreign, kept and never refreshed); an empty file is a new
// cache, written (it was said not to be, then was).
TEST(conv_algorithm_cache_test, a_windows_line_end_or_an_empty_file_is_no_foreign_cache) {
  const std::string path = temp("crlf");
  std::ofstream(path) << "# memweave-conv-cache v1 fp\r\nk\tdirect 0 2\n";
  conv_algorithm_cache c;
  EXPECT_TRUE(c.load(path, "fp"));
  ASSERT_NE(c.find("k"), nullptr);
  c.insert("k2", {{"direct", 0, 0.5}});
  c.save(path, "fp");
  EXPECT_EQ(slurp_file(path).find('\r'), std::string::npos);
  std::ofstream(path, std::ios::trunc).flush();
  conv_algorithm_cache empty;
  EXPECT_TRUE(empty.load(path, "fp"));
  empty.insert("k", {{"direct", 0, 0.5}});
  empty.save(path, "fp");
  EXPECT_TRUE(slurp_file(path).starts_with("# memweave-conv-cache v1 fp\n"));
  std::filesystem::remove(path);
}

TEST(conv_algorithm_cache_test, selector_remeasures_after_a_corrupt_file_and_rewrites_it) {
  const std::string path = temp("selector");
  std::ofstream(path) << "# memweave-conv-cache v1 fp\nk\tgarbage\n";
  conv_ws_options o;
  o.cache_path = path;
  int calls = 0;
  const auto measure = measured_k(calls);
  {
    conv_workspace_selector s(o, "fp");
    s.candidates("k", measure);
  }
  EXPECT_EQ(calls, 1);
  {
    conv_workspace_selector s(o, "fp");  // the rewritten file is trusted now
    EXPECT_EQ(s.candidates("k", measure).size(), 2u);
  }
  EXPECT_EQ(calls, 1);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace memweave
