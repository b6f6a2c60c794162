// The null backend: nothing is read or written; each step is charged the cost model's time
// on the compute stream's simulated clock, and CONV candidates carry modelled seconds, so
// `plan` decides as `train` would with the same timings.
#include <string>

#include "engine/runtime/executor_staging.hpp"
#include "engine/runtime/kernel_launcher.hpp"
#include "engine/runtime/model_time.hpp"

namespace memweave {
namespace k = kernels::host;
namespace {

class null_kernel_launcher final : public kernel_launcher {
 public:
  using kernel_launcher::kernel_launcher;

  std::string fingerprint() const override { return "null model"; }
  bool measures_convolutions() const override { return false; }
  // A fused replay is charged BN's forward (its traffic: x in, one tensor out), as `launch`
  // does for a BN step.
  bool fuses_bn_act() const override { return true; }

  // The updates are element-wise and cheap; the model charges them to the backward steps.
  void launch_updates(std::span<const layer_id>) override {}

  void launch(const layer_launch& step) override {
    const layer& l = *step.l;
    const double compute_s = l.type == layer_type::conv ? step.conv->seconds : -1;
    // Staged micro-tensors cross the link between the micro-steps, each micro-batch's copies
    // out beside the next one's copies in (the host backend copies them in the step's own
    // work, the two directions at once), sharing the link with the swap streams' copies.
    const bool input_grad = first_input_has_grad(*ctx_.table, l);
    const double staging_s =
        static_cast<double>(layers::staged_critical_bytes(l.type, step.forward, step.staged,
                                                          step.parts, input_grad, step.inference)) /
        ctx_.model.link_bytes_per_s;
    const layers::staged_link_bytes link = staged_link(step);
    // A split step's kernels: its micro-steps, each reading the fixed tensors again.
    const double kernels_s =
        split_model_seconds(ctx_.model, *ctx_.table, *ctx_.memory, l, step.forward, step.accesses,
                            step.parts, step.channel_parts, compute_s);
    ctx_.dev->get_stream(stream_role::compute)
        .launch_with_link({}, kernels_s + staging_s, link.to_device, link.to_host);
  }

 protected:
  std::string conv_backend() const override { return "model"; }
  std::vector<conv_candidate> conv_candidates(k::conv_pass pass, const shape4& in,
                                              const conv_params& p) override {
    return model_host_conv(pass, in, p, ctx_.model.flops);
  }
};

}  // namespace

std::unique_ptr<kernel_launcher> make_null_kernel_launcher(const launcher_context& context) {
  return std::make_unique<null_kernel_launcher>(context);
}

}  // namespace memweave
