// The host convolution candidates: the chunk ladder that workspace selection chooses from,
// and the null device's model of them.
#include "engine/runtime/conv_selection.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "memweave/conv_workspace/conv_workspace_selector.hpp"

namespace memweave {
namespace {
namespace k = kernels::host;

// VGG16's conv1_2 at 224 x 224 (3 x 3, 64 -> 64 channels, padded).
conv_params conv1_2() {
  conv_params p;
  p.out_channels = 64;
  p.kernel_h = p.kernel_w = 3;
  p.pad_h = p.pad_w = 1;
  return p;
}

std::vector<std::int64_t> chunks(const std::vector<conv_candidate>& candidates) {
  std::vector<std::int64_t> out;
  for (const auto& c : candidates) {
    const host_conv_choice choice = parse_conv_candidate(c.algorithm);
    if (choice.algo == k::conv_algo::im2col_batch) out.push_back(choice.chunk);
  }
  return out;
}

TEST(conv_selection_test, chunks_step_by_an_eighth_of_the_batch_then_halve) {
  const conv_params p = conv1_2();
  using v = std::vector<std::int64_t>;
  EXPECT_EQ(chunks(host_conv_candidates(k::conv_pass::forward, {64, 64, 224, 224}, p)),
            (v{64, 56, 48, 40, 32, 24, 16, 8, 4, 2}));
  EXPECT_EQ(chunks(host_conv_candidates(k::conv_pass::forward, {7, 64, 224, 224}, p)),
            (v{7, 6, 5, 4, 3, 2}));
  EXPECT_EQ(chunks(host_conv_candidates(k::conv_pass::forward, {1, 64, 224, 224}, p)), v{});
  // Each chunk needs less workspace than the one before: the selector's ladder.
  for (k::conv_pass pass :
       {k::conv_pass::forward, k::conv_pass::backward_data, k::conv_pass::backward_filter}) {
    const auto c = host_conv_candidates(pass, {64, 64, 224, 224}, p);
    for (std::size_t i = 3; i < c.size(); ++i) {
      EXPECT_LT(c[i].workspace_bytes, c[i - 1].workspace_bytes) << c[i].algorithm;
    }
  }
}

TEST(conv_selection_test, the_model_runs_the_largest_chunk_that_fits) {
  const shape4 in{64, 64, 224, 224};
  const conv_params p = conv1_2();
  conv_ws_options o = conv_ws_options::parse("dynamic", "test");
  conv_workspace_selector selector(o, "test");
  const auto& c = selector.candidates(
      "k", [&] { return model_host_conv(k::conv_pass::forward, in, p, 12e12); });
  const std::size_t per_image =
      k::conv_workspace_bytes(k::conv_algo::im2col_batch, k::conv_pass::forward, in, p, 1);
  // Room for 30 images: 24 run (a ladder of halves alone would have run 16).
  EXPECT_EQ(selector.choose(c, 30 * per_image).algorithm, "im2col_batch:24");
  EXPECT_EQ(selector.choose(c, 64 * per_image).algorithm, "im2col_batch:64");
  // Less than two images: one image at a time.
  EXPECT_EQ(selector.choose(c, per_image + per_image / 2).algorithm, "im2col_image");
}

}  // namespace
}  // namespace memweave
