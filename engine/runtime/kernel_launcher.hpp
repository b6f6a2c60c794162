// What the step loop asks of a backend: enqueue one layer step's kernels (and the solver's
// updates) on the compute stream, and choose a CONV step's algorithms. One implementation
// per backend: host (CPU kernels on the stream's worker), null (nothing runs; each step is
// charged the cost model's time) and cuda (cuDNN/cuBLAS enqueued from the calling thread).
// The executor holds one, made by make_kernel_launcher, and never asks which it is.
//
// Not thread-safe: the thread driving the executor calls it. Holds references to what the
// executor gives it (network, tensor table, device, heap), which outlive it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/layers/layer_step.hpp"
#include "engine/layers/split_step.hpp"
#include "engine/runtime/batch_prefetcher.hpp"
#include "engine/runtime/conv_selection.hpp"
#include "engine/solver/sgd.hpp"
#include "memweave/alloc/device_heap.hpp"
#include "memweave/conv_workspace/conv_workspace_selector.hpp"
#include "memweave/device/device.hpp"
#include "memweave/engine/cost_model.hpp"
#include "memweave/engine/data_source.hpp"
#include "memweave/engine/layer_memory.hpp"
#include "memweave/engine/network.hpp"
#include "memweave/engine/tensor_table.hpp"
#include "memweave/swap/fp16_codec.hpp"

namespace memweave {

/// What workspace selection decided for one CONV step.
struct conv_step {
  host_conv_choice forward, data, filter;
  /// cuda: the cuDNN enum values; 0 is each pass's no-workspace algorithm (forward
  /// IMPLICIT_GEMM, backward ALGO_0).
  int cuda_forward = 0, cuda_data = 0, cuda_filter = 0;
  std::size_t workspace_bytes = 0;
  std::string name;      ///< for the step record
  double seconds = 0.0;  ///< measured or modelled time of the chosen algorithms
};

/// One layer step's kernel, as the step loop hands it over.
struct layer_launch {
  const layer* l = nullptr;
  bool forward = true;
  std::span<const tensor_access> accesses;  ///< the step's (the replayed forward's) accesses
  const conv_step* conv = nullptr;          ///< CONV: the chosen algorithms
  void* workspace = nullptr;                ///< CONV: conv->workspace_bytes, or nullptr
  data_source* data = nullptr;              ///< DATA: the batches (nullptr on null)
  std::int64_t iteration = 0;               ///< the batch (DATA, dropout seeds)
  bool replay = false;     ///< a recomputation: BN's running statistics and the loss stay
  bool inference = false;  ///< evaluation: BN on running statistics, no dropout, no update
  int parts = 1;           ///< TSPLIT: micro-batches the step runs in (split_step.hpp)
  /// TSPLIT: CONV (groups 1) and FC: the output-channel groups each micro-batch runs in
  /// (split_step.hpp's run_channel_split_step); the solver's updates then run group by group.
  int channel_parts = 1;
  /// TSPLIT: the step's tensors whose whole values stay in host memory, each micro-batch's
  /// slice copied through its micro buffer (split_step.hpp; on null, only the sizes count:
  /// the copies are charged at the link's rate).
  std::span<const layers::staged_tensor> staged;
  /// TSPLIT with fp16 staged tensors: raised to the largest relative error of the values the
  /// kernel rounds on their way out (written by the kernel's work, in stream order).
  double* fp16_error = nullptr;
  /// A fused replay (fuses_bn_act): `l` is a BN whose forward runs from its saved
  /// statistics with this ACT applied as it writes, into the ACT's output; BN's own output
  /// is neither read nor written.
  const layer* fused_act = nullptr;
};

/// What a launcher needs of the executor.
struct launcher_context {
  const network* net = nullptr;
  const tensor_table* table = nullptr;
  const layer_memory* memory = nullptr;
  device* dev = nullptr;
  device_heap* heap = nullptr;  ///< cuda: scratch for measuring algorithms
  cost_model model;
  int threads = 0;  ///< host kernel threads (0 = every core)
  sgd_options sgd;
  std::uint64_t seed = 1;         ///< dropout masks
  std::int64_t first_sample = 0;  ///< dropout masks: this rank's first image in the batch
  std::function<void*(tensor_id)> device_ptr;  ///< a resident tensor's device memory
  double* loss = nullptr;                      ///< written by the SOFTMAX forward
};

/// Held for an iteration: what its kernels need of the calling thread (cuda: the device
/// current). Destroying it gives that back.
class launch_scope {
 public:
  virtual ~launch_scope() = default;
};

class kernel_launcher {
 public:
  explicit kernel_launcher(launcher_context context) : ctx_(std::move(context)) {
    batches_.use_threads(ctx_.threads);
  }
  virtual ~kernel_launcher() = default;
  kernel_launcher(const kernel_launcher&) = delete;
  kernel_launcher& operator=(const kernel_launcher&) = delete;

