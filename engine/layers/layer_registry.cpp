// The table from layer type to its host steps: explicit, no static registrars.
#include "engine/layers/layer_step.hpp"

namespace memweave::layers {

const layer_steps& layer_steps_for(layer_type type) noexcept {
  switch (type) {
    case layer_type::data:
      return data_layer_steps;
    case layer_type::conv:
      return conv_layer_steps;
    case layer_type::fc:
      return fc_layer_steps;
    case layer_type::pool:
      return pool_layer_steps;
    case layer_type::act:
      return act_layer_steps;
    case layer_type::bn:
      return bn_layer_steps;
    case layer_type::lrn:
      return lrn_layer_steps;
    case layer_type::dropout:
      return dropout_layer_steps;
    case layer_type::softmax_loss:
      return softmax_loss_layer_steps;
    case layer_type::concat:
      return concat_layer_steps;
    case layer_type::add:
      return add_layer_steps;
    case layer_type::tiled:
      return tiled_layer_steps;
  }
  return data_layer_steps;
}

}  // namespace memweave::layers
