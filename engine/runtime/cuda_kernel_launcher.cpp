// The cuda backend: the layers' cuDNN/cuBLAS steps (and the solver's updates) are enqueued
// on the compute stream directly from the step loop's thread, which holds the device
// current for the iteration (enter_iteration), instead of running as stream::launch host
// work (a host function may not call CUDA). The SOFTMAX step waits for the stream to hand
// back the loss. CONV runs the algorithms workspace selection chose among cuDNN's, measured
// once per shape on scratch memory from the heap.
//
// Compiled only when CMake finds CUDA (no_cuda_kernel_launcher.cpp stands in otherwise).
#include <cuda_runtime_api.h>

#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "device/cuda/cuda_check.hpp"
#include "device/cuda/cuda_device.hpp"
#include "engine/kernels/cuda/cuda_kernels.hpp"
#include "engine/layers/cuda_limits.hpp"
#include "engine/layers/cuda_split_step.hpp"
#include "engine/runtime/cuda_current_device.hpp"
#include "engine/runtime/cuda_fp16_codec.hpp"
#include "engine/runtime/kernel_launcher.hpp"
#include "memweave/core/error.hpp"

namespace memweave {
namespace k = kernels::host;
namespace kc = kernels::cuda;
namespace {

// The host and cuda pass enums list the passes in the same order.
static_assert(static_cast<int>(k::conv_pass::forward) == static_cast<int>(kc::conv_pass::forward) &&
              static_cast<int>(k::conv_pass::backward_data) ==
                  static_cast<int>(kc::conv_pass::backward_data) &&
              static_cast<int>(k::conv_pass::backward_filter) ==
                  static_cast<int>(kc::conv_pass::backward_filter));

kc::conv_pass to_cuda(k::conv_pass pass) noexcept {
  return static_cast<kc::conv_pass>(pass);
}

// "cudart 13000 cudnn 91000": the runtime's and cuDNN's versions, for cache fingerprints.
std::string cuda_library_versions() {
  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) (void)cudaGetLastError();
  return "cudart " + std::to_string(runtime) + " cudnn " + std::to_string(cudnnGetVersion());
}

// The cuDNN enum value named `name` (conv_algo_name) for `pass`.
int cuda_conv_algo(kc::conv_pass pass, const std::string& name) {
  for (int a = 0; a < 8; ++a) {
    if (name == kc::conv_algo_name(pass, a)) return a;
  }
  throw invalid_argument("'" + name + "' is not a cuDNN " + kc::to_string(pass) +
                         " convolution algorithm; use a name that workspace selection listed");
}

// Heap memory taken for a measurement, given back on scope exit. Only what a free run
// already holds is taken: the heap must not grow for scratch.
class heap_scratch {
 public:
  explicit heap_scratch(device_heap& heap) : heap_(heap) {}
  ~heap_scratch() {
    for (void* p : taken_) (void)heap_.deallocate(p);
  }
  heap_scratch(const heap_scratch&) = delete;
  heap_scratch& operator=(const heap_scratch&) = delete;
  // nullptr when 0 bytes or no free run holds them.
  void* take(std::size_t bytes) {
    if (bytes == 0 || bytes > heap_.largest_free_run()) return nullptr;
    void* p = heap_.try_allocate(bytes);
    if (p != nullptr) taken_.push_back(p);
    return p;
  }

