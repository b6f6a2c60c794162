// Inception v4 (Szegedy et al. 2017, Fig. 9 and the shapes of its reference implementation):
// stem (three 3x3 units, Mixed_3a/4a/5a fans), 4 Inception-A, Reduction-A, 7 Inception-B,
// Reduction-B, 3 Inception-C (whose branches fan out again into 1x3 and 3x1 pairs), global
// average pool, dropout 0.2, FC. Every convolution is a CONV(no bias)-BN(eps 1e-3)-RELU unit.
// Branches are concatenated in the reference order. Native side 299, smallest 75 (the stem's
// valid convolutions and the two reductions need at least 3x3 to work on).
// At width 1 and 1000 classes: 42,679,816 trained parameters.
#include <vector>

#include "zoo_common.hpp"

namespace memweave {

using namespace zoo_detail;

namespace {

class inception_builder {
 public:
  inception_builder(network_builder& b, double w) : b_(b), w_(w) {}

  // A CONV-BN-RELU unit of `out` (unscaled) channels, kernel kh x kw, "same" padding unless
  // `valid`.
  layer_handle unit(layer_handle x, std::int64_t out, std::int64_t kh, std::int64_t kw,
                    const std::string& name, std::int64_t stride = 1, bool valid = false) {
    const std::int64_t ph = valid ? 0 : kh / 2, pw = valid ? 0 : kw / 2;
    return conv_bn_relu(b_, x, scaled(out, w_), kh, kw, stride, ph, pw, name, 1e-3f);
  }
  layer_handle max_pool_3s2(layer_handle x, const std::string& name) {
    return b_.pool(x, pool_p(pool_mode::max, 3, 2, 0), name);
  }
  layer_handle avg_pool_3s1(layer_handle x, const std::string& name) {
    return b_.pool(x, pool_p(pool_mode::average, 3, 1, 1), name);
  }
  layer_handle cat(std::initializer_list<layer_handle> xs, const std::string& name) {
    return b_.concat(xs, name);
  }

  layer_handle stem(layer_handle x) {
    x = unit(x, 32, 3, 3, "stem/conv1", 2, true);
    x = unit(x, 32, 3, 3, "stem/conv2", 1, true);
    x = unit(x, 64, 3, 3, "stem/conv3");
    // Mixed_3a
    layer_handle p = max_pool_3s2(x, "mixed_3a/pool");
    layer_handle c = unit(x, 96, 3, 3, "mixed_3a/conv", 2, true);
    x = cat({p, c}, "mixed_3a");
    // Mixed_4a
    layer_handle b0 = unit(x, 64, 1, 1, "mixed_4a/b0_1x1");
    b0 = unit(b0, 96, 3, 3, "mixed_4a/b0_3x3", 1, true);
    layer_handle b1 = unit(x, 64, 1, 1, "mixed_4a/b1_1x1");
    b1 = unit(b1, 64, 1, 7, "mixed_4a/b1_1x7");
    b1 = unit(b1, 64, 7, 1, "mixed_4a/b1_7x1");
    b1 = unit(b1, 96, 3, 3, "mixed_4a/b1_3x3", 1, true);
    x = cat({b0, b1}, "mixed_4a");
    // Mixed_5a
    c = unit(x, 192, 3, 3, "mixed_5a/conv", 2, true);
    p = max_pool_3s2(x, "mixed_5a/pool");
    return cat({c, p}, "mixed_5a");
  }

  layer_handle inception_a(layer_handle x, const std::string& n) {
    layer_handle b0 = unit(x, 96, 1, 1, n + "/b0_1x1");
    layer_handle b1 = unit(x, 64, 1, 1, n + "/b1_1x1");
    b1 = unit(b1, 96, 3, 3, n + "/b1_3x3");
    layer_handle b2 = unit(x, 64, 1, 1, n + "/b2_1x1");
    b2 = unit(b2, 96, 3, 3, n + "/b2_3x3a");
    b2 = unit(b2, 96, 3, 3, n + "/b2_3x3b");
    layer_handle b3 = avg_pool_3s1(x, n + "/b3_pool");
    b3 = unit(b3, 96, 1, 1, n + "/b3_1x1");
    return b_.concat({b0, b1, b2, b3}, n);
  }

