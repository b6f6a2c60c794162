// Split execution of a layer step; see split_step.hpp.
#include "engine/layers/split_step.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace memweave::layers {
namespace k = kernels::host;

std::vector<std::int64_t> micro_batch_bounds(std::int64_t batch, int parts) {
  const std::int64_t n = std::clamp<std::int64_t>(parts, 1, std::max<std::int64_t>(batch, 1));
  std::vector<std::int64_t> bounds{0};
  for (std::int64_t i = 0; i < n; ++i) {
    bounds.push_back(bounds.back() + batch / n + (i < batch % n ? 1 : 0));
  }
  return bounds;
}

namespace {

// The step_io of images [b, e): every batch-shaped pointer moved to image b, every shape's
// n set to e - b; parameters, their gradients and per-channel aux tensors unchanged.
step_io slice(const step_io& io, std::int64_t b, std::int64_t e, bool forward) {
  step_io s = io;
  const auto at = [b](const float* p, const shape4& shape) {
    return p == nullptr ? p : p + b * shape.per_image();
  };
  for (std::size_t i = 0; i < s.input_shapes.size(); ++i) {
    if (i < s.inputs.size()) s.inputs[i] = at(io.inputs[i], io.input_shapes[i]);
    if (i < s.input_grads.size()) {
      s.input_grads[i].data = const_cast<float*>(at(io.input_grads[i].data, io.input_shapes[i]));
    }
    s.input_shapes[i].n = e - b;
  }
  const shape4& out = io.l->output_shape;
  s.output = const_cast<float*>(at(io.output, out));
  s.output_grad = at(io.output_grad, out);
  if (io.labels != nullptr) s.labels = io.labels + b;
  if (io.l->type == layer_type::dropout) s.aux[0] = const_cast<float*>(at(io.aux[0], out));
  s.first_image = b;
  s.accumulate_param_grads = !forward && b > 0;
  return s;
}

// The micro-steps of one split step: each micro-batch's step_io, its staged tensors' slices
// copied into their micro buffers before it runs and, after the step's last pass, back out.
class micro_steps {
 public:
  micro_steps(const step_io& io, bool forward, int parts, std::span<const staged_tensor> staged)
      : io_(io),
        forward_(forward),
        staged_(staged),
        bounds_(micro_batch_bounds(io.input_shapes[0].n, parts)) {}

  // Runs f(micro-batch io) for each micro-batch in order; `last_pass`: the step is done with
  // them afterwards (what it wrote is copied out).
  template <class F>
  void each(F&& f, bool last_pass = true) const {
    for (std::size_t i = 0; i + 1 < bounds_.size(); ++i) {
      const std::int64_t b = bounds_[i], e = bounds_[i + 1];
      step_io s = slice(io_, b, e, forward_);
      if (staged_.empty()) {
        f(s);
        continue;
      }
      stage_in(s, b, e);
      f(s);
      if (last_pass) stage_out(b, e);
    }
  }

 private:
  static std::size_t bytes(const staged_tensor& t, std::int64_t images) {
    return static_cast<std::size_t>(images * t.per_image) * sizeof(float);
  }

  // Where a pointer into a staged tensor's slice of images [b, e) lands in its micro buffer.
  float* remap(const float* p, std::int64_t b) const {
    const auto q = reinterpret_cast<std::uintptr_t>(p);
    for (const staged_tensor& t : staged_) {
      const auto lo = reinterpret_cast<std::uintptr_t>(t.whole);
      if (p != nullptr && q >= lo && q < lo + bytes(t, t.n)) {
        return t.micro + (p - t.whole) - b * t.per_image;
      }
    }
    return const_cast<float*>(p);
  }

  void stage_in(step_io& s, std::int64_t b, std::int64_t e) const {
    for (const staged_tensor& t : staged_) {
      if (t.read) std::memcpy(t.micro, t.whole + b * t.per_image, bytes(t, e - b));
    }
    for (const float*& p : s.inputs) p = remap(p, b);
    for (auto& g : s.input_grads) g.data = remap(g.data, b);
    for (float*& p : s.aux) p = remap(p, b);
    s.output = remap(s.output, b);
    s.output_grad = remap(s.output_grad, b);
    s.labels = remap(s.labels, b);
  }

  void stage_out(std::int64_t b, std::int64_t e) const {
    for (const staged_tensor& t : staged_) {
      if (t.written) std::memcpy(t.whole + b * t.per_image, t.micro, bytes(t, e - b));
    }
  }

