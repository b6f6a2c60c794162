// What one layer step sees when it runs: the device pointers of the tensors it touches,
// resolved by the executor from the tensor table, and the per-type forward/backward entry
// points of each backend. Each layer type is one small file (engine/layers/<type>_layer.cpp)
// defining its host kernels; the executor looks them up with layer_steps_for().
#pragma once

#include <cstdint>
#include <vector>

#include "engine/kernels/host/host_kernels.hpp"
#include "memweave/engine/layer.hpp"

namespace memweave::layers {

/// The tensors of one step. Vectors run parallel to the layer's inputs / param_tensors /
/// trained parameters / aux_tensors. Pointers a step does not touch are null.
struct step_io {
  const layer* l = nullptr;
  std::vector<shape4> input_shapes;
  std::vector<const float*> inputs;  ///< forward: x of each input; backward: when read
  const float* labels = nullptr;     ///< SOFTMAX
  float* output = nullptr;           ///< y (forward writes; backward reads when declared)
  const float* output_grad = nullptr;
  std::vector<kernels::host::grad_out> input_grads;  ///< backward; data null: no gradient
  std::vector<float*> params;       ///< every parameter tensor, param_tensors order
  std::vector<float*> param_grads;  ///< trained parameters only, in order
  std::vector<float*> aux;          ///< aux_tensors order
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  /// CONV: the algorithm (and im2col_batch chunk) of each pass, chosen by the executor's
  /// workspace selection; all three share `workspace`.
  kernels::host::conv_algo algo = kernels::host::conv_algo::direct;  ///< forward
  std::int64_t chunk = 0;
  kernels::host::conv_algo data_algo = kernels::host::conv_algo::direct;  ///< backward data
  std::int64_t data_chunk = 0;
  kernels::host::conv_algo filter_algo = kernels::host::conv_algo::direct;  ///< backward filter
  std::int64_t filter_chunk = 0;
  std::uint64_t seed = 0;            ///< DROPOUT: the mask's seed for this layer and batch
  std::int64_t first_sample = 0;     ///< DROPOUT: this rank's first image in the global batch
  bool update_running_stats = true;  ///< BN: false when a forward is recomputed
  /// Evaluation (executor::evaluate): BN normalises with its running statistics (and
  /// leaves them and its aux tensors alone), DROPOUT passes x through (y = x exactly).
  bool inference = false;
  double* loss = nullptr;  ///< SOFTMAX forward writes the batch's mean loss here
  /// A micro-batch of a split step (TSPLIT, split_step.hpp): the index of its first image
  /// in the whole batch (DROPOUT's mask), and whether the parameter gradients add to what
  /// the micro-batches before it wrote (CONV, FC).
  std::int64_t first_image = 0;
  bool accumulate_param_grads = false;
};

using step_fn = void (*)(const kernels::host::kernel_context&, const step_io&);

/// The host kernels of one layer type.
struct layer_steps {
  step_fn forward;
  step_fn backward;  ///< null when the type has no backward work of its own (DATA)
};

/// The host steps of `type`.
const layer_steps& layer_steps_for(layer_type type) noexcept;

// One definition per file in engine/layers/.
extern const layer_steps data_layer_steps;
extern const layer_steps conv_layer_steps;
extern const layer_steps fc_layer_steps;
extern const layer_steps pool_layer_steps;
extern const layer_steps act_layer_steps;
extern const layer_steps bn_layer_steps;
extern const layer_steps lrn_layer_steps;
extern const layer_steps dropout_layer_steps;
extern const layer_steps softmax_loss_layer_steps;
extern const layer_steps concat_layer_steps;
extern const layer_steps add_layer_steps;
extern const layer_steps tiled_layer_steps;

// ---- cuda backend (engine/layers/cuda_layer_steps.cpp; built when MEMWEAVE_HAVE_CUDA) ----
}  // namespace memweave::layers
namespace memweave::kernels::cuda {
class cuda_kernel_context;
}  // namespace memweave::kernels::cuda
namespace memweave::layers {

/// The cuda steps of one layer type: they enqueue cuDNN/cuBLAS/custom kernels on the
/// context's stream from the calling (host) thread, reading the same step_io fields as the
/// host steps. Call them directly, never from inside stream::launch (no CUDA calls there).
struct cuda_layer_steps {
  void (*forward)(kernels::cuda::cuda_kernel_context&, const step_io&);
  void (*backward)(kernels::cuda::cuda_kernel_context&, const step_io&);  ///< null for DATA
};

/// The cuda steps of `type`.
const cuda_layer_steps& cuda_layer_steps_for(layer_type type) noexcept;

/// Estimated floating-point operations of a layer's forward and backward steps (the null
/// device's cost model; see layer_cost.cpp).
double forward_flops(const layer& l, const std::vector<shape4>& input_shapes) noexcept;
double backward_flops(const layer& l, const std::vector<shape4>& input_shapes) noexcept;

}  // namespace memweave::layers
