// check_cuda_runs: what the cuda backend cannot run is refused before the first step, on
// any machine (the check needs no GPU).
#include "engine/layers/cuda_limits.hpp"

#include <gtest/gtest.h>

#include <string>

#include "memweave/core/error.hpp"
#include "memweave/engine/network_builder.hpp"
#include "memweave/engine/tiling_plan.hpp"
#include "memweave/engine/zoo.hpp"

namespace memweave {
namespace {

network lrn_net(const lrn_params& p) {
  network_builder b("lrn");
  auto x = b.data({2, 32, 4, 4}, 10);
  x = b.lrn(x, p, "norm1");
  x = b.fc(x, fc_params{10, true}, "fc");
  b.softmax_loss(x, "loss");
  return std::move(b).build();
}

std::string refusal(const network& net) {
  try {
    layers::check_cuda_runs(net);
  } catch (const invalid_argument& e) {
    return e.what();
  }
  return {};
}

TEST(cuda_limits_test, the_zoo_and_lrn_within_cudnns_bounds_pass) {
  zoo_options o;
  o.batch = 2;
  for (const std::string& name : zoo_names()) {
    if (name.find('<') != std::string::npos) continue;  // resnet:<n1>,...: a form, not a name
    EXPECT_EQ(refusal(make_network(name, o)), "") << name;
  }
  EXPECT_EQ(refusal(lrn_net({.size = 15, .alpha = 1e-4f, .beta = 0.02f, .k = 1e-4f})), "");
  EXPECT_EQ(refusal(lrn_net({.size = 1, .alpha = 0.0f, .beta = 2.0f, .k = 1.0f})), "");
}

// Each passes the host's checks (odd window, k > 0, beta >= 0) and trains there; cuDNN
// refuses it (session 42's note: the step failed on the GPU, exit 3).
TEST(cuda_limits_test, lrn_outside_cudnns_bounds_names_the_layer_value_and_bound) {
  const std::string wide = refusal(lrn_net({.size = 17}));
  EXPECT_NE(wide.find("layer 'norm1' (LRN): size = 17"), std::string::npos) << wide;
  EXPECT_NE(wide.find("a size from 1 to 16, k >= 1e-05 and beta >= 0.01"), std::string::npos)
      << wide;
  EXPECT_NE(wide.find("--device host"), std::string::npos) << wide;
  const std::string small_k = refusal(lrn_net({.k = 1e-6f}));
  EXPECT_NE(small_k.find("k = 1e-06"), std::string::npos) << small_k;
  const std::string flat = refusal(lrn_net({.beta = 0.0f}));
  EXPECT_NE(flat.find("beta = 0;"), std::string::npos) << flat;
  // cuDNN compares doubles: the float nearest 0.01 is below its bound, and the message shows
  // why (cudnnSetLRNDescriptor would refuse it with a bare CUDNN_STATUS_BAD_PARAM).
  const std::string edge = refusal(lrn_net({.beta = 0.01f}));
  EXPECT_NE(edge.find("beta = 0.01 (0.00999999978 as a float32);"), std::string::npos) << edge;
}

TEST(cuda_limits_test, a_tiled_segment_is_refused_naming_it) {
  network_builder b("big_image");
  auto x = b.data({1, 3, 512, 512}, 10);
  x = b.relu(b.conv(
      x, conv_params{.out_channels = 16, .kernel_h = 3, .kernel_w = 3, .pad_h = 1, .pad_w = 1},
      "conv1"));
  x = b.pool(x, pool_params{.mode = pool_mode::average, .global = true}, "gap");
  x = b.fc(x, fc_params{10, true}, "fc");
  b.softmax_loss(x, "loss");
  const network net = std::move(b).build();
  // A budget below the CONV's step (its 16 MiB output alone): the planner fuses a segment.
  const tiling_plan plan = plan_tiling(net, std::size_t{24} << 20, 1024, "--budget");
  ASSERT_FALSE(plan.segments.empty());
  const std::string m = refusal(plan.net);
  EXPECT_NE(m.find("' is a tiled segment (SFT), which runs on the host and null devices only"),
            std::string::npos)
      << m;
}

}  // namespace
}  // namespace memweave