  /// What conv timings hold for (the workspace selector's fingerprint): a backend and its
  /// device, threads or library versions.
  virtual std::string fingerprint() const = 0;
  /// Whether the conv candidates' seconds are measured (worth keeping in MEMWEAVE_CONV_CACHE)
  /// rather than computed from the cost model (null: the cache is neither read nor written).
  virtual bool measures_convolutions() const { return true; }
  /// Checks that kernels can run, once the process's large mappings are made (host: the
  /// BLAS buffers' address space). Throws out_of_memory when they could not.
  virtual void check_ready() const {}
  /// Whether launch() runs fused replays (layer_launch::fused_act): host and null do; cuda
  /// replays BN and ACT as cuDNN ran them, one after the other.
  virtual bool fuses_bn_act() const { return false; }
  /// Whether staged tensors' whole values (TSPLIT's micro-tensors) live in the device's
  /// page-locked memory: cuda's micro-steps copy them with cudaMemcpyAsync, which from
  /// pageable memory may read the source when enqueued, before the copy out that wrote it.
  virtual bool pins_staging() const { return false; }
  /// Takes what fp16 micro-tensors cross through (cuda: the kernel context's fp16 buffers,
  /// outside the heap), once the executor knows some will: at construction, not in the
  /// middle of an iteration, where a device the heap has filled would fail it.
  virtual void prepare_fp16_staging() {}
  /// Copies `bytes` between two host buffers from the executor's thread (a swapped tensor's
  /// host copy into its staging memory): one memcpy; on cuda, whose kernels leave the cores
  /// idle, in parallel pieces (a ResNet-50 b64 res2 activation is 205 MB: about 20 ms on one
  /// core, with the GPU waiting).
  virtual void copy_host_memory(void* dst, const void* src, std::size_t bytes) const {
    std::memcpy(dst, src, bytes);
  }
  /// Iterations whose step times are not yet the steady ones (loading kernels, building
  /// library plans): the schedule is re-planned from the times of the iteration after them.
  virtual int cold_iterations() const { return 0; }
  /// Held by the caller while it runs an iteration; nullptr when nothing is needed.
  virtual std::unique_ptr<launch_scope> enter_iteration() { return nullptr; }
  /// The fp16 codec of compressed swaps on this backend's device, for the transfer engine
  /// (transfer_options::fp16_codec_factory): cuda's conversion kernels; empty where swap/'s
  /// own codec serves (host, null).
  virtual std::function<std::unique_ptr<fp16_codec>(device&)> fp16_codec_factory() const {
    return {};
  }

  /// Called once, before anything is placed in the heap: a backend whose CONV candidates
  /// are measured on heap scratch (cuda) measures every whole-batch CONV pass of the
  /// network now, into `selector`. Measured inside a step, the scratch's allocation and
  /// free would reorder the heap's equal free runs (best-fit prefers the most recently
  /// freed) and later tensors would land elsewhere than `plan` put them. Other backends
  /// measure nothing here. `forward_only`: an executor that only evaluates (its backward
  /// passes never run, and a fixed algorithm named for the forward pass is not theirs).
  virtual void measure_conv_candidates(conv_workspace_selector&, bool /*forward_only*/) {}

  /// The algorithms of a CONV step when `available` bytes can be handed out for its
  /// workspace, chosen by `selector` among this backend's candidates.
  conv_step choose_conv(conv_workspace_selector& selector, const layer& l, bool forward,
                        bool input_has_gradient, std::size_t available);
  /// What a CONV step runs when the workspace of the one chosen cannot be had: direct on
  /// the host (and null), the fastest of cuDNN's without a workspace on cuda.
  virtual conv_step no_workspace_conv(conv_workspace_selector& selector, const layer& l,
                                      bool forward, bool input_has_gradient);

  /// The solver's settings for the kernels enqueued from now on (between iterations: the
  /// host backend reads them when its update runs).
  void set_sgd(const sgd_options& o) noexcept { ctx_.sgd = o; }
  /// The seed of the dropout masks of the steps enqueued from now on.
  void set_seed(std::uint64_t seed) noexcept { ctx_.seed = seed; }
  /// Waits for the batch being made ahead (batch_prefetcher): its source may go once the
  /// iteration or evaluation that used it returns. Never throws.
  void settle_batches() noexcept { batches_.settle(); }
  /// Batches the DATA step found made ahead.
  std::int64_t batches_made_ahead() const noexcept { return batches_.hits(); }

  /// Enqueues the step's kernel (and, in backward, the solver's updates) on the compute
  /// stream; on `null`, only its modelled time.
  virtual void launch(const layer_launch& step) = 0;
  /// Data parallelism: enqueues the solver's updates of `layers` (a gradient bucket, its
  /// gradients reduced) on the compute stream; on `null`, nothing.
  virtual void launch_updates(std::span<const layer_id> layers) = 0;

