// A GPU's cost-model figures from its attributes: the attributes of GPUs whose datasheets
// are public (as deviceQuery reports them) give those datasheets' fp32 peaks and memory
// bandwidths, and cost_model's presets (cost_model.cpp) are such figures.
#include "memweave/device/device_throughput.hpp"

#include <gtest/gtest.h>

namespace memweave {
namespace {

struct datasheet {
  const char* gpu;
  gpu_attributes attributes;
  double tflops;    // fp32, without tensor cores
  double tb_per_s;  // device memory
};

TEST(device_throughput_test, attributes_give_the_datasheets_peaks) {
  const datasheet gpus[] = {
      {"Tesla K40 (745 MHz base)", {3, 5, 15, 745000, 3004000, 384}, 4.29, 0.288},
      {"TITAN Xp", {6, 1, 30, 1582000, 5705000, 384}, 12.15, 0.548},
      {"Tesla V100 SXM2", {7, 0, 80, 1530000, 877000, 4096}, 15.67, 0.898},
      {"A100 SXM4 40GB", {8, 0, 108, 1410000, 1215000, 5120}, 19.49, 1.555},
      {"RTX 4090", {8, 9, 128, 2520000, 10501000, 384}, 82.58, 1.008},
      {"H100 PCIe", {9, 0, 114, 1755000, 1593000, 5120}, 51.22, 2.039},
      {"H100 SXM5", {9, 0, 132, 1980000, 2619000, 5120}, 66.91, 3.352},
  };
  for (const datasheet& d : gpus) {
    const auto t = throughput_of(d.attributes, 25e9);
    ASSERT_TRUE(t.has_value()) << d.gpu;
    EXPECT_NEAR(t->fp32_flops / 1e12, d.tflops, d.tflops * 0.005) << d.gpu;
    EXPECT_NEAR(t->memory_bytes_per_s / 1e12, d.tb_per_s, d.tb_per_s * 0.005) << d.gpu;
    EXPECT_EQ(t->link_bytes_per_s, 25e9) << d.gpu;
  }
}

TEST(device_throughput_test, lanes_follow_the_programming_guides_table) {
  EXPECT_EQ(fp32_lanes_per_multiprocessor(3, 7), 192);
  EXPECT_EQ(fp32_lanes_per_multiprocessor(5, 2), 128);
  EXPECT_EQ(fp32_lanes_per_multiprocessor(6, 0), 64);
  EXPECT_EQ(fp32_lanes_per_multiprocessor(6, 1), 128);
  EXPECT_EQ(fp32_lanes_per_multiprocessor(7, 5), 64);
  EXPECT_EQ(fp32_lanes_per_multiprocessor(8, 0), 64);
  EXPECT_EQ(fp32_lanes_per_multiprocessor(8, 6), 128);
  EXPECT_EQ(fp32_lanes_per_multiprocessor(9, 0), 128);
  EXPECT_EQ(fp32_lanes_per_multiprocessor(10, 0), 128);
  EXPECT_EQ(fp32_lanes_per_multiprocessor(12, 0), 128);
  EXPECT_EQ(fp32_lanes_per_multiprocessor(2, 0), 0);  // Fermi: no CUDA of ours runs there
}

TEST(device_throughput_test, a_missing_attribute_gives_no_figures_rather_than_a_zero_rate) {
  const gpu_attributes h100{9, 0, 132, 1980000, 2619000, 5120};
  EXPECT_TRUE(throughput_of(h100, 0).has_value());  // a link not timed is the caller's to fill
  for (int field = 0; field < 4; ++field) {
    gpu_attributes a = h100;
    if (field == 0) a.multiprocessors = 0;
    if (field == 1) a.clock_khz = 0;
    if (field == 2) a.memory_clock_khz = 0;
    if (field == 3) a.memory_bus_bits = 0;
    EXPECT_FALSE(throughput_of(a, 25e9).has_value()) << field;
  }
  EXPECT_FALSE(throughput_of({2, 0, 16, 1150000, 1500000, 384}, 8e9).has_value());
  EXPECT_FALSE(throughput_of(h100, -1).has_value());
}

}  // namespace
}  // namespace memweave