  const step_io& io_;
  bool forward_;
  std::span<const staged_tensor> staged_;
  std::vector<std::int64_t> bounds_;
};

void bn_forward(const k::kernel_context& ctx, const step_io& io, const micro_steps& steps) {
  const auto& p = std::get<bn_params>(io.l->params);
  const shape4& in = io.input_shapes[0];
  const auto C = static_cast<std::size_t>(in.c);
  std::vector<k::exact_sum> sum(C), sq(C);
  std::vector<double> mean(C);
  steps.each(
      [&](const step_io& s) { k::bn_sum_images(ctx, s.input_shapes[0], s.inputs[0], sum.data()); },
      false);
  const std::int64_t m = in.n * in.h * in.w;
  k::bn_mean(in.c, m, sum.data(), mean.data());
  steps.each(
      [&](const step_io& s) {
        k::bn_sum_squared_deviations(ctx, s.input_shapes[0], s.inputs[0], mean.data(), sq.data());
      },
      false);
  k::bn_finish_statistics(in.c, m, p, sq.data(), mean.data(), io.aux[0], io.aux[1]);
  steps.each([&](const step_io& s) {
    k::bn_normalize(ctx, s.input_shapes[0], s.inputs[0], io.params[0], io.params[1], io.aux[0],
                    io.aux[1], s.output);
  });
  if (io.update_running_stats) {
    k::bn_update_running(in, p, io.aux[0], io.aux[1], io.params[2], io.params[3]);
  }
}

void bn_backward(const k::kernel_context& ctx, const step_io& io, const micro_steps& steps) {
  const shape4& in = io.input_shapes[0];
  const auto C = static_cast<std::size_t>(in.c);
  std::vector<double> sdy(C, 0.0), sdy_xhat(C, 0.0);
  const bool dx = io.input_grads[0].data != nullptr;
  steps.each(
      [&](const step_io& s) {
        k::bn_backward_sums(ctx, s.input_shapes[0], s.inputs[0], io.aux[0], io.aux[1],
                            s.output_grad, sdy.data(), sdy_xhat.data());
      },
      !dx);
  for (std::size_t c = 0; c < C; ++c) {
    io.param_grads[1][c] = static_cast<float>(sdy[c]);
    io.param_grads[0][c] = static_cast<float>(sdy_xhat[c]);
  }
  if (!dx) return;
  steps.each([&](const step_io& s) {
    k::bn_backward_data(ctx, s.input_shapes[0], in.n * in.h * in.w, s.inputs[0], io.aux[0],
                        io.aux[1], io.params[0], sdy.data(), sdy_xhat.data(), s.output_grad,
                        s.input_grads[0].data, s.input_grads[0].accumulate);
  });
}

void loss_forward(const k::kernel_context& ctx, const step_io& io, const micro_steps& steps) {
  double total = 0.0;
  steps.each([&](const step_io& s) {
    k::softmax_loss_add(ctx, s.input_shapes[0], s.inputs[0], s.labels, s.output, total);
  });
  if (io.loss != nullptr) *io.loss = total / static_cast<double>(io.input_shapes[0].n);
}

void loss_backward(const k::kernel_context& ctx, const step_io& io, const micro_steps& steps) {
  if (io.input_grads[0].data == nullptr) return;
  steps.each([&](const step_io& s) {
    k::softmax_loss_backward(ctx, s.input_shapes[0], s.output, s.labels, s.input_grads[0].data,
                             s.input_grads[0].accumulate, io.input_shapes[0].n);
  });
}

}  // namespace

void run_split_step(const k::kernel_context& ctx, const step_io& io, bool forward, int parts,
                    std::span<const staged_tensor> staged) {
  const layer_steps& steps = layer_steps_for(io.l->type);
  const step_fn fn = forward ? steps.forward : steps.backward;
  if ((parts <= 1 && staged.empty()) || io.l->type == layer_type::data || io.input_shapes.empty()) {
    if (fn != nullptr) fn(ctx, io);
    return;
  }
  const micro_steps micro(io, forward, parts, staged);
  if (io.l->type == layer_type::bn) {
    forward ? bn_forward(ctx, io, micro) : bn_backward(ctx, io, micro);
    return;
  }
  if (io.l->type == layer_type::softmax_loss) {
    forward ? loss_forward(ctx, io, micro) : loss_backward(ctx, io, micro);
    return;
  }
  if (fn != nullptr) micro.each([&](const step_io& s) { fn(ctx, s); });
}

std::size_t staged_copy_bytes(layer_type type, bool forward,
                              std::span<const staged_tensor> staged) noexcept {
  const std::size_t passes = type == layer_type::bn ? (forward ? 3 : 2) : 1;
  std::size_t b = 0;
  for (const staged_tensor& t : staged) {
    const std::size_t whole = static_cast<std::size_t>(t.n * t.per_image) * sizeof(float);
    if (t.read) b += passes * whole;
    if (t.written) b += whole;
  }
  return b;
}

