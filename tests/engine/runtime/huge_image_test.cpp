// Issue 14: the planner at image sides up to 32768 (SFT's huge images). The null device
// touches no memory, so a plan of terabytes runs in a fraction of a second; these tests pin
// that nothing on the way (shapes, the tensor table, liveness, the heap's block counts, the
// step records) wraps or rounds: every figure is checked to the byte against the shapes.
#include <cstdint>

#include "engine/layers/layer_step.hpp"
#include "engine_test_util.hpp"

namespace memweave {
namespace {

constexpr std::int64_t k_side = 32768;
constexpr std::size_t k_block = 1024;  // the heap's default block

std::size_t rounded(std::size_t bytes) {
  return (bytes + k_block - 1) / k_block * k_block;
}

executor_options huge_options(const std::string& policy) {
  // No convolution workspace: the peaks are then the tensors' alone.
  executor_options o = test::policy_options(policy, 0, "none");
  o.exact = false;
  return o;
}

// The bytes of one float tensor of `s`, computed here in 64-bit arithmetic.
std::size_t float_bytes(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) {
  return static_cast<std::size_t>(n) * static_cast<std::size_t>(c) * static_cast<std::size_t>(h) *
         static_cast<std::size_t>(w) * sizeof(float);
}

// Every tensor, each a whole number of blocks: what the baseline holds.
std::size_t all_tensors(const tensor_table& table) {
  std::size_t all = 0;
  for (const tensor_info& t : table.tensors()) all += rounded(t.bytes);
  return all;
}

// Liveness measured on the null device equals its plan at every step; returns its peak.
std::size_t expect_liveness_as_planned(const network& net, device& dev) {
  executor live(net, dev, huge_options("liveness"));
  live.run_iteration(nullptr, 0);
  EXPECT_EQ(live.steps().size(), live.plan().steps.size());
  for (std::size_t s = 0; s < live.steps().size() && s < live.plan().steps.size(); ++s) {
    EXPECT_EQ(live.steps()[s].bytes_live, live.plan().steps[s].bytes_live) << "step " << s;
  }
  EXPECT_EQ(live.report().peak_live_bytes, live.plan().peak_bytes);
  return live.report().peak_bytes;
}

TEST(huge_image, vgg16_at_32768_plans_on_the_null_device_to_the_byte) {
  const network net = make_network("vgg16", {1, k_side, 1.0, 1000, 3});
  auto dev = test::make_test_device("null", std::size_t{32} << 40);
  executor base(net, *dev, huge_options("baseline"));
  base.run_iteration(nullptr, 0);
  const tensor_table& table = base.table();
  EXPECT_EQ(table[table.find("data.y")].bytes, float_bytes(1, 3, k_side, k_side));  // 12 GiB
  EXPECT_EQ(table[table.find("conv1_1.y")].bytes, float_bytes(1, 64, k_side, k_side));
  EXPECT_EQ(table[table.find("conv5_3.y")].bytes, float_bytes(1, 512, k_side / 16, k_side / 16));
  EXPECT_EQ(table[table.find("avgpool.y")].bytes, float_bytes(1, 512, 7, 7));
  // The baseline holds every tensor, each a whole number of blocks: 6.7 TiB, more than
  // 2^32 blocks, so a 32-bit block count would have wrapped.
  const std::size_t all = all_tensors(table);
  EXPECT_GT(all / k_block, std::size_t{1} << 32);
  EXPECT_EQ(base.report().peak_bytes, all);
  // max(l_i): conv1_2's backward reads relu1_1.y and conv1_2.dy and writes relu1_1.dy (three
  // 64 x S x S tensors), with its weight and bias, their gradients and momenta.
  const std::size_t plane64 = float_bytes(1, 64, k_side, k_side);
  const std::size_t conv1_2_params = float_bytes(1, 64 * 64 * 9 + 64, 1, 1);
  EXPECT_EQ(base.report().max_layer_bytes, 3 * plane64 + 3 * conv1_2_params);
  EXPECT_LT(expect_liveness_as_planned(net, *dev), all);
}

TEST(huge_image, resnet50_at_32768_plans_on_the_null_device_to_the_byte) {
  const network net = make_network("resnet50", {1, k_side, 1.0, 1000, 3});
  auto dev = test::make_test_device("null", std::size_t{32} << 40);
  executor base(net, *dev, huge_options("baseline"));
  base.run_iteration(nullptr, 0);
  const tensor_table& table = base.table();
  // conv1 is 7x7/2 with padding 3: 64 x S/2 x S/2.
  EXPECT_EQ(table[table.find("conv1.y")].bytes, float_bytes(1, 64, k_side / 2, k_side / 2));
  EXPECT_EQ(base.report().peak_bytes, all_tensors(table));
  EXPECT_LT(expect_liveness_as_planned(net, *dev), base.report().peak_bytes);
}

TEST(huge_image, an_adaptive_pool_costs_the_elements_its_windows_read) {
  network_builder b("m");
  auto x = b.data({1, 2, 5, 3}, 2);
  auto p = b.pool(x, {.mode = pool_mode::average, .adaptive_h = 7, .adaptive_w = 2}, "avg");
  b.softmax_loss(b.fc(p, {2, true}));
  const network net = std::move(b).build();
  // Rows: 5 to 7 windows of 1, 2, 2, 1, 2, 2, 1 rows (11); columns: 3 to 2 of 2 and 2 (4).
  EXPECT_EQ(layers::forward_flops(net[*net.find("avg")], {{1, 2, 5, 3}}), 2.0 * 11 * 4);
  // VGG16's at 32768: pool5's 1024 x 1024 to 7 x 7 reads each element about once.
  const network vgg = make_network("vgg16", {1, k_side, 1.0, 1000, 3});
  const layer& avg = vgg[*vgg.find("avgpool")];
  const double read = layers::forward_flops(avg, {vgg[avg.inputs[0]].output_shape});
  EXPECT_GE(read, 512.0 * 1024 * 1024);
  EXPECT_LE(read, 512.0 * 1030 * 1030);
}

}  // namespace
}  // namespace memweave
