// AlexNet as the paper's footnote 3 lists it, with the shapes of Caffe's bvlc_alexnet
// (227x227 input, conv2/4/5 in two groups, LRN size 5 alpha 1e-4 beta 0.75 k 1, dropout 0.5).
// At width 1 and 1000 classes: 60,965,224 trained parameters.
#include "zoo_common.hpp"

namespace memweave {

using namespace zoo_detail;

network make_alexnet(const zoo_options& opts) {
  const zoo_options o = resolve("alexnet", opts, 227, 67);
  const double w = o.width_scale;
  // Grouped convolutions need channel counts divisible by 2 on both sides.
  const std::int64_t c1 = scaled(96, w, 2), c2 = scaled(256, w, 2), c3 = scaled(384, w, 2),
                     c4 = scaled(384, w, 2), c5 = scaled(256, w, 2), f = scaled(4096, w);
  lrn_params lrn;
  lrn.size = 5;
  lrn.alpha = 1e-4f;
  lrn.beta = 0.75f;
  lrn.k = 1.0f;
  const pool_params pool = pool_p(pool_mode::max, 3, 2, 0);
  auto grouped = [](conv_params p) {
    p.groups = 2;
    return p;
  };

  network_builder b("alexnet");
  layer_handle x = b.data({o.batch, o.image_channels, o.image_side, o.image_side}, o.classes);
  x = b.conv(x, conv_p(c1, 11, 11, 4, 0, 0, true), "conv1");
  x = b.relu(x, "relu1");
  x = b.lrn(x, lrn, "lrn1");
  x = b.pool(x, pool, "pool1");
  x = b.conv(x, grouped(conv_p(c2, 5, 5, 1, 2, 2, true)), "conv2");
  x = b.relu(x, "relu2");
  x = b.lrn(x, lrn, "lrn2");
  x = b.pool(x, pool, "pool2");
  x = b.conv(x, conv_p(c3, 3, 3, 1, 1, 1, true), "conv3");
  x = b.relu(x, "relu3");
  x = b.conv(x, grouped(conv_p(c4, 3, 3, 1, 1, 1, true)), "conv4");
  x = b.relu(x, "relu4");
  x = b.conv(x, grouped(conv_p(c5, 3, 3, 1, 1, 1, true)), "conv5");
  x = b.relu(x, "relu5");
  x = b.pool(x, pool, "pool5");
  x = b.fc(x, fc_params{f, true}, "fc1");
  x = b.relu(x, "relu6");
  x = b.dropout(x, dropout_params{0.5f}, "dropout1");
  x = b.fc(x, fc_params{f, true}, "fc2");
  x = b.relu(x, "relu7");
  x = b.dropout(x, dropout_params{0.5f}, "dropout2");
  x = b.fc(x, fc_params{o.classes, true}, "fc3");
  b.softmax_loss(x, "softmax");
  return std::move(b).build();
}

}  // namespace memweave