namespace {

// One output-channel group's view of a CONV or FC step: channels [k0, k1) of K, each
// `plane` floats per image in y and dy, `wrow` weights per channel.
struct channel_group {
  std::int64_t k0, k1, K, plane, wrow, n;
  std::int64_t size() const { return k1 - k0; }
};

// Copies the group's channels of every image between the whole NCHW tensor and a packed
// (n, k1 - k0, plane) buffer.
void gather(const channel_group& g, const float* whole, float* packed) {
  for (std::int64_t i = 0; i < g.n; ++i) {
    std::memcpy(packed + i * g.size() * g.plane, whole + (i * g.K + g.k0) * g.plane,
                static_cast<std::size_t>(g.size() * g.plane) * sizeof(float));
  }
}
void scatter(const channel_group& g, const float* packed, float* whole) {
  for (std::int64_t i = 0; i < g.n; ++i) {
    std::memcpy(whole + (i * g.K + g.k0) * g.plane, packed + i * g.size() * g.plane,
                static_cast<std::size_t>(g.size() * g.plane) * sizeof(float));
  }
}

void conv_group(const k::kernel_context& ctx, const step_io& io, bool forward,
                const channel_group& g, float* dx, std::vector<float>& buf) {
  conv_params p = std::get<conv_params>(io.l->params);
  p.out_channels = g.size();
  const shape4& in = io.input_shapes[0];
  const float* w = io.params[0] + g.k0 * g.wrow;
  buf.resize(static_cast<std::size_t>(g.n * g.size() * g.plane));
  if (forward) {
    const k::conv_config cfg{io.algo, io.chunk, io.workspace, io.workspace_bytes};
    k::conv_forward(ctx, cfg, in, p, io.inputs[0], w, p.bias ? io.params[1] + g.k0 : nullptr,
                    buf.data());
    scatter(g, buf.data(), io.output);
    return;
  }
  gather(g, io.output_grad, buf.data());
  if (dx != nullptr) {
    const k::conv_config cfg{io.data_algo, io.data_chunk, io.workspace, io.workspace_bytes};
    if (g.k0 == 0) {
      k::conv_backward_data(ctx, cfg, in, p, w, buf.data(), dx, false);
    } else {
      k::conv_backward_data_extend(ctx, cfg, in, p, w, buf.data(), dx);
    }
  }
  const k::conv_config cfg{io.filter_algo, io.filter_chunk, io.workspace, io.workspace_bytes};
  k::conv_backward_filter(ctx, cfg, in, p, io.inputs[0], buf.data(),
                          io.param_grads[0] + g.k0 * g.wrow,
                          p.bias ? io.param_grads[1] + g.k0 : nullptr, io.accumulate_param_grads);
}

void fc_group(const k::kernel_context& ctx, const step_io& io, bool forward, const channel_group& g,
              float* dx, std::vector<float>& buf) {
  fc_params p = std::get<fc_params>(io.l->params);
  p.out_features = g.size();
  const shape4& in = io.input_shapes[0];
  const float* w = io.params[0] + g.k0 * g.wrow;
  buf.resize(static_cast<std::size_t>(g.n * g.size()));
  if (forward) {
    k::fc_forward(ctx, in, p, io.inputs[0], w, p.bias ? io.params[1] + g.k0 : nullptr, buf.data());
    scatter(g, buf.data(), io.output);
    return;
  }
  gather(g, io.output_grad, buf.data());
  if (dx != nullptr) {
    if (g.k0 == 0) {
      k::fc_backward_data(ctx, in, p, w, buf.data(), dx, false);
    } else {
      k::fc_backward_data_extend(ctx, in, p, w, buf.data(), dx);
    }
  }
  k::fc_backward_weights(ctx, in, p, io.inputs[0], buf.data(), io.param_grads[0] + g.k0 * g.wrow,
                         p.bias ? io.param_grads[1] + g.k0 : nullptr, io.accumulate_param_grads);
}

}  // namespace

void run_channel_split_step(const k::kernel_context& ctx, const step_io& io, bool forward,
                            int parts) {
  const layer& l = *io.l;
  const bool conv = l.type == layer_type::conv && std::get<conv_params>(l.params).groups == 1;
  if (parts <= 1 || !(conv || l.type == layer_type::fc)) {
    run_split_step(ctx, io, forward, 1);
    return;
  }
  const shape4& in = io.input_shapes[0];
  const shape4& out = l.output_shape;
  channel_group g{0, 0, out.c, out.h * out.w, 0, in.n};
  g.wrow = conv ? in.c * std::get<conv_params>(l.params).kernel_h *
                      std::get<conv_params>(l.params).kernel_w
                : in.per_image();
  // dx: the groups write and continue the sum in dx itself, or, when the step adds to a
  // gradient other consumers wrote, in a buffer added to dx at the end, as the whole
  // kernel adds its finished sum (dx[i] + g[i]).
  const k::grad_out dx = forward || io.input_grads.empty() ? k::grad_out{} : io.input_grads[0];
  std::vector<float> sum(dx.data != nullptr && dx.accumulate ? static_cast<std::size_t>(in.count())
                                                             : 0);
  float* target = dx.accumulate ? sum.data() : dx.data;
  std::vector<float> buf;
  const std::vector<std::int64_t> bounds = micro_batch_bounds(g.K, parts);
  for (std::size_t i = 0; i + 1 < bounds.size(); ++i) {
    g.k0 = bounds[i];
    g.k1 = bounds[i + 1];
    conv ? conv_group(ctx, io, forward, g, target, buf)
         : fc_group(ctx, io, forward, g, target, buf);
  }
  if (dx.data != nullptr && dx.accumulate) {
    for (std::size_t i = 0; i < sum.size(); ++i) dx.data[i] += sum[i];
  }
}

}  // namespace memweave::layers
