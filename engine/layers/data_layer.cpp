// DATA: its output (images) and labels are written by the executor from the data source
// (a host-to-device copy on the compute stream), so it has no kernel of its own.
#include "engine/layers/layer_step.hpp"

namespace memweave::layers {

const layer_steps data_layer_steps{
    [](const kernels::host::kernel_context&, const step_io&) {},
    nullptr,
};

}  // namespace memweave::layers