 protected:
  /// A step's kernel arguments: its step_io, and in backward the solver's updates
  /// ((gradient, weight) pairs, with their momenta and element counts).
  struct step_kernel_args {
    layers::step_io io;
    std::vector<std::pair<float*, float*>> updates;
    std::vector<float*> momenta;
    std::vector<std::size_t> counts;
  };

  /// The backend's name in conv cache keys: "host", "model" or "cuda".
  virtual std::string conv_backend() const = 0;
  /// Fills `selector` with the candidates of every whole-batch CONV pass the network's
  /// steps choose among (choose_conv's keys): forward, backward filter, and backward data
  /// where the input has a gradient (the forward pass alone with `forward_only`).
  void fill_conv_candidates(conv_workspace_selector& selector, bool forward_only);
  /// The candidates of one pass of a CONV through `selector`: its cache's (checked against
  /// conv_candidate_runs), else this backend's, measured.
  const std::vector<conv_candidate>& candidates_of(conv_workspace_selector& selector,
                                                   const std::string& backend,
                                                   kernels::host::conv_pass pass, const shape4& in,
                                                   const conv_params& p);
  /// This backend's candidates for one pass of a CONV.
  virtual std::vector<conv_candidate> conv_candidates(kernels::host::conv_pass pass,
                                                      const shape4& in, const conv_params& p) = 0;
  /// Whether candidate `c` (from the conv cache file) is one of this backend's algorithms
  /// for that pass with at least the workspace it needs: the host's (and the model's) by
  /// default.
  virtual bool conv_candidate_runs(kernels::host::conv_pass pass, const shape4& in,
                                   const conv_params& p, const conv_candidate& c);
  /// Records the algorithm `algorithm` names for `pass` in the backend's form (host: the
  /// choice; cuda: the cuDNN enum value).
  virtual void take_conv(kernels::host::conv_pass pass, const std::string& algorithm,
                         host_conv_choice& host, int& cuda_algo) const;

  /// DATA: copies the batch (made ahead by batches_, or made now) in on the compute stream,
  /// and starts making the next one; the buffer copied from stays untouched until the
  /// iteration's final synchronize.
  void copy_batch(const layer_launch& step);
  /// The batches copied to the device live in the device's page-locked memory (cuda).
  void pin_batches() noexcept { batches_.pin_on(*ctx_.dev); }
  /// The step's device pointers and the solver's updates (backward; none when the table
  /// defers them to gradient buckets).
  step_kernel_args marshal(const layer_launch& step) const;
  /// Appends the solver's updates of layer `id` to `a`.
  void add_updates(layer_id id, step_kernel_args& a) const;
  /// a's updates as the channel groups run them, group by group (split_step.hpp).
  static std::vector<layers::param_update> param_updates(const step_kernel_args& a);
  /// What a staged step's own copies move over the link, by direction (staged_directions):
  /// what the device's link holds while the step runs (null, host). Nothing for a step that
  /// stages nothing.
  layers::staged_link_bytes staged_link(const layer_launch& step) const;

  launcher_context ctx_;

 private:
  std::vector<float> staging_;  // labels of a batch kept in host memory (tiled segments)
  batch_prefetcher batches_;    // the batches copied to the device, the next made ahead
};

/// Settles `launcher`'s batch made ahead when it goes: held by run_iteration and evaluate,
/// whose data source the caller may destroy once they return (or throw).
class settled_batches {
 public:
  explicit settled_batches(kernel_launcher& launcher) noexcept : launcher_(launcher) {}
  ~settled_batches() { launcher_.settle_batches(); }
  settled_batches(const settled_batches&) = delete;
  settled_batches& operator=(const settled_batches&) = delete;

 private:
  kernel_launcher& launcher_;
};

/// The launcher for `context.dev`'s kind. Throws invalid_argument for a cuda device when
/// the engine was built without CUDA.
std::unique_ptr<kernel_launcher> make_kernel_launcher(const launcher_context& context);

/// Each backend's, one file each: host_kernel_launcher.cpp, null_kernel_launcher.cpp, and
/// cuda_kernel_launcher.cpp, or no_cuda_kernel_launcher.cpp (which throws) when CUDA was not
/// found: CMake picks the file, so no source tests MEMWEAVE_HAVE_CUDA.
std::unique_ptr<kernel_launcher> make_host_kernel_launcher(const launcher_context& context);
std::unique_ptr<kernel_launcher> make_null_kernel_launcher(const launcher_context& context);
std::unique_ptr<kernel_launcher> make_cuda_kernel_launcher(const launcher_context& context);

}  // namespace memweave
