// network_builder, build_network and network: shape inference, parameters, validation.
#include "memweave/engine/network_builder.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "graph_fixtures.hpp"

namespace memweave {
namespace {

using test::conv3x3;
using test::error_of;
using test::expect_contains;

TEST(network_builder_test, infers_output_and_parameter_shapes) {
  network_builder b("small");
  auto x = b.data({8, 3, 32, 32}, 10);
  conv_params cp = conv3x3(16);
  cp.stride_h = cp.stride_w = 2;
  auto c = b.conv(x, cp, "conv1");
  auto r = b.relu(c);
  auto p = b.pool(r, pool_params{});
  auto f = b.fc(p, fc_params{10, true}, "fc");
  b.softmax_loss(f);
  network net = std::move(b).build();

  ASSERT_EQ(net.size(), 6u);
  EXPECT_EQ(net[1].output_shape, (shape4{8, 16, 16, 16}));
  EXPECT_EQ(net[3].output_shape, (shape4{8, 16, 8, 8}));
  EXPECT_EQ(net[4].output_shape, (shape4{8, 10, 1, 1}));
  ASSERT_EQ(net[1].param_tensors.size(), 2u);
  EXPECT_EQ(net[1].param_tensors[0].name, "weight");
  EXPECT_EQ(net[1].param_tensors[0].shape, (shape4{16, 3, 3, 3}));
  EXPECT_EQ(net[1].param_tensors[1].shape, (shape4{1, 16, 1, 1}));
  EXPECT_EQ(net[4].param_tensors[0].shape, (shape4{10, 16 * 8 * 8, 1, 1}));
  EXPECT_EQ(net[1].parameter_count(), 16 * 27 + 16);
  EXPECT_EQ(net[4].parameter_count(), 10 * 1024 + 10);
  EXPECT_EQ(net.parameter_count(), 16 * 27 + 16 + 10 * 1024 + 10);
  EXPECT_EQ(net.batch(), 8);
  EXPECT_EQ(net.classes(), 10);
  EXPECT_EQ(net.data_layer(), 0u);
  EXPECT_EQ(net.loss_layer(), 5u);
  EXPECT_EQ(net[0].consumers, std::vector<layer_id>{1});
  EXPECT_EQ(net[5].inputs, std::vector<layer_id>{4});
}

TEST(network_builder_test, grouped_conv_weight_has_in_over_groups_channels) {
  network_builder b("g");
  auto x = b.data({1, 4, 8, 8}, 2);
  conv_params p = conv3x3(6, false);
  p.groups = 2;
  auto c = b.conv(x, p);
  b.softmax_loss(b.fc(c, fc_params{2, true}));
  network net = std::move(b).build();
  EXPECT_EQ(net[1].param_tensors.size(), 1u);
  EXPECT_EQ(net[1].param_tensors[0].shape, (shape4{6, 2, 3, 3}));
}

TEST(network_builder_test, bn_trains_gamma_beta_and_keeps_running_stats_as_state) {
  network_builder b("bn");
  auto x = b.data({4, 3, 8, 8}, 5);
  auto y = b.bn(b.conv(x, conv3x3(6, false)));
  auto d = b.dropout(y);
  b.softmax_loss(b.fc(d, fc_params{5, true}));
  network net = std::move(b).build();
  const layer& bn = net[2];
  ASSERT_EQ(bn.param_tensors.size(), 4u);
  EXPECT_TRUE(bn.param_tensors[0].trained);   // gamma
  EXPECT_TRUE(bn.param_tensors[1].trained);   // beta
  EXPECT_FALSE(bn.param_tensors[2].trained);  // running_mean
  EXPECT_FALSE(bn.param_tensors[3].trained);  // running_var
  EXPECT_EQ(bn.parameter_count(), 12);
  EXPECT_EQ(bn.state_count(), 12);
  ASSERT_EQ(bn.aux_tensors.size(), 2u);
  EXPECT_EQ(bn.aux_tensors[0].shape, (shape4{1, 6, 1, 1}));
  const layer& drop = net[3];
  ASSERT_EQ(drop.aux_tensors.size(), 1u);
  EXPECT_EQ(drop.aux_tensors[0].name, "mask");
  EXPECT_EQ(drop.aux_tensors[0].shape, drop.output_shape);
  EXPECT_EQ(net.state_count(), 12);
}

TEST(network_builder_test, cost_classes_and_backward_reads_follow_the_layer_type) {
  EXPECT_EQ(cost_class_of(layer_type::data), cost_class::checkpoint);
  EXPECT_EQ(cost_class_of(layer_type::conv), cost_class::checkpoint);
  EXPECT_EQ(cost_class_of(layer_type::fc), cost_class::checkpoint);
  for (layer_type t :
       {layer_type::pool, layer_type::act, layer_type::bn, layer_type::lrn, layer_type::dropout,
        layer_type::concat, layer_type::add, layer_type::softmax_loss})
    EXPECT_EQ(cost_class_of(t), cost_class::cheap) << to_string(t);

  auto reads = [](layer_type t, layer_params p) { return backward_reads_of(t, p); };
  backward_reads conv = reads(layer_type::conv, conv_params{});
  EXPECT_TRUE(conv.input_data && conv.weights && conv.output_grad);
  EXPECT_FALSE(conv.output_data || conv.aux || conv.labels);
  EXPECT_EQ(reads(layer_type::fc, fc_params{}), conv);
  backward_reads maxpool = reads(layer_type::pool, pool_params{});
  EXPECT_TRUE(maxpool.input_data && maxpool.output_data);
  pool_params avg;
  avg.mode = pool_mode::average;
  backward_reads avgpool = reads(layer_type::pool, avg);
  EXPECT_FALSE(avgpool.input_data || avgpool.output_data);
  EXPECT_TRUE(avgpool.output_grad);
  backward_reads act = reads(layer_type::act, act_params{});
  EXPECT_TRUE(act.output_data);
  EXPECT_FALSE(act.input_data);
  backward_reads bn = reads(layer_type::bn, bn_params{});
  EXPECT_TRUE(bn.input_data && bn.aux && bn.weights);
  EXPECT_FALSE(bn.output_data);
  backward_reads lrn = reads(layer_type::lrn, lrn_params{});
  EXPECT_TRUE(lrn.input_data && lrn.output_data);
  backward_reads drop = reads(layer_type::dropout, dropout_params{});
  EXPECT_TRUE(drop.aux);
  EXPECT_FALSE(drop.input_data || drop.output_data);
  backward_reads sm = reads(layer_type::softmax_loss, softmax_loss_params{});
  EXPECT_TRUE(sm.output_data && sm.labels);
  EXPECT_FALSE(sm.output_grad || sm.input_data);
  for (layer_type t : {layer_type::concat, layer_type::add}) {
    backward_reads r =
        reads(t, t == layer_type::add ? layer_params{add_params{}} : layer_params{concat_params{}});
    EXPECT_FALSE(r.input_data || r.output_data || r.aux || r.labels || r.weights);
  }
}

TEST(network_builder_test, automatic_names_are_unique) {
  network_builder b("names");
  auto x = b.data({1, 2, 4, 4}, 2);
  auto c1 = b.conv(x, conv3x3(2));
  auto c2 = b.conv(c1, conv3x3(2), "conv3");  // takes the name conv3 explicitly
  auto c3 = b.conv(c2, conv3x3(2));
  auto c4 = b.conv(c3, conv3x3(2));
  EXPECT_EQ(b.name_of(c1), "conv1");
  EXPECT_EQ(b.name_of(c3), "conv2");
  EXPECT_EQ(b.name_of(c4), "conv4");  // skips the taken conv3
  EXPECT_EQ(b.name_of(b.relu(c4)), "relu1");
}

// Each rejection: the builder call throws invalid_argument with a message naming the layer
// and the values involved.
TEST(network_builder_test, add_of_different_shapes_is_rejected_naming_layers_and_shapes) {
  network_builder b("m");
  auto x = b.data({2, 3, 8, 8}, 2);
  auto a = b.conv(x, conv3x3(4), "left");
  auto c = b.conv(x, conv3x3(5), "right");
  expect_contains(error_of([&] {
                    b.add({a, c}, "join");
                  }),
                  {"'join'", "ADD", "'left' (2x4x8x8)", "'right' (2x5x8x8)"});
}

TEST(network_builder_test, concat_of_different_sides_is_rejected_naming_layers_and_shapes) {
  network_builder b("m");
  auto x = b.data({2, 3, 8, 8}, 2);
  auto a = b.conv(x, conv3x3(4), "big");
  auto p = b.pool(a, pool_params{}, "small");
  expect_contains(error_of([&] {
                    b.concat({a, p}, "cat");
                  }),
                  {"'cat'", "CONCAT", "'big' (2x4x8x8)", "'small' (2x4x4x4)"});
}

TEST(network_builder_test, adaptive_pooling_gives_its_output_at_any_input_and_is_average_only) {
  network_builder b("m");
  auto x = b.data({2, 3, 37, 5}, 2);
  const pool_params avg{.mode = pool_mode::average, .adaptive_h = 7, .adaptive_w = 7};
  EXPECT_EQ(b.shape(b.pool(x, avg, "avg")), (shape4{2, 3, 7, 7}));
  pool_params max = avg;
  max.mode = pool_mode::max;
  expect_contains(error_of([&] { b.pool(x, max, "amax"); }),
                  {"'amax'", "POOL", "adaptive pooling to 7x7", "average pooling only"});
  pool_params global = avg;
  global.global = true;
  expect_contains(error_of([&] { b.pool(x, global, "aglobal"); }), {"'aglobal'", "not global"});
  pool_params half = avg;
  half.adaptive_w = 0;
  expect_contains(error_of([&] { b.pool(x, half, "ahalf"); }),
                  {"'ahalf'", "adaptive_w = 0", "expected from 1"});
}

TEST(network_builder_test, conv_kernel_larger_than_padded_input_is_rejected) {
  network_builder b("m");
  auto x = b.data({2, 3, 4, 4}, 2);
  conv_params p;
  p.out_channels = 8;
  p.kernel_h = p.kernel_w = 11;
  p.pad_h = p.pad_w = 2;
  expect_contains(error_of([&] { b.conv(x, p, "conv1"); }),
                  {"'conv1'", "11x11", "larger than the padded input 8x8", "'data' (2x3x4x4)"});
}

TEST(network_builder_test, zero_batch_is_rejected) {
  network_builder b("m");
  expect_contains(error_of([&] {
                    b.data({0, 3, 8, 8}, 10);
                  }),
                  {"DATA", "batch size n = 0", "0x3x8x8", "n >= 1"});
}

// Issue 11, item 2: a batch of 2^62 overflowed every tensor size silently.
TEST(network_builder_test, tensor_larger_than_the_address_space_is_rejected_naming_the_layer) {
  network_builder b("m");
  expect_contains(error_of([&] {
                    b.data({std::int64_t{1} << 62, 3, 224, 224}, 10, "images");
                  }),
                  {"layer 'images' (DATA)", "output", "4611686018427387904x3x224x224",
                   "address space", "lower the batch"});
  network_builder c("m");
  layer_handle x = c.data({2, 3, 65536, 65536}, 10);  // 96 GiB: addressable
  conv_params p;
  p.out_channels = 8192;
  p.kernel_h = p.kernel_w = 1;
  expect_contains(error_of([&] { c.conv(x, p, "wide"); }),
                  {"layer 'wide' (CONV)", "2x8192x65536x65536", "address space"});
  // A weight too large: the batch does not size it, and its remedy does not say so.
  conv_params heavy;
  heavy.out_channels = std::int64_t{1} << 22;
  heavy.kernel_h = heavy.kernel_w = 3;
  network_builder d("m");
  layer_handle y = d.data({2, std::int64_t{1} << 22, 4, 4}, 10);  // 512 MiB
  const std::string weight = error_of([&] { d.conv(y, heavy, "heavy"); });
  expect_contains(weight, {"layer 'heavy' (CONV)", "address space", "the batch does not size"});
  EXPECT_EQ(weight.find("lower the batch"), std::string::npos) << weight;
  conv_params huge = p;
  huge.pad_h = std::int64_t{1} << 62;  // would overflow the output side's arithmetic
  expect_contains(error_of([&] { c.conv(x, huge, "padded"); }),
                  {"layer 'padded' (CONV)", "pad_h", "expected from 0 to"});
}

TEST(network_builder_test, missing_loss_is_rejected) {
  network_builder b("noloss");
  auto x = b.data({2, 3, 8, 8}, 4);
  b.fc(x, fc_params{4, true});
  expect_contains(error_of([&] { std::move(b).build(); }),
                  {"'noloss'", "no loss layer", "softmax_loss"});
}

TEST(network_builder_test, empty_network_is_rejected) {
  network_builder b("empty");
  expect_contains(error_of([&] { std::move(b).build(); }), {"'empty'", "no layers"});
}

TEST(network_builder_test, dangling_layer_is_rejected) {
  network_builder b("dangling");
  auto x = b.data({2, 3, 8, 8}, 4);
  b.conv(x, conv3x3(4), "stray");
  b.softmax_loss(b.fc(x, fc_params{4, true}));
  expect_contains(error_of([&] { std::move(b).build(); }),
                  {"1 layer(s) feed no other layer", "'stray' (CONV, 2x4x8x8)"});
}

TEST(network_builder_test, misplaced_or_repeated_data_and_loss_are_rejected) {
  {
    network_builder b("m");
    network_builder other("o");
    auto ox = other.data({1, 1, 2, 2}, 2);
    expect_contains(error_of([&] { b.relu(ox, "r"); }), {"did not make"});
    expect_contains(error_of([&] { b.relu(layer_handle{}, "r"); }), {"did not make"});
  }
  {
    network_builder b("m");
    auto x = b.data({2, 3, 8, 8}, 4);
    expect_contains(error_of([&] { b.data({2, 3, 8, 8}, 4, "data2"); }), {"second DATA"});
    auto f = b.fc(x, fc_params{4, true}, "fc");
    auto loss = b.softmax_loss(f, "loss");
    expect_contains(error_of([&] { b.softmax_loss(f, "loss2"); }),
                    {"'loss2'", "second SOFTMAX", "'loss'"});
    expect_contains(error_of([&] { b.relu(loss, "after"); }), {"'after'", "reads the loss"});
  }
}

TEST(network_builder_test, bad_inputs_and_parameters_are_rejected) {
  network_builder b("m");
  auto x = b.data({2, 4, 8, 8}, 4);
  auto c = b.conv(x, conv3x3(4), "c");
  expect_contains(error_of([&] { b.add({c, c}, "twice"); }), {"'twice'", "'c' twice"});
  expect_contains(error_of([&] { b.concat({c}, "one"); }), {"'one'", "1 input(s)", "at least 2"});
  expect_contains(error_of([&] { b.conv(c, conv3x3(4), "c"); }), {"'c' is already used"});
  conv_params g = conv3x3(5);
  g.groups = 2;
  expect_contains(error_of([&] { b.conv(c, g, "grp"); }), {"'grp'", "groups = 2", "(5)"});
  pool_params pp;
  pp.pad_h = pp.pad_w = 2;
  expect_contains(error_of([&] { b.pool(c, pp, "p"); }), {"'p'", "padding 2x2", "kernel 2x2"});
  expect_contains(error_of([&] { b.dropout(c, dropout_params{1.0f}, "d"); }),
                  {"'d'", "ratio", "[0, 1)"});
  lrn_params lp;
  lp.size = 4;
  expect_contains(error_of([&] { b.lrn(c, lp, "n"); }), {"'n'", "size = 4", "odd"});
  lp.size = (std::int64_t{1} << 62) + 1;  // overflowed the kernel's window arithmetic
  expect_contains(error_of([&] { b.lrn(c, lp, "n"); }),
                  {"'n'", "size = 4611686018427387905", "from 1 to 2147483647"});
  expect_contains(error_of([&] { b.softmax_loss(c, "sm"); }),
                  {"'sm'", "'c' (2x4x8x8)", "256 values per image", "4 classes"});
  expect_contains(error_of([&] {
                    b.add_layer(layer_type::conv, fc_params{}, std::vector<layer_handle>{c}, "w");
                  }),
                  {"'w'", "parameters of a FC layer"});
  conv_params zero = conv3x3(0);
  expect_contains(error_of([&] { b.conv(c, zero, "z"); }), {"'z'", "out_channels = 0"});
  // Nothing was added by the failed calls.
  EXPECT_EQ(b.size(), 2u);
}

TEST(network_builder_test, layers_before_data_are_rejected) {
  std::vector<layer_spec> specs = {
      {"x", layer_type::act, act_params{}, {}},
  };
  expect_contains(error_of([&] { build_network("n", specs); }), {"'x'", "before any DATA layer"});
}

TEST(network_builder_test, specs_in_any_order_build_the_same_network) {
  std::vector<layer_spec> specs = {
      {"loss", layer_type::softmax_loss, softmax_loss_params{}, {"fc"}},
      {"fc", layer_type::fc, fc_params{3, true}, {"sum"}},
      {"sum", layer_type::add, add_params{}, {"c1", "c2"}},
      {"c2", layer_type::conv, conv3x3(2), {"data"}},
      {"c1", layer_type::conv, conv3x3(2), {"data"}},
      {"data", layer_type::data, data_params{{2, 1, 4, 4}, 3}, {}},
  };
  network net = build_network("specs", specs);
  ASSERT_EQ(net.size(), 6u);
  EXPECT_EQ(net[0].name, "data");
  EXPECT_EQ(net.loss_layer(), *net.find("loss"));
  const layer& sum = net.at(*net.find("sum"));
  ASSERT_EQ(sum.inputs.size(), 2u);
  EXPECT_EQ(net[sum.inputs[0]].name, "c1");  // input order is the spec's
  EXPECT_EQ(net[sum.inputs[1]].name, "c2");
  EXPECT_EQ(net.parameter_count(), 2 * (2 * 9 + 2) + 3 * 32 + 3);
  for (const layer& l : net.layers())
    for (layer_id x : l.inputs) EXPECT_LT(x, l.id);
}

TEST(network_builder_test, spec_cycle_is_rejected_naming_its_layers) {
  std::vector<layer_spec> specs = {
      {"data", layer_type::data, data_params{{2, 1, 4, 4}, 2}, {}},
      {"a", layer_type::add, add_params{}, {"data", "c"}},
      {"b", layer_type::act, act_params{}, {"a"}},
      {"c", layer_type::act, act_params{}, {"b"}},
      {"fc", layer_type::fc, fc_params{2, true}, {"c"}},
      {"loss", layer_type::softmax_loss, softmax_loss_params{}, {"fc"}},
  };
  expect_contains(error_of([&] { build_network("cyc", specs); }),
                  {"cycle", "'a' -> 'c' -> 'b' -> 'a'"});
  specs[1].inputs = {"data", "nowhere"};
  expect_contains(error_of([&] { build_network("cyc", specs); }),
                  {"'a'", "'nowhere'", "names no layer"});
  specs[1].inputs = {"data", "c"};
  specs[2].name = "a";
  expect_contains(error_of([&] { build_network("cyc", specs); }), {"two layer specs", "'a'"});
}

TEST(network_builder_test, network_lookups_and_summary) {
  network net = test::make_fig6();
  EXPECT_EQ(net.find("g").value(), 6u);
  EXPECT_FALSE(net.find("zz").has_value());
  expect_contains(error_of([&] { (void)net.at(99); }), {"layer id 99", "10 layers"});
  const std::string s = net.summary();
  expect_contains(s, {"network 'fig6'", "i CONCAT <- e,g,h -> 2x12x1x1"});
  auto h = net.type_histogram();
  EXPECT_EQ(h[static_cast<std::size_t>(layer_type::conv)], 4u);
  EXPECT_EQ(h[static_cast<std::size_t>(layer_type::fc)], 2u);
}

}  // namespace
}  // namespace memweave
