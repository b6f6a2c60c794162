// Split execution of a layer step; see split_step.hpp.
#include "engine/layers/split_step.hpp"

#include "engine/layers/micro_steps.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

#include "memweave/swap/fp16.hpp"

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

using detail::held_slices;
using detail::k_none;
using detail::slice_link_bytes;
using detail::starts_reversed;

// The copies of one micro-step as micro_steps runs them and staged_copy_bytes /
// staged_critical_bytes charge them: before micro-batch i runs, the copies out of the one
// before (what the last pass wrote) and i's copies in go at once, the link's two directions,
// except that a tensor whose slice goes out is copied in after it (its one micro buffer).
struct micro_copies {
  std::vector<std::size_t> in_bytes;   // per staged tensor: copied in before micro-batch i
  std::vector<std::size_t> out_bytes;  // per staged tensor: out after the micro-batch before
  std::size_t total() const {
    std::size_t b = 0;
    for (std::size_t i = 0; i < in_bytes.size(); ++i) b += in_bytes[i] + out_bytes[i];
    return b;
  }
  // The bytes the step waits for: max(out, in of the other tensors), then the own ins.
  std::size_t critical() const {
    std::size_t out = 0, in_free = 0, in_after = 0;
    for (std::size_t i = 0; i < in_bytes.size(); ++i) {
      out += out_bytes[i];
      (out_bytes[i] != 0 ? in_after : in_free) += in_bytes[i];
    }
    return std::max(out, in_free) + in_after;
  }
};

// One more thread for a split step's copies out, beside its copies in on the calling thread
// (the link's other direction), started at its first use and joined with the step. A plain
// thread and a condition variable, not the kernels' TBB arena: ThreadSanitizer sees this
// synchronization (the TBB library is not instrumented).
class side_thread {
 public:
  side_thread() = default;
  side_thread(const side_thread&) = delete;
  side_thread& operator=(const side_thread&) = delete;
  ~side_thread() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }

  // Runs `there` on the side thread and `here` on this one; returns when both are done.
  // Neither may throw (they copy memory).
  void run(const std::function<void()>& there, const std::function<void()>& here) {
    if (!thread_.joinable()) {
      try {
        thread_ = std::thread([this] { serve(); });
      } catch (const std::system_error&) {
        // No thread to be had (a process at its limit): the copies run one after the other,
        // as they would on one core.
        there();
        here();
        return;
      }
    }
    {
      std::lock_guard lock(mu_);
      job_ = &there;
    }
    wake_.notify_one();
    here();
    std::unique_lock lock(mu_);
    done_.wait(lock, [&] { return job_ == nullptr; });
  }

 private:
  void serve() {
    std::unique_lock lock(mu_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || job_ != nullptr; });
      if (job_ == nullptr) return;
      const std::function<void()>* job = job_;
      lock.unlock();
      (*job)();
      lock.lock();
      job_ = nullptr;
      done_.notify_one();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void()>* job_ = nullptr;  // guarded by mu_
  bool stopping_ = false;                       // guarded by mu_
  std::thread thread_;
};

// The host's copies of a staged tensor's slices: a memcpy (an fp16 one converted on the
// way); a micro-batch's copies out on a side thread beside the next one's copies in, where
// the kernels have more than one thread.
class host_copier final : public slice_copier {
 public:
  explicit host_copier(const k::kernel_context& ctx) : ctx_(ctx) {}

  void copy_in(const staged_tensor& t, std::int64_t from, std::int64_t images) override {
    const auto count = static_cast<std::size_t>(images * t.per_image);
    if (t.fp16) {
      fp16_decode(t.micro, reinterpret_cast<const std::uint16_t*>(t.whole) + from * t.per_image,
                  count);
      return;
    }
    std::memcpy(t.micro, t.whole + from * t.per_image, count * sizeof(float));
  }
  // On the side thread where both runs them there: the error is its own until the
  // handshake joins it.
  void copy_out(const staged_tensor& t, std::int64_t from, std::int64_t images) override {
    const auto count = static_cast<std::size_t>(images * t.per_image);
    if (t.fp16) {
      error_ = std::max(error_,
                        fp16_encode(reinterpret_cast<std::uint16_t*>(t.whole) + from * t.per_image,
                                    t.micro, count));
      return;
    }
    std::memcpy(t.whole + from * t.per_image, t.micro, count * sizeof(float));
  }
  void both(const std::function<void()>& outs, const std::function<void()>& ins) override {
    if (ctx_.threads() > 1) {
      side_.run(outs, ins);
    } else {
      slice_copier::both(outs, ins);
    }
  }
  double fp16_error() const noexcept override { return error_; }

