// Split steps on the GPU (engine/layers/cuda_split_step.cpp) against the host's whole step:
// every layer type whose math crosses images (BN's statistics and backward sums, the loss's
// mean, CONV's and FC's weight gradients) and DROPOUT's mask (drawn by each image's place in
// the batch), run in micro-batches of 3, 2 and 2 images, with and without their
// micro-tensors in page-locked host memory (fp16 ones too). Every test skips without a CUDA
// device.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/layers/cuda_split_step.hpp"
#include "engine/layers/layer_step.hpp"
#include "engine/layers/split_step.hpp"
#include "memweave/swap/fp16.hpp"
#include "tests/engine/kernels_cuda/cuda_test_util.hpp"

namespace memweave::kernels::cuda::test {
namespace {

using cuda_split_step_test = cuda_test;

constexpr int k_parts = 3;  // of 7 images: 3, 2, 2

// Page-locked host memory (cudaHostAlloc), as the executor stages micro-tensors on cuda.
class pinned_floats {
 public:
  explicit pinned_floats(const std::vector<float>& v) : count_(v.size()) {
    check(cudaHostAlloc(&data_, count_ * sizeof(float), cudaHostAllocDefault), "cudaHostAlloc");
    std::copy(v.begin(), v.end(), get());
  }
  ~pinned_floats() { (void)cudaFreeHost(data_); }
  pinned_floats(const pinned_floats&) = delete;
  pinned_floats& operator=(const pinned_floats&) = delete;
  float* get() const noexcept { return static_cast<float*>(data_); }
  std::vector<float> values() const { return {get(), get() + count_}; }

