// Split execution of a layer step on the GPU; see cuda_split_step.hpp.
//
// Invariants: everything is enqueued on ctx's stream from this thread, in the order
// micro_steps decides (copies in, the micro-step's kernels, copies out), so a micro buffer
// is reused only after the work that read it; the sums that cross micro-batches live in
// ctx.sums_scratch() for the step's duration (one stream: the next step's sums come after).
#include "engine/layers/cuda_split_step.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "device/cuda/cuda_check.hpp"
#include "engine/kernels/cuda/cuda_kernels.hpp"
#include "engine/kernels/cuda/custom_kernels.hpp"
#include "engine/layers/micro_steps.hpp"
#include "memweave/core/error.hpp"

namespace memweave::layers {

namespace kc = kernels::cuda;

namespace {

// A staged tensor's slices cross as cudaMemcpyAsync on the step's stream: from and to
// page-locked host memory they run in stream order, after the kernels before them. A
// micro-batch's copies out and the next one's copies in (of other tensors) run at once on the
// context's two link streams, forked from the step's stream and joined back to it.
// An fp16 micro-tensor's slice crosses as half the bytes, chunk by chunk through the context's
// fp16 buffers (fp16_links: one per direction, so the copies out on one link stream and in on
// the other never share one; in stream order a chunk's copy waits for the kernel that used the
// buffer before), expanded or rounded by the codec's kernels, which give the host's bits.
class cuda_copier final : public slice_copier {
 public:
  cuda_copier(kc::cuda_kernel_context& ctx, std::span<const staged_tensor> staged)
      : ctx_(ctx), stream_(ctx.stream()) {
    for (const staged_tensor& t : staged) check(t);
    if (std::any_of(staged.begin(), staged.end(), [](const staged_tensor& t) { return t.fp16; })) {
      fp16_ = &ctx.fp16_links();
      MEMWEAVE_CUDA_CHECK(cudaMemsetAsync(fp16_->error, 0, sizeof(unsigned), stream_));
    }
  }

  void copy_in(const staged_tensor& t, std::int64_t from, std::int64_t images) override {
    if (t.fp16) {
      const auto* whole = reinterpret_cast<const std::uint16_t*>(t.whole) + from * t.per_image;
      each_chunk(images * t.per_image, [&](std::int64_t at, std::int64_t n) {
        MEMWEAVE_CUDA_CHECK(
            cudaMemcpyAsync(fp16_->in, whole + at, halves(n), cudaMemcpyHostToDevice, stream_));
        kc::detail::launch_fp16_decode(stream_, n, fp16_->in, t.micro + at);
      });
      return;
    }
    MEMWEAVE_CUDA_CHECK(cudaMemcpyAsync(t.micro, t.whole + from * t.per_image, bytes(t, images),
                                        cudaMemcpyHostToDevice, stream_));
  }
  void copy_out(const staged_tensor& t, std::int64_t from, std::int64_t images) override {
    if (t.fp16) {
      auto* whole = reinterpret_cast<std::uint16_t*>(t.whole) + from * t.per_image;
      each_chunk(images * t.per_image, [&](std::int64_t at, std::int64_t n) {
        kc::detail::launch_fp16_encode(stream_, n, t.micro + at, fp16_->out, fp16_->error);
        MEMWEAVE_CUDA_CHECK(
            cudaMemcpyAsync(whole + at, fp16_->out, halves(n), cudaMemcpyDeviceToHost, stream_));
      });
      return;
    }
    MEMWEAVE_CUDA_CHECK(cudaMemcpyAsync(t.whole + from * t.per_image, t.micro, bytes(t, images),
                                        cudaMemcpyDeviceToHost, stream_));
  }

