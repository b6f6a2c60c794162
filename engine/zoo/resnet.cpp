// Bottleneck ResNets (He et al. 2016, v1.5 as torchvision: the stride sits on the 3x3).
// Stem: 7x7/2 CONV-BN-RELU, 3x3/2 max pool. Stages of n1..n4 blocks with widths 64, 128, 256,
// 512 (outputs 4x), strides 1, 2, 2, 2. Block: 1x1 CONV-BN-RELU, 3x3 CONV-BN-RELU,
// 1x1 CONV-BN, ADD with the shortcut (1x1 CONV-BN projection in each stage's first block,
// identity otherwise), RELU. Head: global average pool, FC, SOFTMAX. Convolutions have no
// bias (BN follows). Depth 3(n1+n2+n3+n4)+2; parameter counts at width 1 and 1000 classes:
// resnet50 25,557,032, resnet101 44,549,160, resnet152 60,192,808.
//
// Names follow Caffe's ResNet: res2a_branch2a (CONV), bn2a_branch2a, res2a_branch2a_relu,
// res2a_branch1 (projection), res2a (ADD), res2a_relu; block letters continue past z as
// b1, b2, ... (res4b22 as in Caffe's resnet101).
#include <array>

#include "memweave/core/error.hpp"
#include "zoo_common.hpp"

namespace memweave {

using namespace zoo_detail;

namespace {

std::string block_name(int stage, std::int64_t k) {
  if (k == 0) return "res" + std::to_string(stage) + "a";
  return "res" + std::to_string(stage) + "b" + std::to_string(k);
}

layer_handle conv_bn(network_builder& b, layer_handle x, std::int64_t out, std::int64_t k,
                     std::int64_t stride, const std::string& conv_name,
                     const std::string& bn_name) {
  x = b.conv(x, conv_p(out, k, k, stride, k / 2, k / 2, false), conv_name);
  return b.bn(x, bn_params{}, bn_name);
}

}  // namespace

network make_resnet(std::array<std::int64_t, 4> blocks, const zoo_options& opts, std::string name) {
  std::int64_t total = 0;
  for (std::int64_t n : blocks) {
    if (n < 1)
      throw invalid_argument("resnet: every stage needs at least 1 block; got (" +
                             std::to_string(blocks[0]) + "," + std::to_string(blocks[1]) + "," +
                             std::to_string(blocks[2]) + "," + std::to_string(blocks[3]) + ")");
    total += n;
  }
  if (name.empty()) name = "resnet" + std::to_string(3 * total + 2);
  const zoo_options o = resolve(name, opts, 224, 1);
  const double w = o.width_scale;

  network_builder b(name);
  layer_handle x = b.data({o.batch, o.image_channels, o.image_side, o.image_side}, o.classes);
  x = conv_bn(b, x, scaled(64, w), 7, 2, "conv1", "bn_conv1");
  x = b.relu(x, "conv1_relu");
  x = b.pool(x, pool_p(pool_mode::max, 3, 2, 1), "pool1");
  const std::int64_t widths[] = {64, 128, 256, 512};
  for (int s = 0; s < 4; ++s) {
    const std::int64_t mid = scaled(widths[s], w), out = scaled(4 * widths[s], w);
    for (std::int64_t k = 0; k < blocks[s]; ++k) {
      const std::string bn = block_name(s + 2, k);  // Caffe numbers the stages 2..5
      const std::string bb = "bn" + bn.substr(3);
      const std::int64_t stride = (k == 0 && s > 0) ? 2 : 1;
      layer_handle y = conv_bn(b, x, mid, 1, 1, bn + "_branch2a", bb + "_branch2a");
      y = b.relu(y, bn + "_branch2a_relu");
      y = conv_bn(b, y, mid, 3, stride, bn + "_branch2b", bb + "_branch2b");
      y = b.relu(y, bn + "_branch2b_relu");
      y = conv_bn(b, y, out, 1, 1, bn + "_branch2c", bb + "_branch2c");
      layer_handle shortcut = x;
      if (k == 0) shortcut = conv_bn(b, x, out, 1, stride, bn + "_branch1", bb + "_branch1");
      x = b.add({y, shortcut}, bn);
      x = b.relu(x, bn + "_relu");
    }
  }
  pool_params gap;
  gap.mode = pool_mode::average;
  gap.global = true;
  x = b.pool(x, gap, "pool5");
  x = b.fc(x, fc_params{o.classes, true}, "fc" + std::to_string(o.classes));
  b.softmax_loss(x, "loss");
  return std::move(b).build();
}

}  // namespace memweave
