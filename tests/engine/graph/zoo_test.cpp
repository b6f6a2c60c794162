// The zoo: published parameter counts, the paper's AlexNet, full topology at small sizes,
// the registry, and the speed of the graph pipeline on a 10^4-layer ResNet.
#include "memweave/engine/zoo.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "graph_fixtures.hpp"
#include "memweave/engine/layer_memory.hpp"
#include "memweave/engine/liveness.hpp"

namespace memweave {
namespace {

using test::error_of;
using test::expect_contains;

const char* const all_names[] = {"alexnet",   "vgg16",        "resnet50",   "resnet101",
                                 "resnet152", "inception_v4", "densenet121"};

std::size_t fans(const network& n) {
  std::size_t k = 0;
  for (const layer& l : n.layers()) k += l.consumers.size() > 1;
  return k;
}
std::size_t joins(const network& n) {
  std::size_t k = 0;
  for (const layer& l : n.layers()) k += l.inputs.size() > 1;
  return k;
}
std::size_t count(const network& n, layer_type t) {
  return n.type_histogram()[static_cast<std::size_t>(t)];
}

// Trained parameters at width 1, native side, 1000 classes: exact, and within rounding of
// the published figures (ResNet-50 25.6M, ResNet-101 44.5M, ResNet-152 60.2M, VGG16 138.4M,
// AlexNet ~61M, Inception v4 ~42.7M, DenseNet-121 ~8.0M).
TEST(zoo_test, parameter_counts_match_the_published_architectures) {
  struct expect {
    const char* name;
    std::int64_t exact;
    double published_millions;
    double tolerance_millions;
  };
  const expect table[] = {
      // AlexNet: Caffe's bvlc_alexnet (conv2/4/5 grouped in two, as in the original
      // two-GPU network); without groups it would be 62,378,344.
      {"alexnet", 60'965'224, 61.0, 0.05},   {"vgg16", 138'357'544, 138.4, 0.05},
      {"resnet50", 25'557'032, 25.6, 0.05},  {"resnet101", 44'549'160, 44.5, 0.05},
      {"resnet152", 60'192'808, 60.2, 0.05}, {"inception_v4", 42'679'816, 42.7, 0.05},
      {"densenet121", 7'978'856, 8.0, 0.05},
  };
  for (const expect& e : table) {
    network net = make_network(e.name, zoo_options{});
    EXPECT_EQ(net.parameter_count(), e.exact) << e.name;
    EXPECT_NEAR(static_cast<double>(net.parameter_count()) / 1e6, e.published_millions,
                e.tolerance_millions)
        << e.name;
    EXPECT_EQ(net.classes(), 1000);
    EXPECT_EQ(net.batch(), 32);
  }
}

TEST(zoo_test, alexnet_is_the_papers_footnote) {
  network net = make_alexnet(zoo_options{});
  std::vector<std::string> names;
  for (const layer& l : net.layers()) names.push_back(l.name);
  const std::vector<std::string> footnote = {
      "data",  "conv1", "relu1",    "lrn1",  "pool1", "conv2",    "relu2", "lrn2",
      "pool2", "conv3", "relu3",    "conv4", "relu4", "conv5",    "relu5", "pool5",
      "fc1",   "relu6", "dropout1", "fc2",   "relu7", "dropout2", "fc3",   "softmax"};
  EXPECT_EQ(names, footnote);  // 23 layers after DATA, as the paper counts them
  EXPECT_EQ(net[0].output_shape, (shape4{32, 3, 227, 227}));
  EXPECT_EQ(net.at(*net.find("conv1")).output_shape, (shape4{32, 96, 55, 55}));
  EXPECT_EQ(net.at(*net.find("pool5")).output_shape, (shape4{32, 256, 6, 6}));
  EXPECT_EQ(fans(net), 0u);
  EXPECT_EQ(joins(net), 0u);
}

TEST(zoo_test, networks_use_bn_where_the_architectures_have_it) {
  for (const char* name : all_names) {
    network net = make_network(name, {2, 0, 1.0, 1000, 3});
    const bool has_bn = count(net, layer_type::bn) > 0;
    const bool expect_bn = std::string(name) != "alexnet" && std::string(name) != "vgg16";
    EXPECT_EQ(has_bn, expect_bn) << name;
  }
  EXPECT_EQ(count(make_alexnet({}), layer_type::lrn), 2u);
  EXPECT_EQ(count(make_vgg16({}), layer_type::conv), 13u);
  EXPECT_EQ(count(make_vgg16({}), layer_type::fc), 3u);
}

TEST(zoo_test, vgg16_takes_any_side_through_an_adaptive_pool_left_out_at_its_native_side) {
  for (std::int64_t side : {224, 255}) {  // pool5 is 7x7: the published network
    const network net = make_vgg16({1, side, 1.0, 1000, 3});
    EXPECT_FALSE(net.find("avgpool").has_value()) << side;
    EXPECT_EQ(net.size(), 40u);
  }
  for (std::int64_t side : {32, 100, 256, 20480, 32768}) {
    const network net = make_vgg16({1, side, 1.0, 1000, 3});
    const auto avg = net.find("avgpool");
    ASSERT_TRUE(avg.has_value()) << side;
    const layer& a = net[*avg];
    EXPECT_EQ(a.output_shape, (shape4{1, 512, 7, 7})) << side;
    EXPECT_EQ(net[a.inputs[0]].name, "pool5");
    EXPECT_EQ(net[a.consumers[0]].name, "fc6");
    EXPECT_EQ(net.parameter_count(), 138'357'544) << side;
  }
  EXPECT_NE(make_vgg16({1, 512, 1.0, 1000, 3})
                .summary()
                .find("avgpool POOL <- pool5 -> 1x512x7x7 adaptive\n"),
            std::string::npos);
}

TEST(zoo_test, networks_ending_in_a_global_or_adaptive_pool_keep_their_parameters_at_any_side) {
  for (const char* name : {"vgg16", "resnet50", "inception_v4", "densenet121"}) {
    const std::int64_t native = make_network(name, {1, 0, 1.0, 1000, 3}).parameter_count();
    EXPECT_EQ(make_network(name, {1, 32768, 1.0, 1000, 3}).parameter_count(), native) << name;
  }
  // AlexNet (Caffe's) flattens pool5 into fc1: its weights grow with the side.
  EXPECT_GT(make_network("alexnet", {1, 2048, 1.0, 1000, 3}).parameter_count(),
            10 * make_network("alexnet", {1, 0, 1.0, 1000, 3}).parameter_count());
}

TEST(zoo_test, resnet_depth_is_three_per_block_plus_two) {
  for (std::array<std::int64_t, 4> n :
       {std::array<std::int64_t, 4>{3, 4, 6, 3}, {3, 4, 23, 3}, {3, 8, 36, 3}, {1, 2, 3, 4}}) {
    network net = make_resnet(n, {2, 32, 0.125, 10, 3});
    std::int64_t weighted = 0;  // CONV and FC layers on the main path (no projections)
    for (const layer& l : net.layers())
      if ((l.type == layer_type::conv && l.name.find("_branch1") == std::string::npos) ||
          l.type == layer_type::fc)
        ++weighted;
    const std::int64_t depth = 3 * (n[0] + n[1] + n[2] + n[3]) + 2;
    EXPECT_EQ(weighted, depth);
    EXPECT_EQ(net.name(), "resnet" + std::to_string(depth));
    EXPECT_EQ(count(net, layer_type::add), static_cast<std::size_t>(n[0] + n[1] + n[2] + n[3]));
  }
  EXPECT_EQ(make_network("resnet:3,4,6,3", {}).parameter_count(), 25'557'032);
}

TEST(zoo_test, small_versions_keep_the_full_topology) {
  for (const char* name : all_names) {
    network full = make_network(name, zoo_options{});
    zoo_options small{2, std::max<std::int64_t>(32, zoo_min_side(name)), 0.125, 10, 3};
    network tiny = make_network(name, small);
    // Off its native side VGG16 has one layer more: the adaptive pool to 7x7 before fc6.
    const bool vgg = std::string(name) == "vgg16";
    auto histogram = full.type_histogram();
    if (vgg) ++histogram[static_cast<std::size_t>(layer_type::pool)];
    EXPECT_EQ(tiny.size(), full.size() + (vgg ? 1 : 0)) << name;
    EXPECT_EQ(tiny.type_histogram(), histogram) << name;
    EXPECT_EQ(fans(tiny), fans(full)) << name;
    EXPECT_EQ(joins(tiny), joins(full)) << name;
    EXPECT_LT(tiny.parameter_count() * 20, full.parameter_count()) << name;
    EXPECT_EQ(tiny.classes(), 10);
    EXPECT_EQ(tiny[0].output_shape.h, small.image_side);
  }
  // The nonlinear networks have fans and joins; DenseNet's joins are full.
  for (const char* name : {"resnet50", "inception_v4", "densenet121"}) {
    network net = make_network(name, {2, 0, 0.125, 10, 3});
    EXPECT_GT(fans(net), 0u) << name;
    EXPECT_GT(joins(net), 0u) << name;
  }
  network dense = make_densenet121({2, 32, 0.125, 10, 3});
  const layer& last_join = dense.at(*dense.find("denseblock3/concat"));
  EXPECT_EQ(last_join.inputs.size(), 25u);  // block input + 24 layers
  EXPECT_EQ(dense.at(*dense.find("denseblock3/layer1/1x1/bn")).consumers.size(), 1u);
}

TEST(zoo_test, smallest_sides_build_and_one_less_is_rejected) {
  for (const char* name : all_names) {
    const std::int64_t m = zoo_min_side(name);
    zoo_options o{1, m, 0.125, 10, 3};
    EXPECT_NO_THROW(make_network(name, o)) << name;
    if (m > 1) {
      o.image_side = m - 1;
      expect_contains(error_of([&] { make_network(name, o); }),
                      {name, "image_side = " + std::to_string(m - 1), "at least"});
    }
  }
  EXPECT_EQ(zoo_native_side("alexnet"), 227);
  EXPECT_EQ(zoo_native_side("inception_v4"), 299);
  EXPECT_EQ(zoo_native_side("resnet:1,1,1,1"), 224);
}

TEST(zoo_test, registry_rejects_unknown_names_and_bad_options) {
  const std::string m = error_of([] { make_network("lenet", {}); });
  expect_contains(m, {"unknown zoo network 'lenet'", "alexnet", "vgg16", "resnet50", "resnet101",
                      "resnet152", "resnet:<n1>,<n2>,<n3>,<n4>", "inception_v4", "densenet121"});
  for (const char* bad : {"resnet:3,4,6", "resnet:3,4,6,3,1", "resnet:a,b,c,d", "resnet:0,1,1,1",
                          "resnet:", "resnet:3,4,,3"})
    expect_contains(error_of([&] { make_network(bad, {}); }), {bad, "resnet:<n1>,<n2>,<n3>,<n4>"});
  // A stage or the whole past 40000 blocks (a million took tens of GB before a word).
  expect_contains(error_of([&] { make_network("resnet:1000000,1,1,1", {}); }),
                  {"four block counts from 1 to 40000"});
  expect_contains(error_of([&] { make_network("resnet:20000,20000,1,1", {}); }),
                  {"40002 blocks in all, more than the 40000"});
  expect_contains(error_of([] {
                    make_network("vgg16", {0, 0, 1.0, 10, 3});
                  }),
                  {"'vgg16'", "batch = 0"});
  expect_contains(error_of([] {
                    make_network("vgg16", {1, 0, 0.0, 10, 3});
                  }),
                  {"'vgg16'", "width_scale"});
  expect_contains(error_of([] {
                    make_network("vgg16", {1, 0, 1.0, 0, 3});
                  }),
                  {"'vgg16'", "classes = 0"});
  EXPECT_EQ(zoo_names().size(), 8u);
}

// Issue 11, item 4: --width 1e99 built the same network as --width 1e-9 (llround overflowed
// and the channel count was clamped to 1).
TEST(zoo_test, width_beyond_the_zoo_range_is_rejected_instead_of_wrapping) {
  for (double w : {1e99, 1e5, std::numeric_limits<double>::infinity()}) {
    zoo_options o;
    o.batch = 4;
    o.width_scale = w;
    expect_contains(error_of([&] { make_network("resnet50", o); }),
                    {"'resnet50'", "width_scale", "expected a value in (0, 10000"});
  }
  zoo_options o;
  o.batch = 1;
  o.image_side = 32;
  o.width_scale = 10000;  // allowed, but a stage-5 3x3 weight holds 5120000^2 x 9 floats
  const std::string m = error_of([&] { make_network("resnet50", o); });
  expect_contains(m, {"address space"});
}

// Not a timed assertion: builds, routes and plans a ResNet of ~10^4 layers (the paper's
// ResNet2500 scale) and reports how long that took.
TEST(zoo_test, ten_thousand_layer_resnet_goes_through_the_pipeline) {
  const auto t0 = std::chrono::steady_clock::now();
  network net = make_network("resnet:3,4,1000,3", zoo_options{});
  route r(net);
  tensor_table t(net, r);
  liveness lv(t);
  memory_plan plan = lv.plan(memory_policy::liveness);
  layer_memory lm(t);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(net.size(), 10'000u);
  EXPECT_TRUE(route::is_topological(net, r.order()));
  EXPECT_EQ(plan.steps.size(), 2 * net.size());
  EXPECT_GE(plan.peak_bytes, lm.max_layer_bytes());
  std::cout << "[ info     ] " << net.name() << ": " << net.size() << " layers, " << t.size()
            << " tensors; build+route+table+liveness+plan+layer memory " << ms << " ms\n";
  RecordProperty("pipeline_ms", std::to_string(ms));
}

}  // namespace
}  // namespace memweave