  // Raises *sink to the largest relative error of the values rounded on their way out, once
  // the step's copies are done: the word comes back through pinned memory and a host function
  // reads it, both in stream order (the next step's memset of the word comes after them).
  void report_fp16_error(double* sink) {
    if (fp16_ == nullptr || sink == nullptr) return;
    MEMWEAVE_CUDA_CHECK(cudaMemcpyAsync(fp16_->error_host, fp16_->error, sizeof(unsigned),
                                        cudaMemcpyDeviceToHost, stream_));
    auto raise = std::make_unique<error_sink>(error_sink{fp16_->error_host, sink});
    MEMWEAVE_CUDA_CHECK(cudaLaunchHostFunc(stream_, &error_sink::run, raise.get()));
    (void)raise.release();  // the host function owns it now
  }
  void both(const std::function<void()>& outs, const std::function<void()>& ins) override {
    const kc::cuda_kernel_context::link_streams& l = ctx_.side_links();
    const cudaStream_t main = ctx_.stream();
    MEMWEAVE_CUDA_CHECK(cudaEventRecord(l.forked, main));
    MEMWEAVE_CUDA_CHECK(cudaStreamWaitEvent(l.out, l.forked, 0));
    MEMWEAVE_CUDA_CHECK(cudaStreamWaitEvent(l.in, l.forked, 0));
    // Back on the step's stream whatever happens. Should an enqueue throw, the copies queued
    // on the link streams before it still run: the step's stream is made to wait for them
    // (unchecked: the first failure is the one thrown), as the executor reuses the micro and
    // pinned buffers once that stream alone is done.
    struct on_main {
      cudaStream_t& s;
      cudaStream_t main;
      const kc::cuda_kernel_context::link_streams& l;
      bool joined = false;
      ~on_main() {
        s = main;
        if (joined) return;
        if (cudaEventRecord(l.out_done, l.out) == cudaSuccess) {
          (void)cudaStreamWaitEvent(main, l.out_done, 0);
        }
        if (cudaEventRecord(l.in_done, l.in) == cudaSuccess) {
          (void)cudaStreamWaitEvent(main, l.in_done, 0);
        }
        (void)cudaGetLastError();  // this cleanup's own failure is not the program's error
      }
    } restore{stream_, main, l};
    stream_ = l.out;
    outs();
    stream_ = l.in;
    ins();
    stream_ = main;
    MEMWEAVE_CUDA_CHECK(cudaEventRecord(l.out_done, l.out));
    MEMWEAVE_CUDA_CHECK(cudaEventRecord(l.in_done, l.in));
    MEMWEAVE_CUDA_CHECK(cudaStreamWaitEvent(main, l.out_done, 0));
    MEMWEAVE_CUDA_CHECK(cudaStreamWaitEvent(main, l.in_done, 0));
    restore.joined = true;
  }

 private:
  static std::size_t bytes(const staged_tensor& t, std::int64_t images) {
    return static_cast<std::size_t>(images * t.per_image) * sizeof(float);
  }
  static std::size_t halves(std::int64_t n) {
    return static_cast<std::size_t>(n) * sizeof(std::uint16_t);
  }
  template <typename F>
  static void each_chunk(std::int64_t count, F&& f) {
    constexpr auto chunk = static_cast<std::int64_t>(kc::cuda_kernel_context::fp16_staging::chunk);
    for (std::int64_t at = 0; at < count; at += chunk) f(at, std::min(chunk, count - at));
  }
  static void check(const staged_tensor& t) {
    if (t.channels != 0) {
      throw std::logic_error(
          "cuda split step: a channel-cut micro-tensor among the micro-batches' slices (the "
          "channel groups copy those: run_cuda_channel_split_step)");
    }
  }
  struct error_sink {
    const unsigned* word;
    double* sink;
    static void CUDART_CB run(void* p) {
      const std::unique_ptr<error_sink> e(static_cast<error_sink*>(p));
      unsigned bits = 0;
      std::memcpy(&bits, e->word, sizeof bits);
      *e->sink = std::max(*e->sink, static_cast<double>(std::bit_cast<float>(bits)));
    }
  };

