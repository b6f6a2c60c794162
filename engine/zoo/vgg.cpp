// VGG16 (Simonyan & Zisserman, configuration D): 13 3x3 convolutions with biases in five
// stages separated by 2x2 max pools, then FC 4096 - 4096 - classes with ReLU and dropout 0.5.
// No BN (the published network has none). At width 1 and 1000 classes: 138,357,544 trained
// parameters at any side (an adaptive average pool to 7x7 feeds fc6 where pool5 is not
// 7x7, as torchvision's).
#include "zoo_common.hpp"

namespace memweave {

using namespace zoo_detail;

network make_vgg16(const zoo_options& opts) {
  const zoo_options o = resolve("vgg16", opts, 224, 32);
  const double w = o.width_scale;
  struct stage {
    std::int64_t channels;
    int convs;
  };
  const stage stages[] = {{64, 2}, {128, 2}, {256, 3}, {512, 3}, {512, 3}};

  network_builder b("vgg16");
  layer_handle x = b.data({o.batch, o.image_channels, o.image_side, o.image_side}, o.classes);
  int si = 1;
  for (const stage& s : stages) {
    for (int k = 1; k <= s.convs; ++k) {
      const std::string id = std::to_string(si) + "_" + std::to_string(k);
      x = b.conv(x, conv_p(scaled(s.channels, w), 3, 3, 1, 1, 1, true), "conv" + id);
      x = b.relu(x, "relu" + id);
    }
    x = b.pool(x, pool_p(pool_mode::max, 2, 2, 0), "pool" + std::to_string(si));
    ++si;
  }
  // torchvision's AdaptiveAvgPool2d((7, 7)): fc6 takes 512x7x7 at any side. At the native
  // side (224 to 255: five halvings give 7) it is the identity and is left out, so the
  // network there is the published one, layer for layer.
  if (const shape4& s = b.shape(x); s.h != 7 || s.w != 7) {
    pool_params avg;
    avg.mode = pool_mode::average;
    avg.adaptive_h = avg.adaptive_w = 7;
    x = b.pool(x, avg, "avgpool");
  }
  const std::int64_t f = scaled(4096, w);
  x = b.fc(x, fc_params{f, true}, "fc6");
  x = b.relu(x, "relu6");
  x = b.dropout(x, dropout_params{0.5f}, "drop6");
  x = b.fc(x, fc_params{f, true}, "fc7");
  x = b.relu(x, "relu7");
  x = b.dropout(x, dropout_params{0.5f}, "drop7");
  x = b.fc(x, fc_params{o.classes, true}, "fc8");
  b.softmax_loss(x, "loss");
  return std::move(b).build();
}

}  // namespace memweave
