// Every tensor of one training iteration, and for each step of the route the exact tensors
// that step reads and writes. This is the contract between the graph and the executor: the
// executor runs step s with exactly accesses(s) resident, and liveness derives the memory
// plan from the same lists.
//
// Tensors (role; persistent ones outlive the iteration):
//   data               the output y of each layer; the DATA layer also makes the labels
//   gradient           dL/dy of a layer's output, only where some backward step reads it
//                      (never for DATA, nor for SOFTMAX, nor for a layer whose backward has
//                      no work: no trained parameters and no input needing a gradient)
//   parameter          CONV/FC weight and bias, BN gamma and beta (persistent)
//   parameter_gradient one per trained parameter; lives within its backward step only
//   parameter_state    BN running mean/var, and the solver's momentum, one per trained
//                      parameter (persistent)
//   auxiliary          BN saved mean and inverse std; DROPOUT mask
//   workspace          one per CONV step (forward, backward); 0 bytes until
//                      set_workspace_bytes (conv-workspace selection) sets them
//
// Accesses of step s (each tensor at most once per step; reads, then accumulates and
// updates, then writes):
//   forward of layer i:  read the inputs' outputs (and the labels for SOFTMAX) and the
//     trained parameters; update BN running stats; write the output, the aux tensors and
//     the forward workspace. SOFTMAX computes the loss (a host scalar, not a tensor).
//   backward of layer i, when it has work (trained parameters or an input with a gradient):
//     read dL/dy (not SOFTMAX) and the forward tensors of backward_reads (x, y, aux,
//     labels); write or accumulate dL/dx of each input that has a gradient; write the
//     parameter gradients and the backward workspace; update each trained parameter and its
//     momentum (SGD with momentum runs in the same step, after the gradient kernel, so a
//     parameter gradient is born and dies in this step).
//   An input feeding several layers gets its gradient from each: the first of them in
//   backward order (the consumer latest in the route) writes it, the others accumulate.
//   A step with no work (DATA's backward always) has no accesses.
// Data parallelism (gradient buckets given): a bucketed layer's backward step reads its
// trained parameters and writes their gradients, without updating; its bucket's close step
// (the backward step of the bucket's last layer) reads every gradient of the bucket (they
// are reduced from there on), and its update step reads them again and updates the
// parameters and momenta. So a bucket's gradients live from their backward steps to its
// update step, and the memory plan, the budget checks and the schedule count them.
//
// Not thread-safe for writing (set_workspace_bytes); const use may be shared. Holds
// references to the network and route it was built from: they must outlive it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "memweave/engine/network.hpp"
#include "memweave/engine/route.hpp"