  kc::cuda_kernel_context& ctx_;
  cudaStream_t stream_;  // where copy_in / copy_out enqueue now
  const kc::cuda_kernel_context::fp16_staging* fp16_ = nullptr;  // with fp16 micro-tensors
};

// `algo` for a micro-batch of shape `in` where its workspace still fits `bytes` (it was
// chosen for the whole batch), else the fastest of cuDNN's that fits.
int fitting(kc::cuda_kernel_context& ctx, kc::conv_pass pass, int algo, const shape4& in,
            const conv_params& p, std::size_t bytes) {
  try {
    if (kc::conv_workspace_bytes(ctx, pass, algo, in, p) <= bytes) return algo;
  } catch (const device_error&) {
    // cuDNN does not run it at this batch: another one does.
  }
  return kc::choose_conv_algorithm(ctx, pass, in, p, bytes);
}

// A CONV micro-step: each pass's algorithm fitted to the micro-batch's shape.
void conv_micro_step(kc::cuda_kernel_context& ctx, const step_io& s, bool forward,
                     const cuda_conv_choice& c) {
  const auto& p = std::get<conv_params>(s.l->params);
  const shape4& in = s.input_shapes[0];
  const std::size_t bytes = s.workspace == nullptr ? 0 : s.workspace_bytes;
  cuda_conv_choice fit = c;
  if (forward) {
    fit.forward = fitting(ctx, kc::conv_pass::forward, c.forward, in, p, bytes);
  } else {
    if (s.input_grads[0].data != nullptr) {
      fit.data = fitting(ctx, kc::conv_pass::backward_data, c.data, in, p, bytes);
    }
    fit.filter = fitting(ctx, kc::conv_pass::backward_filter, c.filter, in, p, bytes);
  }
  run_cuda_conv(ctx, s, forward, fit);
}

// BN's forward: the sums of x and x^2 over every micro-batch, the statistics from them, then
// each micro-batch normalized (the other way round: the turn finds the last slices in place).
void split_bn_forward(kc::cuda_kernel_context& ctx, const step_io& io, const micro_steps& steps) {
  const auto& p = std::get<bn_params>(io.l->params);
  const shape4& in = io.input_shapes[0];
  double* sums = ctx.sums_scratch(2 * static_cast<std::size_t>(in.c));
  bool first = true;
  steps.each(
      [&](const step_io& s) {
        kc::bn_add_moments(ctx, s.input_shapes[0], s.inputs[0], sums, sums + in.c, first);
        first = false;
      },
      false);
  kc::bn_finish_moments(ctx, in.c, in.n * in.h * in.w, p, sums, sums + in.c, io.aux[0], io.aux[1],
                        io.update_running_stats ? io.params[2] : nullptr,
                        io.update_running_stats ? io.params[3] : nullptr);
  steps.each([&](const step_io& s) {
    kc::bn_normalize(ctx, s.input_shapes[0], s.inputs[0], io.params[0], io.params[1], io.aux[0],
                     io.aux[1], s.output);
  });
}

// BN's backward: the sums of dy and dy * x_hat over every micro-batch (dgamma and dbeta from
// them), then each micro-batch's dx where its input has a gradient.
void split_bn_backward(kc::cuda_kernel_context& ctx, const step_io& io, const micro_steps& steps) {
  const shape4& in = io.input_shapes[0];
  double* sums = ctx.sums_scratch(2 * static_cast<std::size_t>(in.c));
  double *sdy = sums, *sdy_xhat = sums + in.c;
  const bool dx = io.input_grads[0].data != nullptr;
  bool first = true;
  steps.each(
      [&](const step_io& s) {
        kc::bn_add_backward_sums(ctx, s.input_shapes[0], s.inputs[0], io.aux[0], io.aux[1],
                                 s.output_grad, sdy, sdy_xhat, first);
        first = false;
      },
      !dx);
  kc::bn_param_grads_from_sums(ctx, in.c, sdy, sdy_xhat, io.param_grads[0], io.param_grads[1]);
  if (!dx) return;
  steps.each([&](const step_io& s) {
    kc::bn_backward_data(ctx, s.input_shapes[0], in.n * in.h * in.w, s.inputs[0], io.aux[0],
                         io.aux[1], io.params[0], sdy, sdy_xhat, s.output_grad,
                         s.input_grads[0].data, s.input_grads[0].accumulate);
  });
}

// The loss: each micro-batch's images' share of the whole batch's mean, added up on the
// device and read back once.
void split_loss_forward(kc::cuda_kernel_context& ctx, const step_io& io, const micro_steps& steps) {
  const std::int64_t batch = io.input_shapes[0].n;
  bool first = true;
  steps.each([&](const step_io& s) {
    kc::softmax_loss_forward_part(ctx, s.input_shapes[0], s.inputs[0], s.labels, s.output, batch,
                                  first);
    first = false;
  });
  if (io.loss != nullptr) kc::read_loss(ctx, batch, io.input_shapes[0].per_image(), io.loss);
}

void split_loss_backward(kc::cuda_kernel_context& ctx, const step_io& io,
                         const micro_steps& steps) {
  if (io.input_grads[0].data == nullptr) return;
  steps.each([&](const step_io& s) {
    kc::softmax_loss_backward(ctx, s.input_shapes[0], s.output, s.labels, s.input_grads[0].data,
                              s.input_grads[0].accumulate, io.input_shapes[0].n);
  });
}

// The groups of one micro-batch of a CONV (groups 1) or FC step on the GPU: the host's
// channel_groups (split_step.cpp) with the channel-cut tensors copied by cudaMemcpy2DAsync on
// the step's stream, and y and dy used where they are (no packed copy: an image's channels of
// a CONV are contiguous, an FC's rows are the GEMM's leading dimension).
class cuda_channel_groups {
 public:
  cuda_channel_groups(kc::cuda_kernel_context& ctx, const layer& l,
                      std::span<const staged_tensor> staged, std::int64_t batch,
                      const cuda_conv_choice& conv)
      : ctx_(ctx), l_(l), staged_(staged), batch_(batch), conv_(conv) {
    int device = 0, max_pitch = 0;
    MEMWEAVE_CUDA_CHECK(cudaGetDevice(&device));
    MEMWEAVE_CUDA_CHECK(cudaDeviceGetAttribute(&max_pitch, cudaDevAttrMaxPitch, device));
    max_pitch_ = static_cast<std::size_t>(max_pitch);
  }