 private:
  const k::kernel_context& ctx_;
  double error_ = 0;
  side_thread side_;  // the copies out, where ctx_ has more than one thread
};

void bn_forward(const k::kernel_context& ctx, const step_io& io, const micro_steps& steps) {
  const auto& p = std::get<bn_params>(io.l->params);
  const shape4& in = io.input_shapes[0];
  const auto C = static_cast<std::size_t>(in.c);
  std::vector<k::exact_sum> sum(C);
  std::vector<k::exact_square_sum> squares(C);
  steps.each(
      [&](const step_io& s) {
        k::bn_sum_moments(ctx, s.input_shapes[0], s.inputs[0], sum.data(), squares.data());
      },
      false);
  k::bn_finish_statistics(in.c, in.n * in.h * in.w, p, sum.data(), squares.data(), io.aux[0],
                          io.aux[1]);
  // Element-wise, the other way round (the sums before are exact: any order, the same bits).
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
  // Element-wise, the other way round (the sums before are doubles added in image order:
  // that pass never starts reversed, any_order_first_pass).
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

int split_passes(layer_type type, bool forward, bool input_grad, bool inference) noexcept {
  if (type != layer_type::bn || inference) return 1;
  return forward || input_grad ? 2 : 1;
}

std::int64_t final_micro_batch(layer_type type, bool forward, bool input_grad,
                               std::span<const staged_tensor> staged, std::int64_t batch,
                               int parts) {
  const std::size_t n = micro_batch_bounds(batch, parts).size() - 1;
  // Passes alternate direction from the first's (micro_steps::each).
  const bool last_reversed =
      starts_reversed(staged, n) != (split_passes(type, forward, input_grad) % 2 == 0);
  return last_reversed ? 0 : static_cast<std::int64_t>(n) - 1;
}

bool any_order_first_pass(layer_type type, bool forward) noexcept {
  switch (type) {
    case layer_type::act:
    case layer_type::pool:
    case layer_type::lrn:
    case layer_type::dropout:
    case layer_type::concat:
    case layer_type::add:
      return true;  // image by image both ways (DROPOUT's mask by each image's index)
    case layer_type::conv:
    case layer_type::fc:
    case layer_type::bn:
      return forward;  // backward sums over images in order (weight gradients, BN's sums)
    default:
      return false;  // the loss sums its images' losses in order; DATA and tiled do not split
  }
}

std::size_t run_split_step(const k::kernel_context& ctx, const step_io& io, bool forward, int parts,
                           std::span<const staged_tensor> staged, double* fp16_error) {
  if (fp16_error != nullptr) *fp16_error = 0;
  const layer_steps& steps = layer_steps_for(io.l->type);
  const step_fn fn = forward ? steps.forward : steps.backward;
  if ((parts <= 1 && staged.empty()) || io.l->type == layer_type::data || io.input_shapes.empty()) {
    if (fn != nullptr) fn(ctx, io);
    return 0;
  }
  host_copier copier(ctx);
  const micro_steps micro(io, forward, parts, staged, &copier);
  if (micro.reversed_start() && !any_order_first_pass(io.l->type, forward)) {
    throw std::logic_error("split step of " + io.l->name +
                           ": handed a micro-batch's slices, but its first pass runs in order");
  }
  // An evaluation's BN normalizes with the running statistics: element-wise, micro-batch by
  // micro-batch, as any other layer (the two passes are for a batch's statistics).
  if (io.l->type == layer_type::bn && !io.inference) {
    forward ? bn_forward(ctx, io, micro) : bn_backward(ctx, io, micro);
  } else if (io.l->type == layer_type::softmax_loss) {
    forward ? loss_forward(ctx, io, micro) : loss_backward(ctx, io, micro);
  } else if (fn != nullptr) {
    micro.each([&](const step_io& s) { fn(ctx, s); });
  }
  if (fp16_error != nullptr) *fp16_error = copier.fp16_error();
  return micro.copied();
}

namespace {

// The copies of a step's staged tensors, as micro_steps runs them: channel-cut tensors
// (channels > 0) around each group, in series (`serial`); the others through micro_copies,
// one per micro-batch of each pass and one after each pass (its last copies out).
// Returns the serial copies' bytes: {to the device, to host memory}.
template <class F>
staged_link_bytes walk_copies(layer_type type, bool forward, std::span<const staged_tensor> staged,
                              int parts, bool input_grad, bool inference, F&& each) {
  staged_link_bytes serial;
  std::vector<staged_tensor> by_micro_batch;
  for (const staged_tensor& t : staged) {
    if (t.channels == 0) {
      by_micro_batch.push_back(t);
      continue;
    }
    // Around each group: one with images once, one without (weights) once per micro-batch.
    const std::size_t whole = static_cast<std::size_t>(t.n * t.per_image) * sizeof(float);
    const std::size_t times = t.n == 1 ? static_cast<std::size_t>(std::max(parts, 1)) : 1;
    if (t.read) serial.to_device += times * whole;
    if (t.written) serial.to_host += times * whole;
  }
  if (by_micro_batch.empty()) return serial;
  // The passes micro_steps runs, their micro-batches in the same order, through held_slices.
  const auto passes = static_cast<std::size_t>(split_passes(type, forward, input_grad, inference));
  const std::vector<std::int64_t> bounds = micro_batch_bounds(by_micro_batch.front().n, parts);
  const std::size_t n = bounds.size() - 1;
  held_slices held(by_micro_batch);
  bool reverse = starts_reversed(by_micro_batch, n);
  micro_copies c{std::vector<std::size_t>(by_micro_batch.size(), 0),
                 std::vector<std::size_t>(by_micro_batch.size(), 0)};
  for (std::size_t pass = 0; pass < passes; ++pass, reverse = !reverse) {
    const bool last = pass + 1 == passes;
    for (std::size_t k = 0; k <= n; ++k) {
      const std::size_t i = k == n ? k_none : reverse ? n - 1 - k : k;
      // Micro-batch i's slice of t (none after the pass).
      const auto slice = [&](const staged_tensor& t) -> std::size_t {
        if (i == k_none) return 0;
        return slice_link_bytes(t, bounds[i + 1] - bounds[i]);
      };
      for (std::size_t ti = 0; ti < by_micro_batch.size(); ++ti) {
        const staged_tensor& t = by_micro_batch[ti];
        c.in_bytes[ti] = i != k_none && held.copy_in(ti, t, i, last) ? slice(t) : 0;
      }
      each(c);
      if (i == k_none) break;
      for (std::size_t ti = 0; ti < by_micro_batch.size(); ++ti) {
        const staged_tensor& t = by_micro_batch[ti];
        c.out_bytes[ti] = held_slices::copy_out(t, last, k + 1 == n) ? slice(t) : 0;
        held.ran(ti, t, i, last);
      }
    }
    std::fill(c.out_bytes.begin(), c.out_bytes.end(), 0);
  }
  return serial;
}

}  // namespace

std::size_t staged_copy_bytes(layer_type type, bool forward, std::span<const staged_tensor> staged,
                              int parts, bool input_grad, bool inference) noexcept {
  std::size_t by_micro_batch = 0;
  const staged_link_bytes serial =
      walk_copies(type, forward, staged, parts, input_grad, inference,
                  [&](const micro_copies& c) { by_micro_batch += c.total(); });
  return serial.to_device + serial.to_host + by_micro_batch;
}

std::size_t staged_critical_bytes(layer_type type, bool forward,
                                  std::span<const staged_tensor> staged, int parts, bool input_grad,
                                  bool inference) noexcept {
  std::size_t by_micro_batch = 0;
  const staged_link_bytes serial =
      walk_copies(type, forward, staged, parts, input_grad, inference,
                  [&](const micro_copies& c) { by_micro_batch += c.critical(); });
  return serial.to_device + serial.to_host + by_micro_batch;
}

staged_link_bytes staged_directions(layer_type type, bool forward,
                                    std::span<const staged_tensor> staged, int parts,
                                    bool input_grad, bool inference) noexcept {
  staged_link_bytes sum;
  const staged_link_bytes serial =
      walk_copies(type, forward, staged, parts, input_grad, inference, [&](const micro_copies& c) {
        for (std::size_t i = 0; i < c.in_bytes.size(); ++i) {
          sum.to_device += c.in_bytes[i];
          sum.to_host += c.out_bytes[i];
        }
      });
  sum.to_device += serial.to_device;
  sum.to_host += serial.to_host;
  return sum;
}

namespace {

// One output-channel group's view of a CONV or FC step: channels [k0, k1) of K, each
// `plane` floats per image (or per block) in a K-row tensor, over n images (or blocks).
struct channel_group {
  std::int64_t k0, k1, K, plane, n;
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

// What one group's kernels read and write: the input and its gradient whole (dx continues
// the sum of the groups before), the group's rows of W and b and of their gradients, and
// its channels of y and dy packed as (images, group channels, plane).
struct group_io {
  const float* w = nullptr;
  const float* b = nullptr;
  float* dw = nullptr;
  float* db = nullptr;
  float* y = nullptr;
  const float* dy = nullptr;
  float* dx = nullptr;
};

void conv_group(const k::kernel_context& ctx, const step_io& io, bool forward,
                const channel_group& g, const group_io& gio) {
  conv_params p = std::get<conv_params>(io.l->params);
  p.out_channels = g.size();
  const shape4& in = io.input_shapes[0];
  if (forward) {
    const k::conv_config cfg{io.algo, io.chunk, io.workspace, io.workspace_bytes};
    k::conv_forward(ctx, cfg, in, p, io.inputs[0], gio.w, gio.b, gio.y);
    return;
  }
  if (gio.dx != nullptr) {
    const k::conv_config cfg{io.data_algo, io.data_chunk, io.workspace, io.workspace_bytes};
    if (g.k0 == 0) {
      k::conv_backward_data(ctx, cfg, in, p, gio.w, gio.dy, gio.dx, false);
    } else {
      k::conv_backward_data_extend(ctx, cfg, in, p, gio.w, gio.dy, gio.dx);
    }
  }
  const k::conv_config cfg{io.filter_algo, io.filter_chunk, io.workspace, io.workspace_bytes};
  k::conv_backward_filter(ctx, cfg, in, p, io.inputs[0], gio.dy, gio.dw, gio.db,
                          io.accumulate_param_grads);
}

void fc_group(const k::kernel_context& ctx, const step_io& io, bool forward, const channel_group& g,
              const group_io& gio) {
  fc_params p = std::get<fc_params>(io.l->params);
  p.out_features = g.size();
  const shape4& in = io.input_shapes[0];
  if (forward) {
    k::fc_forward(ctx, in, p, io.inputs[0], gio.w, gio.b, gio.y);
    return;
  }
  if (gio.dx != nullptr) {
    if (g.k0 == 0) {
      k::fc_backward_data(ctx, in, p, gio.w, gio.dy, gio.dx, false);
    } else {
      k::fc_backward_data_extend(ctx, in, p, gio.w, gio.dy, gio.dx);
    }
  }
  k::fc_backward_weights(ctx, in, p, io.inputs[0], gio.dy, gio.dw, gio.db,
                         io.accumulate_param_grads);
}

// The groups of one micro-batch `s` (images [first_image, first_image + n) of the whole
// step `io`), with the channel-staged tensors copied around each group; `updates` run on
// each group's rows after its kernels (the last micro-batch's).
class channel_groups {
 public:
  channel_groups(const layer& l, std::span<const staged_tensor> staged, std::int64_t batch)
      : l_(l), staged_(staged), batch_(batch), conv_(l.type == layer_type::conv) {}

  void run(const k::kernel_context& ctx, const step_io& s, bool forward, int groups,
           std::span<const param_update> updates, const update_fn& update) {
    const shape4& in = s.input_shapes[0];
    const shape4& out = l_.output_shape;
    const std::int64_t K = out.c, plane = out.h * out.w;
    const std::int64_t wrow = conv_ ? in.c * std::get<conv_params>(l_.params).kernel_h *
                                          std::get<conv_params>(l_.params).kernel_w
                                    : in.per_image();
    const bool bias =
        conv_ ? std::get<conv_params>(l_.params).bias : std::get<fc_params>(l_.params).bias;
    // dx: the groups write and continue the sum in dx itself, or, when the step adds to a
    // gradient other consumers wrote, in a buffer added to dx at the end, as the whole
    // kernel adds its finished sum (dx[i] + g[i]).
    const k::grad_out dx = forward || s.input_grads.empty() ? k::grad_out{} : s.input_grads[0];
    std::vector<float> sum(
        dx.data != nullptr && dx.accumulate ? static_cast<std::size_t>(in.count()) : 0);
    std::vector<float> packed;  // y or dy of a group, where they are not staged
    const std::vector<std::int64_t> bounds = micro_batch_bounds(K, groups);
    for (std::size_t i = 0; i + 1 < bounds.size(); ++i) {
      const channel_group g{bounds[i], bounds[i + 1], K, plane, in.n};
      for (const staged_tensor& t : staged_) {
        if (t.read) copy(t, g, s.first_image, in.n, true);
      }
      group_io gio;
      gio.w = rows(s.params[0], g, wrow);
      if (bias) gio.b = rows(s.params[1], g, 1);
      const float* y_whole = forward ? s.output : s.output_grad;
      float* y = micro_of(y_whole);
      if (y == nullptr) {
        packed.resize(static_cast<std::size_t>(g.n * g.size() * g.plane));
        y = packed.data();
        if (!forward) gather(g, y_whole, y);
      }
      if (forward) {
        gio.y = y;
      } else {
        gio.dy = y;
        gio.dw = rows(s.param_grads[0], g, wrow);
        if (bias) gio.db = rows(s.param_grads[1], g, 1);
        gio.dx = dx.accumulate ? sum.data() : dx.data;
      }
      conv_ ? conv_group(ctx, s, forward, g, gio) : fc_group(ctx, s, forward, g, gio);
      if (forward && y == packed.data()) scatter(g, y, s.output);
      for (const param_update& u : updates) {
        const std::int64_t row = static_cast<std::int64_t>(u.count) / K;
        update(static_cast<std::size_t>(g.size() * row), rows(const_cast<float*>(u.grad), g, row),
               rows(u.weight, g, row), rows(u.momentum, g, row));
      }
      for (const staged_tensor& t : staged_) {
        if (t.written) copy(t, g, s.first_image, in.n, false);
      }
    }
    if (dx.data != nullptr && dx.accumulate) {
      for (std::size_t i = 0; i < sum.size(); ++i) dx.data[i] += sum[i];
    }
  }

 private:
  float* micro_of(const float* p) const { return detail::micro_buffer_of(staged_, p); }
  float* rows(float* whole, const channel_group& g, std::int64_t row) const {
    return detail::group_rows(staged_, whole, g.k0, row);
  }

  // Copies the group's rows of `t` (of the micro-batch's images where it has images) between
  // its whole value and its micro buffer.
  void copy(const staged_tensor& t, const channel_group& g, std::int64_t first, std::int64_t n,
            bool in) const {
    const bool images = t.n == batch_ && batch_ > 1;
    const channel_group b{g.k0, g.k1, t.channels, t.per_image / t.channels, images ? n : 1};
    float* whole = t.whole + (images ? first * t.per_image : 0);
    in ? gather(b, whole, t.micro) : scatter(b, t.micro, whole);
  }

  const layer& l_;
  std::span<const staged_tensor> staged_;
  std::int64_t batch_;
  bool conv_;
};

}  // namespace

bool channel_splittable(const layer& l) noexcept {
  return (l.type == layer_type::conv && std::get<conv_params>(l.params).groups == 1) ||
         l.type == layer_type::fc;
}

void run_channel_split_step(const k::kernel_context& ctx, const step_io& io, bool forward,
                            int parts) {
  run_channel_split_step(ctx, io, forward, parts, 1, {}, {}, {});
}

void run_channel_split_step(const k::kernel_context& ctx, const step_io& io, bool forward,
                            int groups, int parts, std::span<const staged_tensor> staged,
                            std::span<const param_update> updates, const update_fn& update) {
  if (groups <= 1 || !channel_splittable(*io.l)) {
    run_split_step(ctx, io, forward, parts, staged);
    for (const param_update& u : updates) update(u.count, u.grad, u.weight, u.momentum);
    return;
  }
  // The input and its gradient go micro-batch by micro-batch (run_split_step's staging);
  // the channel-cut tensors group by group inside each.
  std::vector<staged_tensor> slices, channel_cut;
  for (const staged_tensor& t : staged) (t.channels > 0 ? channel_cut : slices).push_back(t);
  const std::int64_t batch = io.input_shapes[0].n;
  channel_groups run(*io.l, channel_cut, batch);
  host_copier copier(ctx);
  const micro_steps micro(io, forward, parts, slices, &copier);
  micro.each([&](const step_io& s) {
    const bool last = s.first_image + s.input_shapes[0].n == batch;
    run.run(ctx, s, forward, groups, last ? updates : std::span<const param_update>{}, update);
  });
}

}  // namespace memweave::layers