 private:
  device_heap& heap_;
  std::vector<void*> taken_;
};

// cuDNN's candidates for one pass: the algorithms its heuristics list for the shape (cuDNN's
// names and workspace sizes), timed with cudnnFind*Ex on scratch buffers from the heap. The
// scratch is free heap memory: the measurement runs on the compute stream (the context's),
// after every kernel that used it before, and Find waits for it before it goes back. The
// executor has every whole-batch shape measured before it places anything
// (measure_conv_candidates), so that the scratch leaves the heap as it found it; a shape
// first met in a step (a micro-batch's) is measured there. When the heap cannot give the
// scratch, the heuristics' order stands in for time (seconds = rank).
std::vector<conv_candidate> cuda_conv_candidates(kc::cuda_kernel_context& ctx, device_heap& heap,
                                                 kc::conv_pass pass, const shape4& in,
                                                 const conv_params& p) {
  const std::vector<kc::conv_algo_perf>& listed = kc::conv_algorithms(ctx, pass, in, p);
  std::vector<conv_candidate> ranked;
  std::size_t workspace_max = 0;
  for (std::size_t i = 0; i < listed.size(); ++i) {
    ranked.push_back({kc::conv_algo_name(pass, listed[i].algo), listed[i].workspace_bytes,
                      static_cast<double>(i)});
    workspace_max = std::max(workspace_max, listed[i].workspace_bytes);
  }
  heap_scratch scratch(heap);
  const shape4 w{p.out_channels, in.c / p.groups, p.kernel_h, p.kernel_w};
  kc::conv_measure_buffers b;
  b.x = static_cast<float*>(scratch.take(in.bytes()));
  b.w = static_cast<float*>(scratch.take(w.bytes()));
  b.y = static_cast<float*>(scratch.take(p.output(in).bytes()));
  // The search's workspace is capped at what the heap has free (never more than the budget):
  // the algorithms that fit it are measured, and only they are this shape's candidates.
  const std::size_t free_run = heap.largest_free_run();
  workspace_max = std::min(workspace_max, free_run - free_run % heap.round_up(1));
  b.workspace = scratch.take(workspace_max);
  b.workspace_bytes = workspace_max;
  if (b.x == nullptr || b.w == nullptr || b.y == nullptr ||
      (workspace_max != 0 && b.workspace == nullptr)) {
    return ranked;
  }
  const std::vector<kc::conv_algo_perf> measured = kc::measure_conv_algorithms(ctx, pass, in, p, b);
  std::vector<conv_candidate> timed;
  bool has_zero = false;
  for (const kc::conv_algo_perf& e : listed) {
    for (const kc::conv_algo_perf& m : measured) {
      if (m.algo != e.algo) continue;
      const std::size_t bytes = std::max(e.workspace_bytes, m.workspace_bytes);
      timed.push_back({kc::conv_algo_name(pass, e.algo), bytes, 1e-3 * m.time_ms});
      has_zero = has_zero || bytes == 0;
    }
  }
  // Selection needs an algorithm without workspace; should Find have failed it, rank.
  return has_zero ? timed : ranked;
}

class cuda_kernel_launcher final : public kernel_launcher {
 public:
  explicit cuda_kernel_launcher(const launcher_context& c)
      : kernel_launcher(c), ordinal_(stream_device(compute_handle())) {
    // Before any step: a layer cuDNN refuses would otherwise fail the first iteration.
    layers::check_cuda_runs(*ctx_.net);
    const current_device scope(ordinal_);
    context_ = std::make_unique<kc::cuda_kernel_context>(compute_handle());
    pin_batches();
    // A split BN step's sums over its micro-batches, for the widest BN: taken now, not in
    // the middle of an iteration, where a device the heap has filled would fail it.
    std::size_t widest = 0;
    for (const layer& l : ctx_.net->layers()) {
      if (l.type == layer_type::bn)
        widest = std::max(widest, static_cast<std::size_t>(l.output_shape.c));
    }
    if (widest != 0) (void)context_->sums_scratch(2 * widest);
  }
  // The kernels' context is destroyed with its device current.
  ~cuda_kernel_launcher() override {
    try {
      const current_device scope(ordinal_);
      context_.reset();
    } catch (...) {
      context_.reset();  // the device cannot be made current: release the handles anyway
    }
  }

  // Measured times hold for one device and one cuDNN/CUDA pair: a library upgrade re-measures.
  std::string fingerprint() const override {
    // Deterministic mode lists other candidates: its timings are kept apart.
    return "cuda " + ctx_.dev->name() + " " + cuda_library_versions() +
           (context_->deterministic() ? " cudnn-deterministic" : "");
  }
  // The first iteration loads the kernels' modules (lazily, at first launch) and builds
  // cuDNN's plans: on an H200 its steps took 2.7x (ResNet-50 b64, 244 ms) to 3.9x (VGG-16
  // b32, 180 ms) the time of the later ones, and a schedule re-planned from them counted
  // on compute that is not there to hide the copies.
  int cold_iterations() const override { return 1; }
  // The micro-steps' copies are cudaMemcpyAsync in stream order: from page-locked memory.
  bool pins_staging() const override { return true; }
  void prepare_fp16_staging() override {
    const current_device scope(ordinal_);
    (void)context_->fp16_links();
  }
  // Pieces of 8 MiB over TBB's workers: page-locked memory both sides, the cores otherwise
  // idle while the GPU waits for the staged step this copy is for.
  void copy_host_memory(void* dst, const void* src, std::size_t bytes) const override {
    constexpr std::size_t piece = std::size_t{8} << 20;
    const std::size_t pieces = (bytes + piece - 1) / piece;
    if (pieces < 2) {
      std::memcpy(dst, src, bytes);
      return;
    }
    tbb::parallel_for(std::size_t{0}, pieces, [&](std::size_t i) {
      const std::size_t at = i * piece;
      std::memcpy(static_cast<char*>(dst) + at, static_cast<const char*>(src) + at,
                  std::min(piece, bytes - at));
    });
  }
  // The kernels are enqueued from the calling thread: their device is current meanwhile.
  std::unique_ptr<launch_scope> enter_iteration() override {
    return std::make_unique<current_device>(ordinal_);
  }
  std::function<std::unique_ptr<fp16_codec>(device&)> fp16_codec_factory() const override {
    return [](device& d) { return make_cuda_fp16_codec(d); };
  }