  // Returns the bytes its copies moved.
  std::size_t run(const step_io& s, bool forward, int groups, std::span<const param_update> updates,
                  const update_fn& update) {
    const shape4& in = s.input_shapes[0];
    const shape4& out = l_.output_shape;
    const std::int64_t K = out.c, plane = out.h * out.w;
    const bool conv = l_.type == layer_type::conv;
    const std::int64_t wrow = conv ? in.c * std::get<conv_params>(l_.params).kernel_h *
                                         std::get<conv_params>(l_.params).kernel_w
                                   : in.per_image();
    const bool bias =
        conv ? std::get<conv_params>(l_.params).bias : std::get<fc_params>(l_.params).bias;
    const std::vector<std::int64_t> bounds = micro_batch_bounds(K, groups);
    std::size_t copied = 0;
    for (std::size_t i = 0; i + 1 < bounds.size(); ++i) {
      const std::int64_t k0 = bounds[i], size = bounds[i + 1] - k0;
      for (const staged_tensor& t : staged_) {
        if (t.read) copied += copy(t, k0, size, s.first_image, in.n, true);
      }
      group g;
      g.k0 = k0;
      g.size = size;
      g.w = rows(s.params[0], k0, wrow);
      if (bias) g.b = rows(s.params[1], k0, 1);
      // y (forward) or dy: the group's packed rows in its micro buffer where staged, else its
      // channels of the micro-batch's images in place.
      float* y = const_cast<float*>(forward ? s.output : s.output_grad);
      if (float* m = micro_of(y)) {
        g.y = m;
        g.pitch = size * plane;
      } else {
        g.y = y + k0 * plane;
        g.pitch = K * plane;
      }
      if (!forward) {
        g.dw = rows(s.param_grads[0], k0, wrow);
        if (bias) g.db = rows(s.param_grads[1], k0, 1);
      }
      conv ? conv_group(s, forward, g) : fc_group(s, forward, g);
      for (const param_update& u : updates) {
        const std::int64_t row = static_cast<std::int64_t>(u.count) / K;
        update(static_cast<std::size_t>(size * row), rows(const_cast<float*>(u.grad), k0, row),
               rows(u.weight, k0, row), rows(u.momentum, k0, row));
      }
      for (const staged_tensor& t : staged_) {
        if (t.written) copied += copy(t, k0, size, s.first_image, in.n, false);
      }
    }
    return copied;
  }

