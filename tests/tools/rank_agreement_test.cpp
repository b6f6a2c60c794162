// What data-parallel ranks must agree on (tools/rank_agreement): the options but the outputs,
// and the MEMWEAVE_* variables but a rank's own device, log level and files. The comparison
// itself runs under mpirun (tests/comm/data_parallel_cli.cmake).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <map>
#include <string>

#include "tools/rank_agreement.hpp"

namespace memweave {
namespace rank_agreement_test {

TEST(rank_agreement, the_text_holds_what_must_agree_and_not_a_ranks_own) {
  ::setenv("MEMWEAVE_BUCKET_BYTES", "1MiB", 1);
  ::setenv("MEMWEAVE_CUDA_DEVICE", "1", 1);
  ::setenv("MEMWEAVE_LOG", "info", 1);
  const std::map<std::string, std::string> options = {
      {"net", "resnet50"},   {"iterations", "3"}, {"split", ""},
      {"json", "rank.json"}, {"save", "w.ckpt"},  {"trace-timeline", "t.json"}};
  const std::string text = agreement_text(options);
  ::unsetenv("MEMWEAVE_BUCKET_BYTES");
  ::unsetenv("MEMWEAVE_CUDA_DEVICE");
  ::unsetenv("MEMWEAVE_LOG");
  for (const char* line :
       {"--net=resnet50\n", "--iterations=3\n", "--split=\n", "MEMWEAVE_BUCKET_BYTES=1MiB\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << " in\n" << text;
  }
  for (const char* part :
       {"json", "save", "trace-timeline", "MEMWEAVE_CUDA_DEVICE", "MEMWEAVE_LOG"}) {
    EXPECT_EQ(text.find(part), std::string::npos) << part << " in\n" << text;
  }
  // In name order: the same options in any order give the same text.
  EXPECT_LT(text.find("--iterations"), text.find("--net"));
}

// The files each rank reads by one path are compared by their contents: ranks given other
// files there trained apart without a word (another checkpoint) or were ended by MPI (another
// model; session 42's hostile run).
TEST(rank_agreement, the_text_holds_the_input_files_contents) {
  const std::string dir = ::testing::TempDir();
  const std::string model = dir + "rank_agreement_model.onnx", ckpt = dir + "rank_agreement.ckpt";
  const auto write = [](const std::string& path, const std::string& bytes) {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr) << path;
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  };
  write(model, "model one");
  write(ckpt, "checkpoint");
  const std::map<std::string, std::string> options = {{"net", model}, {"init-from", ckpt}};
  const std::string first = agreement_text(options);
  EXPECT_NE(first.find("--net's file=checksum "), std::string::npos) << first;
  EXPECT_NE(first.find("--init-from's file=checksum "), std::string::npos) << first;
  write(model, "model two");
  const std::string second = agreement_text(options);
  EXPECT_NE(first, second);
  EXPECT_NE(second.find(", 9 bytes"), std::string::npos) << second;
  // A zoo name is no file; a file that cannot be read is the command's to report.
  EXPECT_EQ(agreement_text({{"net", "resnet50"}}).find("'s file"), std::string::npos);
  EXPECT_NE(agreement_text({{"init-from", dir + "absent.ckpt"}}).find("'s file=unreadable"),
            std::string::npos);
  std::remove(model.c_str());
  std::remove(ckpt.c_str());
}

}  // namespace rank_agreement_test
}  // namespace memweave
