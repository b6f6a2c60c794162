// DenseNet-121 (Huang et al. 2017, DenseNet-BC as torchvision builds it): 7x7/2 CONV-BN-RELU,
// 3x3/2 max pool; dense blocks of 6, 12, 24, 16 layers with growth k = 32, each layer
// BN-RELU-CONV1x1(4k)-BN-RELU-CONV3x3(k) over a CONCAT of the block input and every earlier
// layer's output (the full join of the paper's Fig. 1: each output fans out to all later
// layers of its block); transitions BN-RELU-CONV1x1(c/2)-AVGPOOL 2x2/2; final BN-RELU, global
// average pool, FC. Convolutions have no bias. At width 1 and 1000 classes: 7,978,856
// trained parameters. Native side 224, smallest 29 (three transitions need 2x2 inputs).
#include <vector>

#include "zoo_common.hpp"

namespace memweave {

using namespace zoo_detail;

namespace {

layer_handle bn_relu_conv(network_builder& b, layer_handle x, std::int64_t out, std::int64_t k,
                          const std::string& n) {
  x = b.bn(x, bn_params{}, n + "/bn");
  x = b.relu(x, n + "/relu");
  return b.conv(x, conv_p(out, k, k, 1, k / 2, k / 2, false), n + "/conv");
}

}  // namespace

network make_densenet121(const zoo_options& opts) {
  const zoo_options o = resolve("densenet121", opts, 224, 29);
  const double w = o.width_scale;
  const std::int64_t growth = scaled(32, w), bottleneck = 4 * growth;
  const int layers_per_block[] = {6, 12, 24, 16};

  network_builder b("densenet121");
  layer_handle x = b.data({o.batch, o.image_channels, o.image_side, o.image_side}, o.classes);
  x = conv_bn_relu(b, x, scaled(64, w), 7, 7, 2, 3, 3, "conv0");
  x = b.pool(x, pool_p(pool_mode::max, 3, 2, 1), "pool0");
  for (int blk = 0; blk < 4; ++blk) {
    const std::string bn = "denseblock" + std::to_string(blk + 1);
    std::vector<layer_handle> features{x};
    for (int l = 1; l <= layers_per_block[blk]; ++l) {
      const std::string ln = bn + "/layer" + std::to_string(l);
      layer_handle in = features.size() == 1 ? features[0] : b.concat(features, ln + "/concat");
      layer_handle y = bn_relu_conv(b, in, bottleneck, 1, ln + "/1x1");
      y = bn_relu_conv(b, y, growth, 3, ln + "/3x3");
      features.push_back(y);
    }
    x = b.concat(features, bn + "/concat");
    if (blk < 3) {
      const std::string tn = "transition" + std::to_string(blk + 1);
      const std::int64_t c = b.shape(x).c / 2;
      x = bn_relu_conv(b, x, c < 1 ? 1 : c, 1, tn);
      x = b.pool(x, pool_p(pool_mode::average, 2, 2, 0), tn + "/pool");
    }
  }
  x = b.bn(x, bn_params{}, "norm5");
  x = b.relu(x, "relu5");
  pool_params gap;
  gap.mode = pool_mode::average;
  gap.global = true;
  x = b.pool(x, gap, "global_pool");
  x = b.fc(x, fc_params{o.classes, true}, "fc");
  b.softmax_loss(x, "loss");
  return std::move(b).build();
}

}  // namespace memweave