 private:
  // One group's view: its rows of W, b, dW, db, and its channels of y (or dy), image i's at
  // y + i * pitch.
  struct group {
    std::int64_t k0 = 0, size = 0, pitch = 0;
    const float* w = nullptr;
    const float* b = nullptr;
    float* dw = nullptr;
    float* db = nullptr;
    float* y = nullptr;
  };

  // Where the group's y (dy) is packed in its micro buffer, the micro-batch's images are one
  // packed tensor: one call. In place its images' channels are K planes apart: image by image.
  void conv_group(const step_io& s, bool forward, const group& g) {
    conv_params p = std::get<conv_params>(l_.params);
    p.out_channels = g.size;
    const shape4& in = s.input_shapes[0];
    const std::int64_t plane = l_.output_shape.h * l_.output_shape.w;
    const std::int64_t images = g.pitch == g.size * plane ? in.n : 1;
    const shape4 call{images, in.c, in.h, in.w};
    const cuda_conv_choice& c = fitted(s, forward, call, p);
    void* ws = s.workspace;
    const std::size_t bytes = ws == nullptr ? 0 : s.workspace_bytes;
    const kernels::host::grad_out dx =
        forward || s.input_grads.empty() ? kernels::host::grad_out{} : s.input_grads[0];
    for (std::int64_t i = 0; i < in.n; i += images) {
      const float* x = s.inputs[0] + i * in.per_image();
      float* y = g.y + i * g.pitch;
      if (forward) {
        kc::conv_forward(ctx_, static_cast<cudnnConvolutionFwdAlgo_t>(c.forward), ws, bytes, call,
                         p, x, g.w, g.b, y);
        continue;
      }
      if (dx.data != nullptr) {
        // The first group writes dx (or adds to what other consumers wrote), the others add.
        kc::conv_backward_data(ctx_, static_cast<cudnnConvolutionBwdDataAlgo_t>(c.data), ws, bytes,
                               call, p, g.w, y, dx.data + i * in.per_image(),
                               dx.accumulate || g.k0 > 0);
      }
      kc::conv_backward_filter(ctx_, static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.filter), ws,
                               bytes, call, p, x, y, g.dw, g.db, s.accumulate_param_grads || i > 0);
    }
  }

  void fc_group(const step_io& s, bool forward, const group& g) {
    fc_params p = std::get<fc_params>(l_.params);
    p.out_features = g.size;
    const shape4& in = s.input_shapes[0];
    if (forward) {
      kc::fc_forward(ctx_, in, p, s.inputs[0], g.w, g.b, g.y, g.pitch);
      return;
    }
    const kernels::host::grad_out dx =
        s.input_grads.empty() ? kernels::host::grad_out{} : s.input_grads[0];
    if (dx.data != nullptr) {
      kc::fc_backward_data(ctx_, in, p, g.w, g.y, dx.data, dx.accumulate || g.k0 > 0, g.pitch);
    }
    kc::fc_backward_weights(ctx_, in, p, s.inputs[0], g.y, g.dw, g.db, s.accumulate_param_grads,
                            g.pitch);
  }

