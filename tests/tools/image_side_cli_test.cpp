// Huge images at the command line (issue 14): plans at 32768 without a budget, and plan
// --max-image-side, the largest input side (a multiple of 32) that fits a budget at a
// batch, checked against plans at the sides around it.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <string>

#include "cli_harness.hpp"

namespace memweave {
namespace {

using namespace test;

// A narrow VGG16 at batch 1 (the adaptive pool keeps its FC layers small at any side),
// planned without convolution workspaces: its peak is its tensors'.
std::vector<std::string> narrow_vgg(std::vector<std::string> extra) {
  std::vector<std::string> a = {"--net",     "vgg16", "--batch",   "1",    "--width",  "0.0625",
                                "--classes", "5",     "--conv-ws", "none", "--policy", "baseline"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// The baseline's peak at `side`, from the plan's JSON.
std::size_t peak_at(std::int64_t side) {
  const std::string json = temp("side" + std::to_string(side) + ".json");
  EXPECT_EQ(
      run(plan_command, narrow_vgg({"--image-side", std::to_string(side), "--json", json})).code,
      0);
  std::smatch m;
  const std::string j = slurp(json);
  std::filesystem::remove(json);
  if (!std::regex_search(j, m, std::regex("\"peak_bytes\": ([0-9]+)"))) return 0;
  return std::stoull(m[1]);
}

TEST(image_side_cli_test, the_largest_side_is_the_one_whose_peak_the_budget_holds_exactly) {
  const std::size_t at256 = peak_at(256), at288 = peak_at(288);
  ASSERT_GT(at256, 0u);
  ASSERT_LT(at256, at288);
  const std::string json = temp("max_side.json");
  // A budget of exactly the peak at 256 holds 256 and not 288.
  const auto r =
      run(plan_command,
          narrow_vgg({"--budget", std::to_string(at256), "--max-image-side", "--json", json}));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("largest image side (a multiple of 32) at batch 1"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("baseline: side 256 (256x256)"), std::string::npos) << r.out;
  const std::string j = slurp(json);
  EXPECT_NE(j.find("\"search\": \"max_image_side\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"image_side\": 256"), std::string::npos) << j;
  EXPECT_NE(j.find("\"peak_bytes\": " + std::to_string(at256)), std::string::npos) << j;
  std::filesystem::remove(json);
  // One byte less: the next side down.
  const auto less =
      run(plan_command, narrow_vgg({"--budget", std::to_string(at256 - 1024), "--max-image-side"}));
  EXPECT_NE(less.out.find("baseline: side 224 (224x224)"), std::string::npos) << less.out;
}

// With --tile the plan at the side found runs tiled: its segments are in the policy's line
// and in the report's tiled_segments (a review found them missing: "tiled_segments": []).
TEST(image_side_cli_test, with_tile_the_side_found_reports_its_tiled_segments) {
  const std::string json = temp("side_tiled.json");
  const auto r = run(plan_command, {"--net", "vgg16", "--width", "0.0625", "--classes", "5",
                                    "--batch", "1", "--budget", "6MiB", "--policy", "utp", "--tile",
                                    "--max-image-side", "--json", json});
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("utp: side 3904 (3904x3904), peak 5.97 MiB; tiled segment conv1_1..pool5 "
                       "(31 layers) in 122x122 tiles"),
            std::string::npos)
      << r.out;
  EXPECT_NE(slurp(json).find("\"first\": \"conv1_1\", \"last\": \"pool5\""), std::string::npos)
      << slurp(json);
  std::filesystem::remove(json);
}

TEST(image_side_cli_test, nothing_fitting_exits_1_and_bad_combinations_name_the_options) {
  const auto r = run(plan_command, narrow_vgg({"--budget", "1MiB", "--max-image-side"}));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("nothing fits, not even side 32"), std::string::npos) << r.out;
  // The summary names the device though no plan ran (a review: "device " and nothing).
  EXPECT_NE(r.out.find("device null (planning, 1.00 MiB"), std::string::npos) << r.out;
  auto error = [](std::vector<std::string> extra) {
    return error_of(plan_command, narrow_vgg(std::move(extra)));
  };
  EXPECT_NE(error({"--max-image-side"}).find("--max-image-side needs --budget"), std::string::npos);
  EXPECT_NE(error({"--max-image-side", "--budget", "1GiB", "--image-side", "64"})
                .find("without --image-side"),
            std::string::npos);
  EXPECT_NE(error({"--max-image-side", "--budget", "1GiB", "--max-batch"}).find("--max-batch"),
            std::string::npos);
}

TEST(image_side_cli_test, without_a_budget_vgg16_and_resnet50_plan_at_32768) {
  for (const char* net : {"vgg16", "resnet50"}) {
    const auto r = run(plan_command, {"--net", net, "--batch", "1", "--image-side", "32768",
                                      "--policy", "baseline,liveness", "--conv-ws", "none"});
    EXPECT_EQ(r.code, 0) << r.out;
    // The baseline's terabytes need the large planning device; a small plan keeps 1 TiB.
    EXPECT_NE(r.out.find("planning, 32.00 TiB"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("baseline    yes"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("liveness    yes"), std::string::npos) << r.out;
  }
  const auto small = run(plan_command, narrow_vgg({"--image-side", "64"}));
  EXPECT_NE(small.out.find("planning, 1.00 TiB"), std::string::npos) << small.out;
}

}  // namespace
}  // namespace memweave