namespace memweave {

/// Index of a tensor in its table.
using tensor_id = std::uint32_t;
inline constexpr tensor_id invalid_tensor = std::numeric_limits<tensor_id>::max();

enum class tensor_role {
  data,
  gradient,
  parameter,
  parameter_gradient,
  parameter_state,
  auxiliary,
  workspace,
};

/// "data", "gradient", ...
const char* to_string(tensor_role r) noexcept;

/// Parameters and parameter state live across iterations.
constexpr bool is_persistent(tensor_role r) noexcept {
  return r == tensor_role::parameter || r == tensor_role::parameter_state;
}

/// How a step touches a tensor.
enum class access_mode {
  read,        ///< reads a value made earlier
  write,       ///< makes the value (the first writer of a gradient; outputs; scratch)
  accumulate,  ///< adds to a gradient an earlier step wrote (reads and writes)
  update,      ///< reads and writes in place (solver on parameters/momentum; BN running stats)
};

/// "read", "write", ...
const char* to_string(access_mode m) noexcept;

struct tensor_info {
  tensor_id id = invalid_tensor;
  std::string name;  ///< "<layer>.y", ".dy", ".labels", ".<param>", ".<param>.grad",
                     ///< ".<param>.momentum", ".<aux>", ".fwd_workspace", ".bwd_workspace"
  tensor_role role = tensor_role::data;
  shape4 shape;           ///< empty (all zero) for workspaces
  std::size_t bytes = 0;  ///< shape.bytes(), or the workspace size
  layer_id owner = invalid_layer;
  bool persistent = false;  ///< is_persistent(role)
  /// Kept in host memory for the whole run, never on the device, and so in no step's
  /// accesses: the batch when the network's tiled segments fetch it tile by tile
  /// (network::batch_on_host).
  bool host_resident = false;
};

struct tensor_access {
  tensor_id tensor = invalid_tensor;
  access_mode mode = access_mode::read;
  friend bool operator==(const tensor_access&, const tensor_access&) = default;
};

/// The tensors of one layer; the vectors run parallel to layer::param_tensors and
/// layer::aux_tensors, invalid_tensor where a kind does not exist.
struct layer_tensors {
  tensor_id output = invalid_tensor;         ///< y
  tensor_id output_grad = invalid_tensor;    ///< dL/dy, when needed
  tensor_id labels = invalid_tensor;         ///< DATA only
  tensor_id fwd_workspace = invalid_tensor;  ///< CONV only
  tensor_id bwd_workspace = invalid_tensor;  ///< CONV only
  std::vector<tensor_id> params;             ///< every parameter tensor (trained and state)
  std::vector<tensor_id> param_grads;        ///< trained ones only
  std::vector<tensor_id> momenta;            ///< trained ones only
  std::vector<tensor_id> aux;
};

/// Data parallelism: the trained parameters of consecutive layers (in backward order)
/// reduced together. The reduction starts after `close_step` (the backward step of the last
/// of `layers`); the layers' solver updates run at `update_step`, after it is done: the next
/// bucket's close step (the reduction runs under that bucket's backward kernels), the last
/// bucket's at the route's last step.
struct gradient_bucket {
  std::vector<layer_id> layers;  ///< backward order
  std::size_t bytes = 0;         ///< of their gradients
  std::size_t close_step = 0;
  std::size_t update_step = 0;
};

/// Buckets of `net` along `r`: layers with trained parameters, in backward order, a bucket
/// closed once its gradients reach `bucket_bytes` (as PyTorch DDP's bucket_cap_mb).
std::vector<gradient_bucket> make_gradient_buckets(const network& net, const route& r,
                                                   std::size_t bucket_bytes);

class tensor_table {
 public:
  /// All tensors of `net` and the accesses of every step of `r` (a route of `net`); with
  /// `buckets`, the solver's updates are deferred to them (data parallelism, above).
  tensor_table(const network& net, const route& r, std::vector<gradient_bucket> buckets = {});
  /// The table keeps references: temporaries would dangle.
  tensor_table(network&&, const route&) = delete;
  tensor_table(const network&, route&&) = delete;

  /// The network and the route (whose steps accesses() describes) it was built from.
  const network& net() const noexcept { return *net_; }
  const route& steps() const noexcept { return *route_; }

  /// Number of tensors, and all of them by id.
  std::size_t size() const noexcept { return tensors_.size(); }
  std::span<const tensor_info> tensors() const noexcept { return tensors_; }
  /// Tensor `id`; throws invalid_argument when out of range.
  const tensor_info& at(tensor_id id) const;
  const tensor_info& operator[](tensor_id id) const noexcept { return tensors_[id]; }
  /// The tensor named `name` ("conv1.weight", "conv1.y"); invalid_tensor when none is.
  tensor_id find(std::string_view name) const noexcept;

  /// The tensors of layer `id`.
  const layer_tensors& of(layer_id id) const noexcept { return layers_[id]; }
  /// The labels tensor (made by DATA).
  tensor_id labels() const noexcept { return layers_[net_->data_layer()].labels; }

  /// 2N.
  std::size_t step_count() const noexcept { return offsets_.size() - 1; }
  /// The tensors step s touches (s < step_count(), unchecked), each once, reads first and writes
  /// last.
  std::span<const tensor_access> accesses(std::size_t s) const noexcept {
    return {accesses_.data() + offsets_[s], accesses_.data() + offsets_[s + 1]};
  }
  /// Whether step s does any work (has accesses).
  bool has_work(std::size_t s) const noexcept { return offsets_[s + 1] != offsets_[s]; }

  /// The gradient buckets (empty: the updates run in the backward steps).
  std::span<const gradient_bucket> buckets() const noexcept { return buckets_; }

  /// Sets the bytes of a workspace tensor. Throws invalid_argument for any other role.
  /// Plans made earlier (liveness::plan, layer_memory) must be remade.
  void set_workspace_bytes(tensor_id id, std::size_t bytes);

  /// Sum of the bytes of persistent tensors (parameters, momenta, running stats).
  std::size_t persistent_bytes() const noexcept;
  /// Sum of the bytes of all non-persistent tensors (what the baseline allocates).
  std::size_t transient_bytes() const noexcept;

 private:
  tensor_id add(std::string name, tensor_role role, shape4 shape, layer_id owner);
  void build_accesses();

  const network* net_;
  const route* route_;
  std::vector<tensor_info> tensors_;
  std::vector<layer_tensors> layers_;
  std::vector<std::size_t> offsets_;  // step s's accesses are [offsets_[s], offsets_[s+1])
  std::vector<tensor_access> accesses_;
  std::vector<gradient_bucket> buckets_;
};

}  // namespace memweave