  // The whole step's algorithms fitted to a call's images and a group's output channels (a
  // step's calls come in at most two group sizes and two image counts: each fitted once).
  const cuda_conv_choice& fitted(const step_io& s, bool forward, const shape4& call,
                                 const conv_params& p) {
    for (const fit& f : fitted_) {
      if (f.channels == p.out_channels && f.images == call.n) return f.choice;
    }
    const std::size_t bytes = s.workspace == nullptr ? 0 : s.workspace_bytes;
    cuda_conv_choice c = conv_;
    if (forward) {
      c.forward = fitting(ctx_, kc::conv_pass::forward, conv_.forward, call, p, bytes);
    } else {
      if (!s.input_grads.empty() && s.input_grads[0].data != nullptr) {
        c.data = fitting(ctx_, kc::conv_pass::backward_data, conv_.data, call, p, bytes);
      }
      c.filter = fitting(ctx_, kc::conv_pass::backward_filter, conv_.filter, call, p, bytes);
    }
    fitted_.push_back({p.out_channels, call.n, c});
    return fitted_.back().choice;
  }

  float* micro_of(const float* p) const { return detail::micro_buffer_of(staged_, p); }
  float* rows(float* whole, std::int64_t k0, std::int64_t row) const {
    return detail::group_rows(staged_, whole, k0, row);
  }

  // The group's rows of `t` (of the micro-batch's images where it has images) between its
  // whole value in page-locked memory and its packed micro buffer, in stream order: one 2D
  // copy where the whole value's pitch is within the device's limit (cudaMemcpy2DAsync fails
  // beyond it: an image of over 2 GiB), else one copy per image; a tensor without images is
  // one contiguous block of rows.
  std::size_t copy(const staged_tensor& t, std::int64_t k0, std::int64_t size, std::int64_t first,
                   std::int64_t n, bool in) const {
    const bool images = t.n == batch_ && batch_ > 1;
    const std::int64_t plane = t.per_image / t.channels;
    const auto width = static_cast<std::size_t>(size * plane) * sizeof(float);
    const auto pitch = static_cast<std::size_t>(t.per_image) * sizeof(float);
    const std::int64_t height = images ? n : 1;
    float* whole = t.whole + (images ? first * t.per_image : 0) + k0 * plane;
    const cudaMemcpyKind kind = in ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    if (height > 1 && pitch <= max_pitch_) {
      void* dst = in ? static_cast<void*>(t.micro) : whole;
      const void* src = in ? static_cast<const void*>(whole) : t.micro;
      MEMWEAVE_CUDA_CHECK(cudaMemcpy2DAsync(dst, in ? width : pitch, src, in ? pitch : width, width,
                                            static_cast<std::size_t>(height), kind, ctx_.stream()));
    } else {
      for (std::int64_t i = 0; i < height; ++i) {
        float* w = whole + i * t.per_image;
        float* m = t.micro + i * size * plane;
        MEMWEAVE_CUDA_CHECK(cudaMemcpyAsync(in ? m : w, in ? w : m, width, kind, ctx_.stream()));
      }
    }
    return width * static_cast<std::size_t>(height);
  }

  kc::cuda_kernel_context& ctx_;
  const layer& l_;
  std::span<const staged_tensor> staged_;
  std::int64_t batch_;
  cuda_conv_choice conv_;
  struct fit {
    std::int64_t channels, images;
    cuda_conv_choice choice;
  };
  std::vector<fit> fitted_;
  std::size_t max_pitch_ = 0;  // cudaDevAttrMaxPitch: the most a 2D copy's pitch may be
};

}  // namespace

void run_cuda_conv(kc::cuda_kernel_context& ctx, const step_io& io, bool forward,
                   const cuda_conv_choice& c) {
  const auto& p = std::get<conv_params>(io.l->params);
  const shape4& in = io.input_shapes[0];
  const std::size_t bytes = io.workspace == nullptr ? 0 : io.workspace_bytes;
  if (forward) {
    kc::conv_forward(ctx, static_cast<cudnnConvolutionFwdAlgo_t>(c.forward), io.workspace, bytes,
                     in, p, io.inputs[0], io.params[0], p.bias ? io.params[1] : nullptr, io.output);
    return;
  }
  if (io.input_grads[0].data != nullptr) {
    kc::conv_backward_data(ctx, static_cast<cudnnConvolutionBwdDataAlgo_t>(c.data), io.workspace,
                           bytes, in, p, io.params[0], io.output_grad, io.input_grads[0].data,
                           io.input_grads[0].accumulate);
  }
  kc::conv_backward_filter(ctx, static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.filter),
                           io.workspace, bytes, in, p, io.inputs[0], io.output_grad,
                           io.param_grads[0], p.bias ? io.param_grads[1] : nullptr,
                           io.accumulate_param_grads);
}

