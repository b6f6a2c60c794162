// A layer step run micro-batch by micro-batch (TSPLIT, split along the sample dimension),
// or CONV/FC channel group by channel group (split along the output channels).
// Tensors are NCHW, so images [b, e) of a tensor are one contiguous slice: each micro-step
// sees the slices of its inputs, output and gradients and the whole parameters. Layers whose
// math couples the batch run in two passes: BN's statistics (and its backward's sums) over
// every micro-batch first, then the element-wise part per micro-batch; the loss's mean and
// gradient use the whole batch's n. The host kernels sum everything that crosses images in
// image order (conv.hpp, fc.hpp, bn.hpp, softmax_loss.hpp), so a split step gives the same
// bits as the whole step for every layer type and every split.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/layers/layer_step.hpp"

namespace memweave::layers {

/// The image ranges of `batch` images split into `parts` micro-batches: the first
/// batch % parts get one image more. parts is clamped to [1, batch].
std::vector<std::int64_t> micro_batch_bounds(std::int64_t batch, int parts);

/// A tensor of a split step whose whole value stays in host memory while the step runs
/// (TSPLIT's micro-tensors: only the running micro-batch's slices are on the device). Each
/// micro-step's slice is copied into `micro` (room for the largest micro-batch) before it
/// runs and back into `whole` after it; io's pointers into `whole` are the whole tensor's.
struct staged_tensor {
  float* whole = nullptr;      ///< n images of per_image floats (host memory)
  float* micro = nullptr;      ///< device memory for the largest micro-batch's slice
  std::int64_t per_image = 0;  ///< floats per image
  std::int64_t n = 0;          ///< images (1 for a tensor without images: weights)
  bool read = false;           ///< copied in before every pass over the micro-batches
  bool written = false;        ///< copied out after the step's last pass
  /// Channel groups (run_channel_split_step): 0 for a tensor cut by micro-batches only;
  /// else K, the output channels its rows are: each of its n blocks holds K rows of
  /// per_image / K floats (y and dy: an image's channel planes; W: one filter per row), and
  /// `micro` holds one group's rows of the micro-batch's blocks (n = 1: of the whole).
  /// Copied in before each group runs when read, out after it when written (so a tensor
  /// without images crosses once per micro-batch).
  std::int64_t channels = 0;
  /// The micro-batch whose slice `micro` already holds when the step starts (the whole
  /// value's, handed over by the split step before, whose last micro-batch it was), or -1.
  /// The step then starts there: its first pass runs the micro-batches last first, which
  /// its math must allow (any_order_first_pass); that slice is not copied in again.
  std::int64_t held = -1;
  /// The slice of the step's last micro-batch is not written back to `whole`: it stays in
  /// `micro` for the next step, the tensor's last reader, which starts from it (the executor
  /// writes it back should that step not take it).
  bool keeps_last = false;
  /// The whole value is held in host memory as fp16 (MEMWEAVE_SPLIT_COMPRESS=fp16, LDFG's
  /// compression for micro-tensors; lossy): `whole` points at n * per_image halves, a slice
  /// crosses the link as half the bytes, expanded into `micro` on its way in and rounded to
  /// nearest even on its way out. Micro-batch slices only (channels 0). `whole` still names
  /// the tensor: io's pointer to it is `whole` itself, as for an fp32 one.
  bool fp16 = false;
};

/// The passes a split step of layer type `type` runs over its micro-batches: BN 2 forward
/// (the sums of x and x^2, then normalisation), 2 backward where its input has a gradient
/// (`input_grad`: the sums, then dx), 1 where not; every other type 1. In an evaluation
/// (`inference`: BN on its running statistics, element-wise) every type 1.
int split_passes(layer_type type, bool forward, bool input_grad, bool inference = false) noexcept;

/// The micro-batch whose slices a split step's micro buffers hold when it ends (its last
/// pass's last): the passes alternate direction from the first, which starts at the last
/// micro-batch where that one's slices were handed over (staged_tensor::held).
std::int64_t final_micro_batch(layer_type type, bool forward, bool input_grad,
                               std::span<const staged_tensor> staged, std::int64_t batch,
                               int parts);

/// Whether a step of layer type `type` gives the same bits with the micro-batches of its
/// first pass in any order: image by image (ACT, POOL, LRN, DROPOUT, CONCAT, ADD both ways,
/// CONV and FC forward) or an exact sum (BN's forward statistics); not where sums over
/// images are added in image order (CONV/FC/BN backward, the loss).
bool any_order_first_pass(layer_type type, bool forward) noexcept;

/// One trained parameter's solver update (whole tensors: gradient, weight, momentum, and
/// their element count), which run_channel_split_step runs group by group.
struct param_update {
  const float* grad = nullptr;
  float* weight = nullptr;
  float* momentum = nullptr;
  std::size_t count = 0;
};
/// The solver's element-wise update of `count` weights from their gradients, in place.
using update_fn =
    std::function<void(std::size_t count, const float* grad, float* weight, float* momentum)>;

/// Runs the forward (or backward) of io's layer on the host in `parts` micro-batches. parts
/// 1 (or a DATA layer) runs the whole step. With `staged`, each micro-step runs on the
/// staged tensors' micro buffers (copied in and out around it) instead of slices of their
/// whole values: the same bits. A micro-batch's copies out run beside the next one's copies
/// in (on two of ctx's threads, where it has two), as staged_critical_bytes charges them.
/// Consecutive passes over the micro-batches (BN's) alternate direction, each turn starting at the
/// slices still in the buffers, and a step handed a slice (staged_tensor::held) starts at it.
/// Returns the bytes the copies moved (staged_copy_bytes); a slice handed to a step whose first
/// pass runs in order is a std::logic_error. With fp16 staged tensors, `fp16_error` (when
/// given) receives the largest relative error of the values rounded on their way out
/// (fp16_encode's measure; 0 when none went out).
std::size_t run_split_step(const kernels::host::kernel_context& ctx, const step_io& io,
                           bool forward, int parts, std::span<const staged_tensor> staged = {},
                           double* fp16_error = nullptr);

/// The bytes run_split_step returns for a step of layer type `type` (the link traffic of
/// staging): what only reads once per pass over the micro-batches (BN: 2 passes forward, 2
/// backward where its input has a gradient (`input_grad`), 1 where not), less the slice each
/// turn of direction finds in its buffer and a slice handed over (held); what is read and
/// written once in and once out; what is only written once out.
/// Channel-staged tensors (channels > 0) add their copies around each group: those with
/// images once, those without once per micro-batch (`parts` of them).
std::size_t staged_copy_bytes(layer_type type, bool forward, std::span<const staged_tensor> staged,
                              int parts = 1, bool input_grad = true,
                              bool inference = false) noexcept;

/// The bytes of staged_copy_bytes that the step waits for: each micro-batch's copies out
/// overlap the next micro-batch's copies in (the link's two directions), but a tensor whose
/// slice goes out is copied in after it (its one micro buffer); copies never overlap the
/// micro-steps' compute (the buffers hold one micro-batch). Channel-staged tensors' copies
/// count whole. What the null device charges a staged step at the link's rate.
std::size_t staged_critical_bytes(layer_type type, bool forward,
                                  std::span<const staged_tensor> staged, int parts = 1,
                                  bool input_grad = true, bool inference = false) noexcept;

/// A staged step's copies by the link's direction.
struct staged_link_bytes {
  std::size_t to_device = 0;  ///< slices (and channel groups) copied in
  std::size_t to_host = 0;    ///< copied out
};
/// staged_copy_bytes by direction (to_device + to_host is it): what the null device reserves
/// on each direction of the link it shares with the swap streams' copies.
staged_link_bytes staged_directions(layer_type type, bool forward,
                                    std::span<const staged_tensor> staged, int parts = 1,
                                    bool input_grad = true, bool inference = false) noexcept;

/// Whether a step of `l` runs in output-channel groups: CONV of groups 1, FC.
bool channel_splittable(const layer& l) noexcept;

/// Runs the forward (or backward) of io's CONV (groups 1) or FC layer on the host in `parts`
/// groups of output channels (features), bounded as micro_batch_bounds(channels, parts):
/// each group reads the whole input and its slice of the weights and bias, and writes its
/// channels of y, dW and db (each image's channel group is one contiguous block of NCHW y
/// and dy, gathered and scattered by copy). dx sums over the output channels: the first
/// group writes it and the others continue the sum (conv/fc_backward_data_extend), so the
/// step is bit-identical to the whole step for FC and for CONV's `direct`; CONV's im2col
/// algorithms round differently (their GEMMs' sums depend on the matrix sizes;
/// ARCHITECTURE.md, TSPLIT). Other layer types, grouped CONV and parts 1 run the whole step.
void run_channel_split_step(const kernels::host::kernel_context& ctx, const step_io& io,
                            bool forward, int parts);

/// The same in `groups` channel groups inside each of `parts` micro-batches, with staged
/// tensors (TSPLIT below the largest layer: what a group does not touch stays in host
/// memory): those with channels 0 (the input and its gradient) one micro-batch's slice at a
/// time, as run_split_step stages them; those with channels K (output, output gradient,
/// parameters, their gradients and momenta) one group's rows at a time. In backward, with
/// `updates`, the solver runs on each group's rows after the last micro-batch's group
/// (element-wise, and a group reads only its own rows of W: the same bits as one update
/// after the step).
void run_channel_split_step(const kernels::host::kernel_context& ctx, const step_io& io,
                            bool forward, int groups, int parts,
                            std::span<const staged_tensor> staged,
                            std::span<const param_update> updates, const update_fn& update);

}  // namespace memweave::layers
