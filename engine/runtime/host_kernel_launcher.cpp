// The host backend: each layer step runs as host work on the compute stream's worker thread,
// inside the kernel context's arena, so the step loop's own work overlaps it. CONV timings
// are measured once per shape, with the stream drained (queued kernels would share the
// cores and skew them).
#include <algorithm>
#include <string>
#include <vector>

#include "engine/kernels/host/act.hpp"
#include "engine/kernels/host/bn.hpp"
#include "engine/kernels/host/conv.hpp"
#include "engine/kernels/host/kernel_context.hpp"
#include "engine/layers/split_step.hpp"
#include "engine/runtime/kernel_launcher.hpp"

namespace memweave {
namespace k = kernels::host;
namespace {

class host_kernel_launcher final : public kernel_launcher {
 public:
  explicit host_kernel_launcher(const launcher_context& c)
      : kernel_launcher(c), context_(c.threads) {}

  std::string fingerprint() const override {
    return "host threads=" + std::to_string(context_.threads());
  }
  // The CPU kernels' GEMMs would hang, not fail, where OpenBLAS cannot get its buffers.
  void check_ready() const override { context_.check_blas_address_space(); }

  bool fuses_bn_act() const override { return true; }

  void launch(const layer_launch& step) override {
    if (step.fused_act != nullptr) {
      launch_fused(step);
      return;
    }
    if (step.l->type == layer_type::data) {
      // Its backward has work only as a gradient bucket's update step (launch_updates).
      if (step.forward) copy_batch(step);
      return;
    }
    const k::kernel_context* context = &context_;
    const sgd_options* sgd = &ctx_.sgd;
    const bool forward = step.forward;
    const int parts = step.parts;
    std::vector<layers::staged_tensor> staged(step.staged.begin(), step.staged.end());
    if (step.channel_parts > 1) {
      launch_channel_groups(step, std::move(staged));
      return;
    }
    const layers::staged_link_bytes link = staged_link(step);
    ctx_.dev->get_stream(stream_role::compute)
        .launch_with_link(
            [forward, parts, context, sgd, a = marshal(step), staged = std::move(staged),
             sink = step.fp16_error] {
              double error = 0;
              layers::run_split_step(*context, a.io, forward, parts, staged, &error);
              if (sink != nullptr) *sink = std::max(*sink, error);
              for (std::size_t i = 0; i < a.updates.size(); ++i) {
                sgd_update(*context, *sgd, a.counts[i], a.updates[i].first, a.updates[i].second,
                           a.momenta[i]);
              }
            },
            0.0, link.to_device, link.to_host);
  }

  // A CONV/FC step in output-channel groups: the solver's updates run on each group's rows
  // (its weights may be staged: only a group's rows are on the device).
  void launch_channel_groups(const layer_launch& step, std::vector<layers::staged_tensor> staged) {
    const k::kernel_context* context = &context_;
    const sgd_options* sgd = &ctx_.sgd;
    step_kernel_args a = marshal(step);
    std::vector<layers::param_update> updates = param_updates(a);
    const layers::staged_link_bytes link = staged_link(step);
    ctx_.dev->get_stream(stream_role::compute)
        .launch_with_link(
            [forward = step.forward, groups = step.channel_parts, parts = step.parts, context, sgd,
             io = std::move(a.io), staged = std::move(staged), updates = std::move(updates)] {
              layers::run_channel_split_step(
                  *context, io, forward, groups, parts, staged, updates,
                  [&](std::size_t count, const float* g, float* w, float* v) {
                    sgd_update(*context, *sgd, count, g, w, v);
                  });
            },
            0.0, link.to_device, link.to_host);
  }

  // BN's forward from its saved statistics, the ACT applied as it writes the ACT's output;
  // or a CONV's forward into the ACT's output, the ACT then applied in place (act_forward
  // allows y == x: the same bits as the ACT reading the CONV's output).
  void launch_fused(const layer_launch& step) {
    if (step.l->type == layer_type::conv) {
      launch_fused_conv(step);
      return;
    }
    const layer& bn = *step.l;
    const tensor_table& table = *ctx_.table;
    auto f = [this](tensor_id t) { return static_cast<float*>(ctx_.device_ptr(t)); };
    const layer_tensors& lt = table.of(bn.id);
    const shape4 in = (*ctx_.net)[bn.inputs[0]].output_shape;
    const float* x = f(table.of(bn.inputs[0]).output);
    const float *gamma = f(lt.params[0]), *beta = f(lt.params[1]);
    const float *mean = f(lt.aux[0]), *invstd = f(lt.aux[1]);
    float* z = f(table.of(step.fused_act->id).output);
    const bn_params p = std::get<bn_params>(bn.params);
    const act_params act = std::get<act_params>(step.fused_act->params);
    const k::kernel_context* context = &context_;
    ctx_.dev->get_stream(stream_role::compute).launch([=] {
      k::bn_act_normalize(*context, in, p, x, gamma, beta, mean, invstd, act, z);
    });
  }

  void launch_fused_conv(const layer_launch& step) {
    // The CONV's pointers and the algorithm its step ran, as its own launch has them (its
    // output, not made, is not among what the kernels touch).
    step_kernel_args a = marshal(step);
    float* z = static_cast<float*>(ctx_.device_ptr(ctx_.table->of(step.fused_act->id).output));
    const act_params act = std::get<act_params>(step.fused_act->params);
    const k::kernel_context* context = &context_;
    ctx_.dev->get_stream(stream_role::compute).launch([context, act, z, io = std::move(a.io)] {
      const conv_params& p = std::get<conv_params>(io.l->params);
      const k::conv_config cfg{io.algo, io.chunk, io.workspace, io.workspace_bytes};
      k::conv_forward(*context, cfg, io.input_shapes[0], p, io.inputs[0], io.params[0],
                      p.bias ? io.params[1] : nullptr, z);
      k::act_forward(*context, io.l->output_shape, act, z, z);
    });
  }

  void launch_updates(std::span<const layer_id> layers) override {
    step_kernel_args a;
    for (layer_id id : layers) add_updates(id, a);
    const k::kernel_context* context = &context_;
    const sgd_options* sgd = &ctx_.sgd;
    ctx_.dev->get_stream(stream_role::compute).launch([context, sgd, a = std::move(a)] {
      for (std::size_t i = 0; i < a.updates.size(); ++i) {
        sgd_update(*context, *sgd, a.counts[i], a.updates[i].first, a.updates[i].second,
                   a.momenta[i]);
      }
    });
  }

 protected:
  std::string conv_backend() const override { return "host"; }
  std::vector<conv_candidate> conv_candidates(k::conv_pass pass, const shape4& in,
                                              const conv_params& p) override {
    // Measure alone: kernels still queued would share the cores and skew the times.
    ctx_.dev->get_stream(stream_role::compute).synchronize();
    return measure_host_conv(context_, pass, in, p);
  }

 private:
  k::kernel_context context_;
};

}  // namespace

std::unique_ptr<kernel_launcher> make_host_kernel_launcher(const launcher_context& context) {
  return std::make_unique<host_kernel_launcher>(context);
}

}  // namespace memweave
