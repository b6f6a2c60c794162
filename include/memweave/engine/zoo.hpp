// The networks of the paper's evaluation, built with network_builder, and a generator of
// random DAGs for oracle tests.
//
// Every family takes a batch, an input side, a width scale and a class count, so that a small
// version with the full topology (every fan and join, every layer) exists for tests:
// make_network("resnet50", {.batch = 2, .image_side = 32, .width_scale = 0.125,
// .classes = 10}). Channel counts c become max(1, round(c * width_scale)) (rounded up to a
// multiple of the groups where a convolution is grouped).
//
// Parameter counts at width 1 and 1000 classes (trained parameters: weights, biases, BN
// gamma/beta; running statistics excluded):
//   alexnet      60,965,224  (Caffe's bvlc_alexnet: conv2/4/5 in 2 groups, 227x227 input)
//   vgg16       138,357,544
//   resnet50     25,557,032   resnet101 44,549,160   resnet152 60,192,808
//   inception_v4 42,679,816
//   densenet121   7,978,856
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "memweave/engine/network.hpp"

namespace memweave {

/// The largest width_scale the zoo takes (a larger one only builds tensors no machine holds).
inline constexpr double k_max_width_scale = 1e4;

struct zoo_options {
  std::int64_t batch = 32;      ///< images per batch, > 0
  std::int64_t image_side = 0;  ///< input height = width; 0: the network's native side
  double width_scale = 1.0;     ///< channel multiplier, in (0, k_max_width_scale]
  std::int64_t classes = 1000;  ///< classes of the final FC and the loss, > 0
  std::int64_t image_channels = 3;
};

/// AlexNet as the paper's footnote 3 lists it (23 layers after DATA: CONV1 RELU1 LRN1 POOL1
/// CONV2 RELU2 LRN2 POOL2 CONV3 RELU3 CONV4 RELU4 CONV5 RELU5 POOL5 FC1 RELU6 Dropout1 FC2
/// RELU7 Dropout2 FC3 Softmax) with Caffe's shapes: native side 227, smallest 67.
network make_alexnet(const zoo_options& o);

/// VGG16 (configuration D, no BN): 13 3x3 CONV+RELU in 5 stages with max pools, FC 4096,
/// 4096, classes, with dropout. Native side 224, smallest 32; at a side whose pool5 is not
/// 7x7 (outside 224..255) an adaptive average pool to 7x7 ("avgpool", torchvision's) comes
/// before fc6, so the FC layers keep their shapes at any side.
network make_vgg16(const zoo_options& o);

/// A bottleneck ResNet (v1.5: stride on the 3x3) with n[0..3] blocks in its four stages,
/// depth 3*(n1+n2+n3+n4)+2; each block CONV-BN-RELU x2, CONV-BN, ADD with the shortcut
/// (a 1x1 CONV-BN projection on each stage's first block), RELU. Native side 224, any
/// side >= 1 works. `name` defaults to "resnet<depth>".
network make_resnet(std::array<std::int64_t, 4> blocks, const zoo_options& o,
                    std::string name = {});

/// Inception v4 (stem, 4 Inception-A, Reduction-A, 7 Inception-B, Reduction-B,
/// 3 Inception-C, with its fans inside Inception-C), CONV-BN-RELU units. Native side 299,
/// smallest 75.
network make_inception_v4(const zoo_options& o);

/// DenseNet-121 (growth 32, blocks 6/12/24/16, bottleneck 4k, compression 0.5): each dense
/// layer reads a CONCAT of the block input and all earlier layers' outputs (the full join
/// of the paper's Fig. 1). Native side 224, smallest 29.
network make_densenet121(const zoo_options& o);

/// "alexnet", "vgg16", "resnet50", "resnet101", "resnet152", "resnet:<n1>,<n2>,<n3>,<n4>",
/// "inception_v4", "densenet121". Throws invalid_argument for an unknown name (listing the
/// known ones), a malformed resnet spec, or options the network cannot take.
network make_network(std::string_view name, const zoo_options& o);

/// The names make_network knows ("resnet:<n1>,<n2>,<n3>,<n4>" as written here).
std::vector<std::string> zoo_names();

/// Throws make_network's invalid_argument for a name it does not know or a malformed resnet
/// spec, without building anything (so a caller can name the option the name came from).
void check_zoo_name(std::string_view name);

/// The native input side of a zoo name (227, 224, 299), and the smallest one it builds at.
std::int64_t zoo_native_side(std::string_view name);
std::int64_t zoo_min_side(std::string_view name);

/// Options of the random DAG generator.
struct random_dag_options {
  std::uint64_t seed = 1;
  std::size_t layers = 40;  ///< about how many layers between DATA and the final FC
  std::size_t stages = 2;   ///< spatial stages (a POOL halves the side between them)
  std::int64_t batch = 2;
  std::int64_t channels = 4;    ///< channels of DATA; CONVs pick 1..2*channels
  std::int64_t image_side = 8;  ///< must be >= 2^(stages-1)
  std::int64_t classes = 5;
  bool all_types = false;  ///< also LRN, DROPOUT, tanh ACT, average POOL
};

/// A random network of CONV/ACT/BN/POOL/CONCAT/ADD layers with fans (outputs read by
/// several layers) and joins, ending in FC + SOFTMAX; valid by construction and the same for
/// the same options. Named "random_<seed>".
network make_random_dag(const random_dag_options& o);

}  // namespace memweave
