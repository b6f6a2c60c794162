// What data-parallel ranks must agree on (tools/rank_agreement): the options but the outputs,
// and the MEMWEAVE_* variables but a rank's own device, log level and files. The comparison
// itself runs under mpirun (tests/comm/data_parallel_cli.cmake).
#include <gtest/gtest.h>
#include <stdlib.h>

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

}  // namespace rank_agreement_test
}  // namespace memweave