std::size_t run_cuda_split_step(kc::cuda_kernel_context& ctx, const step_io& io, bool forward,
                                int parts, std::span<const staged_tensor> staged,
                                const cuda_conv_choice& conv, double* fp16_error) {
  const layer& l = *io.l;
  if (l.type == layer_type::tiled || l.type == layer_type::data) {
    throw std::logic_error("cuda split step of " + l.name + ": a " +
                           std::string(l.type == layer_type::data ? "DATA" : "tiled") +
                           " step does not split");
  }
  cuda_copier copier(ctx, staged);
  const micro_steps micro(io, forward, parts, staged, &copier);
  if (micro.reversed_start() && !any_order_first_pass(l.type, forward)) {
    throw std::logic_error("cuda split step of " + l.name +
                           ": handed a micro-batch's slices, but its first pass runs in order");
  }
  if (l.type == layer_type::conv) {
    micro.each([&](const step_io& s) { conv_micro_step(ctx, s, forward, conv); });
  } else if (l.type == layer_type::bn && !io.inference) {
    forward ? split_bn_forward(ctx, io, micro) : split_bn_backward(ctx, io, micro);
  } else if (l.type == layer_type::softmax_loss) {
    forward ? split_loss_forward(ctx, io, micro) : split_loss_backward(ctx, io, micro);
  } else {
    const cuda_layer_steps& steps = cuda_layer_steps_for(l.type);
    const auto fn = forward ? steps.forward : steps.backward;
    if (fn != nullptr) micro.each([&](const step_io& s) { fn(ctx, s); });
  }
  copier.report_fp16_error(fp16_error);
  return micro.copied();
}

std::size_t run_cuda_channel_split_step(kc::cuda_kernel_context& ctx, const step_io& io,
                                        bool forward, int groups, int parts,
                                        std::span<const staged_tensor> staged,
                                        const cuda_conv_choice& conv,
                                        std::span<const param_update> updates,
                                        const update_fn& update, double* fp16_error) {
  if (groups <= 1 || !channel_splittable(*io.l)) {
    const std::size_t copied =
        run_cuda_split_step(ctx, io, forward, parts, staged, conv, fp16_error);
    for (const param_update& u : updates) update(u.count, u.grad, u.weight, u.momentum);
    return copied;
  }
  // The input and its gradient go micro-batch by micro-batch (run_cuda_split_step's staging),
  // the channel-cut tensors group by group inside each.
  std::vector<staged_tensor> slices, channel_cut;
  for (const staged_tensor& t : staged) (t.channels > 0 ? channel_cut : slices).push_back(t);
  cuda_copier copier(ctx, slices);
  const micro_steps micro(io, forward, parts, slices, &copier);
  if (micro.reversed_start() && !any_order_first_pass(io.l->type, forward)) {
    throw std::logic_error("cuda split step of " + io.l->name +
                           ": handed a micro-batch's slices, but its first pass runs in order");
  }
  const std::int64_t batch = io.input_shapes[0].n;
  cuda_channel_groups run(ctx, *io.l, channel_cut, batch, conv);
  std::size_t copied = 0;
  micro.each([&](const step_io& s) {
    // The updates after the last micro-batch's groups: backward runs them in image order.
    const bool last = s.first_image + s.input_shapes[0].n == batch;
    copied += run.run(s, forward, groups, last ? updates : std::span<const param_update>{}, update);
  });
  copier.report_fp16_error(fp16_error);
  return micro.copied() + copied;
}

}  // namespace memweave::layers