  void measure_conv_candidates(conv_workspace_selector& selector, bool forward_only) override {
    const current_device scope(ordinal_);
    fill_conv_candidates(selector, forward_only);
  }

  // A no-workspace algorithm always runs: the fastest of cuDNN's.
  conv_step no_workspace_conv(conv_workspace_selector& selector, const layer& l, bool forward,
                              bool input_has_gradient) override {
    return choose_conv(selector, l, forward, input_has_gradient, 0);
  }

  void launch(const layer_launch& step) override {
    const layer& l = *step.l;
    if (step.fused_act != nullptr) {
      throw std::logic_error("cuda launcher: a fused BN+ACT replay of " + l.name +
                             " was asked for, which this backend does not run (fuses_bn_act)");
    }
    if (l.type == layer_type::data) {
      // Its backward has work only as a gradient bucket's update step (launch_updates).
      if (step.forward) copy_batch(step);
      return;
    }
    // Enqueued from this thread, in the stream's order (the loss read back by SOFTMAX).
    const step_kernel_args a = marshal(step);
    kc::cuda_kernel_context& ctx = *context_;
    layers::cuda_conv_choice choice;
    if (l.type == layer_type::conv) {
      choice = {step.conv->cuda_forward, step.conv->cuda_data, step.conv->cuda_filter};
    }
    if (step.channel_parts > 1) {
      // The solver's updates run on each group's rows (its weights may be staged: only a
      // group's rows are on the device).
      const sgd_options& o = ctx_.sgd;
      layers::run_cuda_channel_split_step(
          ctx, a.io, step.forward, step.channel_parts, step.parts, step.staged, choice,
          param_updates(a),
          [&](std::size_t count, const float* g, float* w, float* v) {
            kc::sgd_update(ctx, o.learning_rate, o.momentum, o.weight_decay, count, g, w, v);
          },
          step.fp16_error);
      return;
    }
    if (step.parts > 1 || !step.staged.empty()) {
      layers::run_cuda_split_step(ctx, a.io, step.forward, step.parts, step.staged, choice,
                                  step.fp16_error);
    } else if (l.type == layer_type::conv) {
      const conv_step& c = *step.conv;
      layers::run_cuda_conv(ctx, a.io, step.forward, {c.cuda_forward, c.cuda_data, c.cuda_filter});
    } else {
      const layers::cuda_layer_steps& steps = layers::cuda_layer_steps_for(l.type);
      (step.forward ? steps.forward : steps.backward)(ctx, a.io);
    }
    run_updates(a);
  }

  void launch_updates(std::span<const layer_id> layers) override {
    step_kernel_args a;
    for (layer_id id : layers) add_updates(id, a);
    run_updates(a);
  }

 protected:
  std::string conv_backend() const override { return "cuda"; }
  std::vector<conv_candidate> conv_candidates(k::conv_pass pass, const shape4& in,
                                              const conv_params& p) override {
    return cuda_conv_candidates(*context_, *ctx_.heap, to_cuda(pass), in, p);
  }
  bool conv_candidate_runs(k::conv_pass pass, const shape4& in, const conv_params& p,
                           const conv_candidate& c) override {
    const current_device scope(ordinal_);
    for (const kc::conv_algo_perf& e : kc::conv_algorithms(*context_, to_cuda(pass), in, p)) {
      if (kc::conv_algo_name(to_cuda(pass), e.algo) == c.algorithm) {
        return c.workspace_bytes >= e.workspace_bytes;
      }
    }
    return false;
  }

  void take_conv(k::conv_pass pass, const std::string& algorithm, host_conv_choice&,
                 int& cuda_algo) const override {
    cuda_algo = cuda_conv_algo(to_cuda(pass), algorithm);
  }

 private:
  void run_updates(const step_kernel_args& a) {
    kc::cuda_kernel_context& ctx = *context_;
    const sgd_options& o = ctx_.sgd;
    for (std::size_t i = 0; i < a.updates.size(); ++i) {
      kc::sgd_update(ctx, o.learning_rate, o.momentum, o.weight_decay, a.counts[i],
                     a.updates[i].first, a.updates[i].second, a.momenta[i]);
    }
  }

  cudaStream_t compute_handle() const {
    return static_cast<cudaStream_t>(ctx_.dev->get_stream(stream_role::compute).native_handle());
  }

  int ordinal_ = 0;
  std::unique_ptr<kc::cuda_kernel_context> context_;
};

}  // namespace

std::unique_ptr<kernel_launcher> make_cuda_kernel_launcher(const launcher_context& context) {
  return std::make_unique<cuda_kernel_launcher>(context);
}

}  // namespace memweave
