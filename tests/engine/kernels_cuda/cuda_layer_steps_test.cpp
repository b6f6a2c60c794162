// The cuda layer steps (engine/layers/cuda_layer_steps.cpp) against the host steps over the
// same step_io fields: the convolution's cuDNN choice under a workspace bound, BN's running
// statistics only when asked, SOFTMAX's loss handed to *io.loss, and the SGD update bit for
// bit. Every test skips without a CUDA device.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/layers/layer_step.hpp"
#include "engine/solver/sgd.hpp"
#include "tests/engine/kernels_cuda/cuda_test_util.hpp"

namespace memweave::kernels::cuda::test {
namespace {

using cuda_layer_steps_test = cuda_test;

TEST_F(cuda_layer_steps_test, every_layer_type_has_cuda_steps) {
  for (layer_type t : {layer_type::data, layer_type::conv, layer_type::fc, layer_type::pool,
                       layer_type::act, layer_type::bn, layer_type::lrn, layer_type::dropout,
                       layer_type::softmax_loss, layer_type::concat, layer_type::add}) {
    const layers::cuda_layer_steps& s = layers::cuda_layer_steps_for(t);
    EXPECT_NE(s.forward, nullptr) << to_string(t);
    EXPECT_EQ(s.backward == nullptr, t == layer_type::data) << to_string(t);
  }
}

TEST_F(cuda_layer_steps_test, conv_step_matches_host_with_and_without_workspace) {
  layer l;
  l.type = layer_type::conv;
  conv_params p;
  p.out_channels = 8, p.kernel_h = p.kernel_w = 3, p.pad_h = p.pad_w = 1, p.stride_h = 2;
  l.params = p;
  const shape4 in{2, 3, 9, 9};
  const shape4 out{2, 8, 5, 9};
  step_tensors t;
  const auto x = t.add(random_vector(count_of(in), 1));
  const auto w = t.add(random_vector(8 * 3 * 9, 2));
  const auto b = t.add(random_vector(8, 3));
  const auto y = t.add(std::vector<float>(count_of(out)));
  const auto dy = t.add(random_vector(count_of(out), 4));
  const auto dx = t.add(std::vector<float>(count_of(in)));
  const auto dw = t.add(std::vector<float>(8 * 3 * 9));
  const auto db = t.add(std::vector<float>(8));

  const auto io_of = [&](bool dev, void* ws, std::size_t bytes) {
    auto f = [&](std::size_t i) { return dev ? t.d(i) : t.h(i); };
    layers::step_io io;
    io.l = &l;
    io.input_shapes = {in};
    io.inputs = {f(x)};
    io.output = f(y);
    io.output_grad = f(dy);
    io.input_grads = {{f(dx), false}};
    io.params = {f(w), f(b)};
    io.param_grads = {f(dw), f(db)};
    io.workspace = ws;
    io.workspace_bytes = bytes;
    return io;
  };
  const layers::layer_steps& host = layers::layer_steps_for(layer_type::conv);
  host.forward(host_ctx(), io_of(false, nullptr, 0));
  host.backward(host_ctx(), io_of(false, nullptr, 0));

  const layers::cuda_layer_steps& steps = layers::cuda_layer_steps_for(layer_type::conv);
  device_bytes big(64u << 20);
  for (std::size_t bytes : {std::size_t{0}, big.size()}) {
    SCOPED_TRACE("workspace " + std::to_string(bytes));
    steps.forward(ctx(), io_of(true, bytes ? big.get() : nullptr, bytes));
    steps.backward(ctx(), io_of(true, bytes ? big.get() : nullptr, bytes));
    expect_near(t.host[y], read(*t.device[y]), 2e-3, 1e-3, "output");
    expect_near(t.host[dx], read(*t.device[dx]), 2e-3, 1e-3, "input gradient");
    expect_near(t.host[dw], read(*t.device[dw]), 2e-3, 1e-3, "weight gradient");
    expect_near(t.host[db], read(*t.device[db]), 1e-4, 1e-4, "bias gradient");
  }
}

TEST_F(cuda_layer_steps_test, bn_step_updates_running_statistics_only_when_asked) {
  layer l;
  l.type = layer_type::bn;
  l.params = bn_params{};
  const shape4 in{4, 2, 3, 3};
  step_tensors t;
  const auto x = t.add(random_vector(count_of(in), 11, -1.0f, 3.0f));
  const auto y = t.add(std::vector<float>(count_of(in)));
  const auto gamma = t.add(random_vector(2, 12, 0.5f, 1.5f));
  const auto beta = t.add(random_vector(2, 13));
  const auto rm = t.add(random_vector(2, 14));
  const auto rv = t.add(random_vector(2, 15, 0.5f, 2.0f));
  const auto mean = t.add(std::vector<float>(2));
  const auto invstd = t.add(std::vector<float>(2));
  const std::vector<float> rm0 = t.host[rm];
  const auto io_of = [&](bool dev, bool update) {
    auto f = [&](std::size_t i) { return dev ? t.d(i) : t.h(i); };
    layers::step_io io;
    io.l = &l;
    io.input_shapes = {in};
    io.inputs = {f(x)};
    io.output = f(y);
    io.params = {f(gamma), f(beta), f(rm), f(rv)};
    io.aux = {f(mean), f(invstd)};
    io.update_running_stats = update;
    return io;
  };
  const layers::cuda_layer_steps& steps = layers::cuda_layer_steps_for(layer_type::bn);
  steps.forward(ctx(), io_of(true, false));
  expect_bitwise(rm0, read(*t.device[rm]), "running mean after a recomputed forward");
  layers::layer_steps_for(layer_type::bn).forward(host_ctx(), io_of(false, true));
  steps.forward(ctx(), io_of(true, true));
  expect_near(t.host[y], read(*t.device[y]), 1e-4, 1e-4, "output");
  expect_near(t.host[rm], read(*t.device[rm]), 1e-6, 1e-5, "running mean");
  expect_near(t.host[rv], read(*t.device[rv]), 1e-6, 1e-4, "running variance");
}

TEST_F(cuda_layer_steps_test, softmax_step_hands_the_batch_loss_to_the_executor) {
  layer l;
  l.type = layer_type::softmax_loss;
  l.params = softmax_loss_params{};
  const shape4 in{5, 7, 1, 1};
  step_tensors t;
  const auto x = t.add(random_vector(count_of(in), 21, -3.0f, 3.0f));
  const auto labels = t.add(std::vector<float>{6, 0, 2, 2, 5});
  const auto y = t.add(std::vector<float>(count_of(in)));
  const auto dx = t.add(std::vector<float>(count_of(in)));
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
  const layers::cuda_layer_steps& steps = layers::cuda_layer_steps_for(layer_type::softmax_loss);
  steps.forward(ctx(), io_of(true));
  EXPECT_NEAR(cuda_loss, host_loss, 1e-6 * (1.0 + host_loss));  // written before it returned
  steps.backward(ctx(), io_of(true));
  expect_near(t.host[dx], read(*t.device[dx]), 1e-6, 1e-5, "input gradient");
}

// The executor's way: a context on the cuda device's compute stream (native_handle), steps
// called on the host thread, results read back through the device's own copies.
TEST_F(cuda_layer_steps_test, steps_run_on_the_cuda_device_compute_stream) {
  device_options o;
  o.kind = "cuda";
  const std::unique_ptr<device> dev = make_device(o);
  stream& compute = dev->get_stream(stream_role::compute);
  cuda_kernel_context on_device(static_cast<cudaStream_t>(compute.native_handle()));
  layer l;
  l.type = layer_type::dropout;
  l.params = dropout_params{0.3f};
  const shape4 s{2, 3, 8, 8};
  const std::size_t bytes = s.bytes();
  const auto x = random_vector(count_of(s), 41);
  std::vector<float> y_ref(count_of(s)), mask_ref(count_of(s));
  host::dropout_forward(host_ctx(), s, dropout_params{0.3f}, 7, x.data(), y_ref.data(),
                        mask_ref.data());
  float* dx = static_cast<float*>(dev->allocate(3 * bytes));
  float* dy = dx + count_of(s);
  float* dmask = dy + count_of(s);
  compute.copy_async(dx, x.data(), bytes, copy_kind::host_to_device);
  layers::step_io io;
  io.l = &l;
  io.input_shapes = {s};
  io.inputs = {dx};
  io.output = dy;
  io.aux = {dmask};
  io.seed = 7;
  layers::cuda_layer_steps_for(layer_type::dropout).forward(on_device, io);
  std::vector<float> y(count_of(s)), mask(count_of(s));
  compute.copy_async(y.data(), dy, bytes, copy_kind::device_to_host);
  compute.copy_async(mask.data(), dmask, bytes, copy_kind::device_to_host);
  compute.synchronize();
  dev->deallocate(dx, 3 * bytes);
  expect_bitwise(mask_ref, mask, "mask");
  expect_bitwise(y_ref, y, "output");
}

TEST_F(cuda_layer_steps_test, sgd_update_is_bit_identical_to_the_host_solver) {
  const sgd_options o{0.05f, 0.9f, 5e-4f};
  const std::size_t count = 10007;
  const auto g = random_vector(count, 31), w0 = random_vector(count, 32),
             v0 = random_vector(count, 33, -0.1f, 0.1f);
  std::vector<float> w = w0, v = v0;
  device_buffer dg(g), dw(w0), dv(v0);
  for (int step = 0; step < 3; ++step) {
    memweave::sgd_update(host_ctx(), o, count, g.data(), w.data(), v.data());
    sgd_update(ctx(), o.learning_rate, o.momentum, o.weight_decay, count, dg.get(), dw.get(),
               dv.get());
  }
  expect_bitwise(w, read(dw), "weights");
  expect_bitwise(v, read(dv), "momenta");
}

}  // namespace
}  // namespace memweave::kernels::cuda::test