  layer_handle reduction_a(layer_handle x, const std::string& n) {
    layer_handle b0 = unit(x, 384, 3, 3, n + "/b0_3x3", 2, true);
    layer_handle b1 = unit(x, 192, 1, 1, n + "/b1_1x1");
    b1 = unit(b1, 224, 3, 3, n + "/b1_3x3a");
    b1 = unit(b1, 256, 3, 3, n + "/b1_3x3b", 2, true);
    layer_handle b2 = max_pool_3s2(x, n + "/b2_pool");
    return b_.concat({b0, b1, b2}, n);
  }

  layer_handle inception_b(layer_handle x, const std::string& n) {
    layer_handle b0 = unit(x, 384, 1, 1, n + "/b0_1x1");
    layer_handle b1 = unit(x, 192, 1, 1, n + "/b1_1x1");
    b1 = unit(b1, 224, 1, 7, n + "/b1_1x7");
    b1 = unit(b1, 256, 7, 1, n + "/b1_7x1");
    layer_handle b2 = unit(x, 192, 1, 1, n + "/b2_1x1");
    b2 = unit(b2, 192, 7, 1, n + "/b2_7x1a");
    b2 = unit(b2, 224, 1, 7, n + "/b2_1x7a");
    b2 = unit(b2, 224, 7, 1, n + "/b2_7x1b");
    b2 = unit(b2, 256, 1, 7, n + "/b2_1x7b");
    layer_handle b3 = avg_pool_3s1(x, n + "/b3_pool");
    b3 = unit(b3, 128, 1, 1, n + "/b3_1x1");
    return b_.concat({b0, b1, b2, b3}, n);
  }

  layer_handle reduction_b(layer_handle x, const std::string& n) {
    layer_handle b0 = unit(x, 192, 1, 1, n + "/b0_1x1");
    b0 = unit(b0, 192, 3, 3, n + "/b0_3x3", 2, true);
    layer_handle b1 = unit(x, 256, 1, 1, n + "/b1_1x1");
    b1 = unit(b1, 256, 1, 7, n + "/b1_1x7");
    b1 = unit(b1, 320, 7, 1, n + "/b1_7x1");
    b1 = unit(b1, 320, 3, 3, n + "/b1_3x3", 2, true);
    layer_handle b2 = max_pool_3s2(x, n + "/b2_pool");
    return b_.concat({b0, b1, b2}, n);
  }

  layer_handle inception_c(layer_handle x, const std::string& n) {
    layer_handle b0 = unit(x, 256, 1, 1, n + "/b0_1x1");
    layer_handle b1 = unit(x, 384, 1, 1, n + "/b1_1x1");
    layer_handle b1a = unit(b1, 256, 1, 3, n + "/b1_1x3");
    layer_handle b1b = unit(b1, 256, 3, 1, n + "/b1_3x1");
    layer_handle b2 = unit(x, 384, 1, 1, n + "/b2_1x1");
    b2 = unit(b2, 448, 3, 1, n + "/b2_3x1");
    b2 = unit(b2, 512, 1, 3, n + "/b2_1x3");
    layer_handle b2a = unit(b2, 256, 1, 3, n + "/b2_1x3b");
    layer_handle b2b = unit(b2, 256, 3, 1, n + "/b2_3x1b");
    layer_handle b3 = avg_pool_3s1(x, n + "/b3_pool");
    b3 = unit(b3, 256, 1, 1, n + "/b3_1x1");
    return b_.concat({b0, b1a, b1b, b2a, b2b, b3}, n);
  }

 private:
  network_builder& b_;
  double w_;
};

}  // namespace

network make_inception_v4(const zoo_options& opts) {
  const zoo_options o = resolve("inception_v4", opts, 299, 75);
  network_builder b("inception_v4");
  inception_builder ib(b, o.width_scale);
  layer_handle x = b.data({o.batch, o.image_channels, o.image_side, o.image_side}, o.classes);
  x = ib.stem(x);
  for (int k = 1; k <= 4; ++k) x = ib.inception_a(x, "inception_a" + std::to_string(k));
  x = ib.reduction_a(x, "reduction_a");
  for (int k = 1; k <= 7; ++k) x = ib.inception_b(x, "inception_b" + std::to_string(k));
  x = ib.reduction_b(x, "reduction_b");
  for (int k = 1; k <= 3; ++k) x = ib.inception_c(x, "inception_c" + std::to_string(k));
  pool_params gap;
  gap.mode = pool_mode::average;
  gap.global = true;
  x = b.pool(x, gap, "global_pool");
  x = b.dropout(x, dropout_params{0.2f}, "dropout");
  x = b.fc(x, fc_params{o.classes, true}, "fc");
  b.softmax_loss(x, "loss");
  return std::move(b).build();
}

}  // namespace memweave