 private:
  void* data_ = nullptr;
  std::size_t count_ = 0;
};

TEST_F(cuda_split_step_test, bn_in_micro_batches_matches_the_whole_step) {
  layer l;
  l.type = layer_type::bn;
  l.params = bn_params{};
  const shape4 in{7, 5, 3, 4};
  l.output_shape = in;  // micro-batches slice the output by it
  step_tensors t;
  const auto x = t.add(random_vector(count_of(in), 1, -1.0f, 3.0f));
  const auto y = t.add(std::vector<float>(count_of(in)));
  const auto gamma = t.add(random_vector(5, 2, 0.5f, 1.5f));
  const auto beta = t.add(random_vector(5, 3));
  const auto rm = t.add(random_vector(5, 4));
  const auto rv = t.add(random_vector(5, 5, 0.5f, 2.0f));
  const auto mean = t.add(std::vector<float>(5));
  const auto invstd = t.add(std::vector<float>(5));
  const auto dy = t.add(random_vector(count_of(in), 6));
  const auto dx = t.add(random_vector(count_of(in), 7));  // added to: accumulate
  const auto dgamma = t.add(random_vector(5, 8));         // overwritten: a first micro-batch that
  const auto dbeta = t.add(random_vector(5, 9));          // added to them would show
  const auto io_of = [&](bool dev) {
    auto f = [&](std::size_t i) { return dev ? t.d(i) : t.h(i); };
    layers::step_io io;
    io.l = &l;
    io.input_shapes = {in};
    io.inputs = {f(x)};
    io.output = f(y);
    io.output_grad = f(dy);
    io.input_grads = {{f(dx), true}};
    io.params = {f(gamma), f(beta), f(rm), f(rv)};
    io.param_grads = {f(dgamma), f(dbeta)};
    io.aux = {f(mean), f(invstd)};
    return io;
  };
  const layers::layer_steps& host = layers::layer_steps_for(layer_type::bn);
  host.forward(host_ctx(), io_of(false));
  host.backward(host_ctx(), io_of(false));
  layers::run_cuda_split_step(ctx(), io_of(true), true, k_parts, {}, {});
  layers::run_cuda_split_step(ctx(), io_of(true), false, k_parts, {}, {});
  expect_near(t.host[mean], read(*t.device[mean]), 1e-6, 1e-5, "saved mean");
  expect_near(t.host[invstd], read(*t.device[invstd]), 1e-6, 1e-5, "saved invstd");
  expect_near(t.host[rm], read(*t.device[rm]), 1e-6, 1e-5, "running mean");
  expect_near(t.host[rv], read(*t.device[rv]), 1e-6, 1e-5, "running variance");
  expect_near(t.host[y], read(*t.device[y]), 1e-5, 1e-5, "output");
  expect_near(t.host[dgamma], read(*t.device[dgamma]), 1e-4, 1e-4, "gamma gradient");
  expect_near(t.host[dbeta], read(*t.device[dbeta]), 1e-4, 1e-4, "beta gradient");
  expect_near(t.host[dx], read(*t.device[dx]), 1e-4, 1e-4, "input gradient");
}

// BN's forward with x read from and y written to page-locked host memory through one
// micro-batch buffer each: the statistics pass copies x's slices in, the normalization pass
// (the other way round) finds the last one in place, and y's slices go out. Then its
// backward, x and dy read and dx written so: the sums' pass, then dx's.
TEST_F(cuda_split_step_test, staged_micro_tensors_cross_through_their_micro_buffers) {
  layer l;
  l.type = layer_type::bn;
  l.params = bn_params{};
  const shape4 in{7, 4, 5, 5};
  l.output_shape = in;
  const std::int64_t per_image = in.per_image();
  const std::vector<float> x0 = random_vector(count_of(in), 11, -2.0f, 2.0f);
  step_tensors t;
  const auto x = t.add(x0);
  const auto y = t.add(std::vector<float>(count_of(in)));
  const auto gamma = t.add(random_vector(4, 12, 0.5f, 1.5f));
  const auto beta = t.add(random_vector(4, 13));
  const auto rm = t.add(random_vector(4, 14));
  const auto rv = t.add(random_vector(4, 15, 0.5f, 2.0f));
  const auto mean = t.add(std::vector<float>(4));
  const auto invstd = t.add(std::vector<float>(4));
  const std::vector<float> dy0 = random_vector(count_of(in), 16);
  const auto dy = t.add(dy0);
  const auto dx = t.add(std::vector<float>(count_of(in)));
  const auto dgamma = t.add(random_vector(4, 17));  // overwritten
  const auto dbeta = t.add(random_vector(4, 18));
  pinned_floats x_host(x0), y_host(std::vector<float>(count_of(in), -7.0f)), dy_host(dy0),
      dx_host(std::vector<float>(count_of(in), 5.0f));
  // The largest micro-batch's slices.
  device_buffer x_micro(3 * per_image), y_micro(3 * per_image), dy_micro(3 * per_image),
      dx_micro(3 * per_image);
  const auto io_of = [&](bool dev) {
    auto f = [&](std::size_t i) { return dev ? t.d(i) : t.h(i); };
    layers::step_io io;
    io.l = &l;
    io.input_shapes = {in};
    io.inputs = {dev ? x_host.get() : t.h(x)};
    io.output = dev ? y_host.get() : t.h(y);
    io.output_grad = dev ? dy_host.get() : t.h(dy);
    io.input_grads = {{dev ? dx_host.get() : t.h(dx), false}};
    io.params = {f(gamma), f(beta), f(rm), f(rv)};
    io.param_grads = {f(dgamma), f(dbeta)};
    io.aux = {f(mean), f(invstd)};
    return io;
  };
  layers::layer_steps_for(layer_type::bn).forward(host_ctx(), io_of(false));
  layers::layer_steps_for(layer_type::bn).backward(host_ctx(), io_of(false));
  std::vector<layers::staged_tensor> staged(2);
  staged[0] = {x_host.get(), x_micro.get(), per_image, in.n, true, false};
  staged[1] = {y_host.get(), y_micro.get(), per_image, in.n, false, true};
  const std::size_t copied =
      layers::run_cuda_split_step(ctx(), io_of(true), true, k_parts, staged, {});
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  EXPECT_EQ(copied, layers::staged_copy_bytes(layer_type::bn, true, staged, k_parts));
  expect_near(t.host[y], y_host.values(), 1e-5, 1e-5, "output in host memory");
  expect_bitwise(x0, x_host.values(), "input, read only");
  expect_near(t.host[mean], read(*t.device[mean]), 1e-6, 1e-5, "saved mean");

  std::vector<layers::staged_tensor> back(3);
  back[0] = {x_host.get(), x_micro.get(), per_image, in.n, true, false};
  back[1] = {dy_host.get(), dy_micro.get(), per_image, in.n, true, false};
  back[2] = {dx_host.get(), dx_micro.get(), per_image, in.n, false, true};
  const std::size_t back_copied =
      layers::run_cuda_split_step(ctx(), io_of(true), false, k_parts, back, {});
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  EXPECT_EQ(back_copied, layers::staged_copy_bytes(layer_type::bn, false, back, k_parts));
  expect_near(t.host[dx], dx_host.values(), 1e-4, 1e-4, "input gradient in host memory");
  expect_near(t.host[dgamma], read(*t.device[dgamma]), 1e-4, 1e-4, "gamma gradient");
  expect_near(t.host[dbeta], read(*t.device[dbeta]), 1e-4, 1e-4, "beta gradient");
}

TEST_F(cuda_split_step_test, the_loss_and_its_gradient_are_over_the_whole_batch) {
  layer l;
  l.type = layer_type::softmax_loss;
  l.params = softmax_loss_params{};
  const shape4 in{7, 6, 1, 1};
  l.output_shape = in;
  step_tensors t;
  const auto x = t.add(random_vector(count_of(in), 21, -3.0f, 3.0f));
  const auto labels = t.add(std::vector<float>{5, 0, 2, 2, 4, 1, 3});
  const auto y = t.add(std::vector<float>(count_of(in)));
  const auto dx = t.add(random_vector(count_of(in), 22));  // overwritten
  double host_loss = -1.0, cuda_loss = -1.0;
  const auto io_of = [&](bool dev) {
    auto f = [&](std::size_t i) { return dev ? t.d(i) : t.h(i); };
    layers::step_io io;
    io.l = &l;
    io.input_shapes = {in};
    io.inputs = {f(x)};
    io.labels = f(labels);
    io.output = f(y);
    io.input_grads = {{f(dx), false}};
    io.loss = dev ? &cuda_loss : &host_loss;
    return io;
  };
  const layers::layer_steps& host = layers::layer_steps_for(layer_type::softmax_loss);
  host.forward(host_ctx(), io_of(false));
  host.backward(host_ctx(), io_of(false));
  layers::run_cuda_split_step(ctx(), io_of(true), true, k_parts, {}, {});
  EXPECT_NEAR(cuda_loss, host_loss, 1e-6 * (1.0 + host_loss));
  layers::run_cuda_split_step(ctx(), io_of(true), false, k_parts, {}, {});
  expect_near(t.host[y], read(*t.device[y]), 1e-6, 1e-5, "softmax");
  expect_near(t.host[dx], read(*t.device[dx]), 1e-6, 1e-5, "input gradient (over 7 images)");
}

TEST_F(cuda_split_step_test, conv_and_fc_add_the_micro_batches_weight_gradients) {
  layer conv;
  conv.type = layer_type::conv;
  conv_params p;
  p.out_channels = 6, p.kernel_h = p.kernel_w = 3, p.pad_h = p.pad_w = 1;
  conv.params = p;
  const shape4 in{7, 3, 6, 6};
  const shape4 out{7, 6, 6, 6};
  conv.output_shape = out;
  layer fc;
  fc.type = layer_type::fc;
  fc_params q;
  q.out_features = 4;
  fc.params = q;
  const shape4 fc_out{7, 4, 1, 1};
  fc.output_shape = fc_out;
  step_tensors t;
  const auto x = t.add(random_vector(count_of(in), 31));
  const auto w = t.add(random_vector(6 * 3 * 9, 32));
  const auto b = t.add(random_vector(6, 33));
  const auto y = t.add(std::vector<float>(count_of(out)));
  const auto dy = t.add(random_vector(count_of(out), 34));
  // Gradients overwritten by the step: a first micro-batch that added to them would show.
  const auto dx = t.add(random_vector(count_of(in), 39));
  const auto dw = t.add(random_vector(6 * 3 * 9, 40));
  const auto db = t.add(random_vector(6, 41));
  const auto fw = t.add(random_vector(4 * out.per_image(), 35));
  const auto fb = t.add(random_vector(4, 36));
  const auto fy = t.add(std::vector<float>(count_of(fc_out)));
  const auto fdy = t.add(random_vector(count_of(fc_out), 37));
  const auto fdx = t.add(random_vector(count_of(out), 38));  // added to: accumulate
  const auto fdw = t.add(random_vector(4 * out.per_image(), 42));
  const auto fdb = t.add(random_vector(4, 43));
  const auto conv_io = [&](bool dev) {
    auto f = [&](std::size_t i) { return dev ? t.d(i) : t.h(i); };
    layers::step_io io;
    io.l = &conv;
    io.input_shapes = {in};
    io.inputs = {f(x)};
    io.output = f(y);
    io.output_grad = f(dy);
    io.input_grads = {{f(dx), false}};
    io.params = {f(w), f(b)};
    io.param_grads = {f(dw), f(db)};
    return io;
  };
  const auto fc_io = [&](bool dev) {
    auto f = [&](std::size_t i) { return dev ? t.d(i) : t.h(i); };
    layers::step_io io;
    io.l = &fc;
    io.input_shapes = {out};
    io.inputs = {f(y)};
    io.output = f(fy);
    io.output_grad = f(fdy);
    io.input_grads = {{f(fdx), true}};
    io.params = {f(fw), f(fb)};
    io.param_grads = {f(fdw), f(fdb)};
    return io;
  };
  const layers::layer_steps& host_conv = layers::layer_steps_for(layer_type::conv);
  const layers::layer_steps& host_fc = layers::layer_steps_for(layer_type::fc);
  host_conv.forward(host_ctx(), conv_io(false));
  host_fc.forward(host_ctx(), fc_io(false));
  host_fc.backward(host_ctx(), fc_io(false));
  host_conv.backward(host_ctx(), conv_io(false));
  // No workspace: each micro-batch takes cuDNN's fastest without one.
  const layers::cuda_conv_choice none{conv_fallback_algorithm(conv_pass::forward, false),
                                      conv_fallback_algorithm(conv_pass::backward_data, false),
                                      conv_fallback_algorithm(conv_pass::backward_filter, false)};
  layers::run_cuda_split_step(ctx(), conv_io(true), true, k_parts, {}, none);
  layers::run_cuda_split_step(ctx(), fc_io(true), true, k_parts, {}, {});
  layers::run_cuda_split_step(ctx(), fc_io(true), false, k_parts, {}, {});
  layers::run_cuda_split_step(ctx(), conv_io(true), false, k_parts, {}, none);
  expect_near(t.host[y], read(*t.device[y]), 2e-3, 1e-3, "conv output");
  expect_near(t.host[fy], read(*t.device[fy]), 2e-3, 1e-3, "fc output");
  expect_near(t.host[fdw], read(*t.device[fdw]), 2e-3, 1e-3, "fc weight gradient");
  expect_near(t.host[fdb], read(*t.device[fdb]), 1e-4, 1e-4, "fc bias gradient");
  expect_near(t.host[fdx], read(*t.device[fdx]), 2e-3, 1e-3, "fc input gradient");
  expect_near(t.host[dw], read(*t.device[dw]), 2e-3, 1e-3, "conv weight gradient");
  expect_near(t.host[db], read(*t.device[db]), 1e-4, 1e-4, "conv bias gradient");
  expect_near(t.host[dx], read(*t.device[dx]), 2e-3, 1e-3, "conv input gradient");
}

// Output-channel groups (run_cuda_channel_split_step): a CONV and an FC step in 3 groups inside
// 1 and 3 micro-batches, the solver's updates group by group, against the host's whole step and
// one update after it, to float rounding. Staged: the output, output gradient, parameters,
// gradients and momenta in page-locked memory, one group's rows at a time through micro
// buffers (the input and its gradient by micro-batch where split), the copies moving
// staged_copy_bytes. In place: everything on the device, the groups' channels of y and dy K
// apart (CONV image by image, FC through the GEMMs' leading dimension, its bias and bias
// gradient through the custom kernels), dx added to what it held.
TEST_F(cuda_split_step_test, channel_groups_run_their_rows_staged_and_in_place) {
  constexpr int k_groups = 3;
  constexpr float lr = 0.125f, momentum = 0.5f;
  struct mode {
    int parts;
    bool staged;
  };
  for (const bool fc : {false, true}) {
    for (const mode m :
         {mode{1, true}, mode{k_parts, true}, mode{1, false}, mode{k_parts, false}}) {
      const int parts = m.parts;
      const bool dx_accumulate = !m.staged;
      SCOPED_TRACE(std::string(fc ? "FC" : "CONV") + (m.staged ? " staged" : " in place") + " in " +
                   std::to_string(parts) + " micro-batches");
      layer l;
      const shape4 in{7, 3, 6, 6};
      if (fc) {
        fc_params q;
        q.out_features = 10;
        q.bias = true;
        l.type = layer_type::fc;
        l.params = q;
        l.output_shape = {7, 10, 1, 1};
      } else {
        conv_params p;
        p.out_channels = 7, p.kernel_h = p.kernel_w = 3, p.pad_h = p.pad_w = 1;
        p.bias = true;
        l.type = layer_type::conv;
        l.params = p;
        l.output_shape = {7, 7, 6, 6};
      }
      const shape4 out = l.output_shape;
      const std::int64_t K = out.c;
      const std::size_t wcount = static_cast<std::size_t>(fc ? K * in.per_image() : K * in.c * 9);
      const std::vector<float> x0 = random_vector(count_of(in), 51), w0 = random_vector(wcount, 52),
                               b0 = random_vector(static_cast<std::size_t>(K), 53),
                               dy0 = random_vector(count_of(out), 54),
                               dx0 = random_vector(count_of(in), 55),
                               vw0 = random_vector(wcount, 56),
                               vb0 = random_vector(static_cast<std::size_t>(K), 57);
      // The host's whole step, then one update.
      step_tensors t;
      const auto x = t.add(x0), w = t.add(w0), b = t.add(b0);
      const auto y = t.add(std::vector<float>(count_of(out)));
      const auto dy = t.add(dy0), dx = t.add(dx0);
      const auto dw = t.add(std::vector<float>(wcount)), db = t.add(std::vector<float>(b0.size()));
      const auto vw = t.add(vw0), vb = t.add(vb0);
      layers::step_io ref;
      ref.l = &l;
      ref.input_shapes = {in};
      ref.inputs = {t.h(x)};
      ref.output = t.h(y);
      ref.output_grad = t.h(dy);
      ref.input_grads = {{t.h(dx), dx_accumulate}};
      ref.params = {t.h(w), t.h(b)};
      ref.param_grads = {t.h(dw), t.h(db)};
      layers::layer_steps_for(l.type).forward(host_ctx(), ref);
      layers::layer_steps_for(l.type).backward(host_ctx(), ref);
      std::vector<float> w1 = w0, b1 = b0, vw1 = vw0, vb1 = vb0;
      const auto sgd = [&](std::vector<float>& weights, std::vector<float>& v,
                           const std::vector<float>& g) {
        for (std::size_t i = 0; i < weights.size(); ++i) {
          v[i] = momentum * v[i] + lr * g[i];
          weights[i] -= v[i];
        }
      };
      sgd(w1, vw1, t.host[dw]);
      sgd(b1, vb1, t.host[db]);

      // Staged: the whole values in page-locked memory. In place: t's device mirrors (y, dw
      // and db start as garbage there too).
      pinned_floats x_host(x0), dx_host(dx0), y_host(std::vector<float>(count_of(out), -7.0f)),
          dy_host(dy0), w_host(w0), b_host(b0), dw_host(std::vector<float>(wcount, -7.0f)),
          db_host(std::vector<float>(b0.size(), -7.0f)), vw_host(vw0), vb_host(vb0);
      t.device[y]->write(std::vector<float>(count_of(out), -7.0f));
      t.device[dw]->write(std::vector<float>(wcount, -7.0f));
      t.device[db]->write(std::vector<float>(b0.size(), -7.0f));
      const auto at = [&](const pinned_floats& host, std::size_t dev) {
        return m.staged ? host.get() : t.d(dev);
      };
      const std::int64_t images = (in.n + parts - 1) / parts, rows = (K + k_groups - 1) / k_groups;
      std::vector<std::unique_ptr<device_buffer>> micro;
      std::vector<layers::staged_tensor> staged;
      const auto stage = [&](const pinned_floats& whole, std::size_t count, std::int64_t n,
                             bool read, bool written, bool cut) {
        if (!m.staged) return;
        layers::staged_tensor st;
        st.whole = whole.get();
        st.n = n;
        st.per_image = static_cast<std::int64_t>(count) / n;
        st.read = read;
        st.written = written;
        st.channels = cut ? K : 0;
        std::int64_t floats = (n > 1 ? images : 1) * st.per_image;
        if (cut) floats = floats / K * rows;
        micro.push_back(std::make_unique<device_buffer>(static_cast<std::size_t>(floats)));
        st.micro = micro.back()->get();
        staged.push_back(st);
      };
      layers::step_io io;
      io.l = &l;
      io.input_shapes = {in};
      io.inputs = {m.staged && parts > 1 ? x_host.get() : t.d(x)};
      io.output = at(y_host, y);
      io.output_grad = at(dy_host, dy);
      io.input_grads = {{m.staged && parts > 1 ? dx_host.get() : t.d(dx), dx_accumulate}};
      io.params = {at(w_host, w), at(b_host, b)};
      io.param_grads = {at(dw_host, dw), at(db_host, db)};
      const layers::cuda_conv_choice none{
          conv_fallback_algorithm(conv_pass::forward, false),
          conv_fallback_algorithm(conv_pass::backward_data, false),
          conv_fallback_algorithm(conv_pass::backward_filter, false)};
      const layers::update_fn update = [&](std::size_t count, const float* g, float* weights,
                                           float* v) {
        sgd_update(ctx(), lr, momentum, 0.0f, count, g, weights, v);
      };
      if (parts > 1) stage(x_host, x0.size(), in.n, true, false, false);
      stage(w_host, wcount, 1, true, false, true);
      stage(b_host, b0.size(), 1, true, false, true);
      stage(y_host, count_of(out), in.n, false, true, true);
      const std::size_t forward_copied = layers::run_cuda_channel_split_step(
          ctx(), io, true, k_groups, parts, staged, none, {}, update);
      check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      EXPECT_EQ(forward_copied, layers::staged_copy_bytes(l.type, true, staged, parts));
      expect_near(t.host[y], m.staged ? y_host.values() : t.device[y]->read(), 2e-3, 1e-3,
                  "output");

      staged.clear();
      micro.clear();
      if (parts > 1) {
        stage(x_host, x0.size(), in.n, true, false, false);
        stage(dx_host, dx0.size(), in.n, false, true, false);
      }
      stage(dy_host, count_of(out), in.n, true, false, true);
      stage(w_host, wcount, 1, true, true, true);
      stage(b_host, b0.size(), 1, true, true, true);
      stage(dw_host, wcount, 1, parts > 1, true, true);
      stage(db_host, b0.size(), 1, parts > 1, true, true);
      stage(vw_host, wcount, 1, true, true, true);
      stage(vb_host, b0.size(), 1, true, true, true);
      const std::vector<layers::param_update> updates = {
          {at(dw_host, dw), at(w_host, w), at(vw_host, vw), wcount},
          {at(db_host, db), at(b_host, b), at(vb_host, vb), b0.size()}};
      const std::size_t backward_copied = layers::run_cuda_channel_split_step(
          ctx(), io, false, k_groups, parts, staged, none, updates, update);
      check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      EXPECT_EQ(backward_copied, layers::staged_copy_bytes(l.type, false, staged, parts));
      const auto got = [&](const pinned_floats& host, std::size_t dev) {
        return m.staged ? host.values() : t.device[dev]->read();
      };
      expect_near(t.host[dx], m.staged && parts > 1 ? dx_host.values() : t.device[dx]->read(), 2e-3,
                  1e-3, "input gradient");
      expect_near(t.host[dw], got(dw_host, dw), 2e-3, 1e-3, "weight gradient");
      expect_near(t.host[db], got(db_host, db), 1e-4, 1e-4, "bias gradient");
      expect_near(w1, got(w_host, w), 1e-3, 1e-3, "updated weights");
      expect_near(b1, got(b_host, b), 1e-4, 1e-4, "updated bias");
      expect_near(vw1, got(vw_host, vw), 1e-3, 1e-3, "weights' momenta");
      expect_near(vb1, got(vb_host, vb), 1e-4, 1e-4, "bias's momenta");
    }
  }
}

// fp16 micro-tensors (MEMWEAVE_SPLIT_COMPRESS=fp16): an ADD's two inputs and its output held as
// fp16 in page-locked memory, each micro-batch's slice (3 images of 512 Ki values: two chunks of
// the context's fp16 buffers) expanded on its way in and rounded on its way out on the device,
// the ins of one micro-batch beside the outs of the one before on the two link streams. The
// sum of two fp16 values is seldom one, so the rounding has an error to report. The output's
// halves are the host split step's bit for bit (one float addition each, and the conversion
// kernels give fp16.hpp's bits), and so is the largest rounding error.
TEST_F(cuda_split_step_test, fp16_micro_tensors_cross_with_the_host_codecs_bits) {
  layer l;
  l.type = layer_type::add;
  const shape4 in{7, 8, 256, 256};
  l.output_shape = in;
  const std::int64_t per_image = in.per_image();
  const std::size_t count = count_of(in);
  std::vector<std::uint16_t> a16(count), b16(count);
  (void)fp16_encode(a16.data(), random_vector(count, 51, -3.0f, 3.0f).data(), count);
  (void)fp16_encode(b16.data(), random_vector(count, 52, -3.0f, 3.0f).data(), count);
  // Whole values a, b, y and their micro buffers.
  const auto staged_of = [&](std::array<float*, 3> whole, std::array<float*, 3> micro) {
    std::vector<layers::staged_tensor> staged(3);
    for (std::size_t i = 0; i < 3; ++i) {
      staged[i].whole = whole[i];
      staged[i].micro = micro[i];
      staged[i].per_image = per_image;
      staged[i].n = in.n;
      staged[i].read = i < 2;
      staged[i].written = i == 2;
      staged[i].fp16 = true;
    }
    return staged;
  };
  const auto io_of = [&](const std::vector<layers::staged_tensor>& staged) {
    layers::step_io io;
    io.l = &l;
    io.input_shapes = {in, in};
    io.inputs = {staged[0].whole, staged[1].whole};
    io.output = staged[2].whole;
    return io;
  };
  const std::size_t slice = 3 * static_cast<std::size_t>(per_image);
  const auto halves = [](std::vector<std::uint16_t>& v) {
    return reinterpret_cast<float*>(v.data());
  };
  // The host's run: whole values in plain memory.
  std::vector<std::uint16_t> a_h(a16), b_h(b16), y_h(count, 0);
  std::vector<float> a_micro_h(slice), b_micro_h(slice), y_micro_h(slice);
  const auto host = staged_of({halves(a_h), halves(b_h), halves(y_h)},
                              {a_micro_h.data(), b_micro_h.data(), y_micro_h.data()});
  double host_error = 0;
  layers::run_split_step(host_ctx(), io_of(host), true, k_parts, host, &host_error);
  ASSERT_GT(host_error, 0.0) << "no value rounded: the error report is not exercised";
  // The GPU's: page-locked whole values (halves in floats' room), device micro buffers.
  const std::vector<float> room((count + 1) / 2);
  pinned_floats a_d(room), b_d(room), y_d(room);
  std::memcpy(a_d.get(), a16.data(), count * sizeof(std::uint16_t));
  std::memcpy(b_d.get(), b16.data(), count * sizeof(std::uint16_t));
  device_buffer a_micro(slice), b_micro(slice), y_micro(slice);
  const auto dev =
      staged_of({a_d.get(), b_d.get(), y_d.get()}, {a_micro.get(), b_micro.get(), y_micro.get()});
  double error = 0;
  const std::size_t copied =
      layers::run_cuda_split_step(ctx(), io_of(dev), true, k_parts, dev, {}, &error);
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");  // the host function too
  EXPECT_EQ(copied, layers::staged_copy_bytes(layer_type::add, true, dev, k_parts));
  EXPECT_EQ(copied, count * sizeof(std::uint16_t) * 3);  // a and b in, y out, as halves
  std::vector<std::uint16_t> y(count);
  std::memcpy(y.data(), y_d.get(), count * sizeof(std::uint16_t));
  EXPECT_TRUE(y == y_h) << "the output's halves differ from the host's";
  EXPECT_EQ(std::memcmp(a_d.get(), a16.data(), count * sizeof(std::uint16_t)), 0)
      << "an input, read only, changed";
  EXPECT_EQ(error, host_error);
}

TEST_F(cuda_split_step_test, dropout_masks_are_drawn_by_each_images_place_in_the_batch) {
  layer l;
  l.type = layer_type::dropout;
  l.params = dropout_params{0.4f};
  const shape4 in{7, 3, 4, 4};
  l.output_shape = in;
  step_tensors t;
  const auto x = t.add(random_vector(count_of(in), 41));
  const auto y = t.add(std::vector<float>(count_of(in)));
  const auto mask = t.add(std::vector<float>(count_of(in)));
  const auto io_of = [&](bool dev) {
    auto f = [&](std::size_t i) { return dev ? t.d(i) : t.h(i); };
    layers::step_io io;
    io.l = &l;
    io.input_shapes = {in};
    io.inputs = {f(x)};
    io.output = f(y);
    io.aux = {f(mask)};
    io.seed = 9;
    io.first_sample = 14;  // a data-parallel rank's slice: its images from 14 on
    return io;
  };
  layers::layer_steps_for(layer_type::dropout).forward(host_ctx(), io_of(false));
  layers::run_cuda_split_step(ctx(), io_of(true), true, k_parts, {}, {});
  expect_bitwise(t.host[mask], read(*t.device[mask]), "mask");
  expect_bitwise(t.host[y], read(*t.device[y]), "output");
}

}  // namespace
}  // namespace memweave::kernels::cuda::test
