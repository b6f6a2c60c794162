// Issue 12 on a real GPU: a deterministic context lists and chooses only deterministic
// cuDNN algorithms and gives bit-identical convolution gradients run after run; the cuBLAS
// workspace comes from a memweave heap and goes back to it. Every test skips without a CUDA
// device (fails with MEMWEAVE_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "memweave/alloc/device_heap.hpp"
#include "tests/engine/kernels_cuda/cuda_test_util.hpp"

namespace memweave::kernels::cuda::test {
namespace {

// A stream with a deterministic context on it.
class deterministic_test : public cuda_test {
 protected:
  void SetUp() override {
    cuda_test::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    cuda_kernel_options o;
    o.deterministic = true;
    ctx_ = std::make_unique<cuda_kernel_context>(stream_, o);
  }
};

struct conv_case {
  shape4 in;
  conv_params p;
};

// Shapes where cuDNN's fastest backward algorithms are usually the atomic ALGO_0 ones.
std::vector<conv_case> conv_cases() {
  std::vector<conv_case> out;
  conv_params a;
  a.out_channels = 64, a.kernel_h = a.kernel_w = 3, a.pad_h = a.pad_w = 1;
  out.push_back({{8, 32, 28, 28}, a});
  conv_params b;
  b.out_channels = 128, b.kernel_h = b.kernel_w = 1, b.stride_h = b.stride_w = 2;
  out.push_back({{16, 64, 14, 14}, b});
  conv_params c = a;
  c.groups = 4;
  out.push_back({{4, 64, 17, 17}, c});
  return out;
}

std::string text(const conv_case& c) {
  return "in " + std::to_string(c.in.n) + "x" + std::to_string(c.in.c) + "x" +
         std::to_string(c.in.h) + "x" + std::to_string(c.in.w) +
         " oc=" + std::to_string(c.p.out_channels) + " k=" + std::to_string(c.p.kernel_h) +
         " g=" + std::to_string(c.p.groups);
}

TEST_F(deterministic_test, listings_and_choices_are_deterministic_only) {
  ASSERT_TRUE(ctx().deterministic());
  for (const conv_case& c : conv_cases()) {
    SCOPED_TRACE(text(c));
    for (conv_pass pass :
         {conv_pass::forward, conv_pass::backward_data, conv_pass::backward_filter}) {
      for (const conv_algo_perf& e : conv_algorithms(ctx(), pass, c.in, c.p)) {
        EXPECT_TRUE(e.deterministic) << to_string(pass) << " " << conv_algo_name(pass, e.algo);
        EXPECT_TRUE(conv_algo_documented_deterministic(pass, e.algo))
            << to_string(pass) << " " << conv_algo_name(pass, e.algo);
      }
      // Ample workspace, and none (the fixed fallback's path).
      for (std::size_t ws : {std::size_t{1} << 30, std::size_t{0}}) {
        int algo = -1;
        try {
          algo = choose_conv_algorithm(ctx(), pass, c.in, c.p, ws);
        } catch (const device_error&) {
          continue;  // nothing deterministic fits in no workspace here: an honest refusal
        }
        EXPECT_TRUE(conv_algo_documented_deterministic(pass, algo))
            << to_string(pass) << " chose " << conv_algo_name(pass, algo) << " with " << ws
            << " bytes";
      }
    }
  }
}

TEST_F(deterministic_test, measured_candidates_are_deterministic_only) {
  const conv_case c = conv_cases().front();
  const shape4 out = c.p.output(c.in);
  device_buffer x(count_of(c.in)), w(count_of({c.p.out_channels, c.in.c, 3, 3})), y(count_of(out));
  device_bytes ws(std::size_t{64} << 20);
  conv_measure_buffers b{x.get(), w.get(), y.get(), ws.get(), ws.size()};
  for (conv_pass pass : {conv_pass::backward_data, conv_pass::backward_filter}) {
    for (const conv_algo_perf& e : measure_conv_algorithms(ctx(), pass, c.in, c.p, b)) {
      EXPECT_TRUE(e.deterministic && conv_algo_documented_deterministic(pass, e.algo))
          << to_string(pass) << " " << conv_algo_name(pass, e.algo);
    }
  }
}

TEST_F(deterministic_test, backward_gradients_are_bit_identical_across_runs) {
  for (const conv_case& c : conv_cases()) {
    SCOPED_TRACE(text(c));
    const shape4 out = c.p.output(c.in);
    const shape4 wshape{c.p.out_channels, c.in.c / c.p.groups, c.p.kernel_h, c.p.kernel_w};
    const device_buffer x(random_vector(count_of(c.in), 1)), w(random_vector(count_of(wshape), 2)),
        dy(random_vector(count_of(out), 3));
    const std::size_t ws_bytes = std::size_t{256} << 20;
    const device_bytes ws(ws_bytes);
    const conv_algos a = choose_conv_algorithms(ctx(), c.in, c.p, ws_bytes, ws_bytes);
    EXPECT_TRUE(conv_algo_documented_deterministic(conv_pass::backward_data, a.backward_data));
    EXPECT_TRUE(conv_algo_documented_deterministic(conv_pass::backward_filter, a.backward_filter));
    std::vector<float> dx_runs[2], dw_runs[2];
    for (int run = 0; run < 2; ++run) {
      device_buffer dx(count_of(c.in)), dw(count_of(wshape)),
          db(static_cast<std::size_t>(c.p.out_channels));
      conv_backward_data(ctx(), a.backward_data, ws.get(), ws_bytes, c.in, c.p, w.get(), dy.get(),
                         dx.get(), false);
      conv_backward_filter(ctx(), a.backward_filter, ws.get(), ws_bytes, c.in, c.p, x.get(),
                           dy.get(), dw.get(), db.get());
      dx_runs[run] = read(dx);
      dw_runs[run] = read(dw);
    }
    expect_bitwise(
        dx_runs[0], dx_runs[1],
        std::string("dx by ") + conv_algo_name(conv_pass::backward_data, a.backward_data));
    expect_bitwise(
        dw_runs[0], dw_runs[1],
        std::string("dw by ") + conv_algo_name(conv_pass::backward_filter, a.backward_filter));
  }
}

// cuBLAS runs with no workspace (so a heap's budget, which `plan` models, holds every byte a
// step uses): the GEMMs of a ResNet-50-sized FC (batch 64, 2048 -> 1000), forward and both
// backward passes, still run and match the host, and taking a device heap's memory is left
// to the heap alone (a context made beside a heap takes nothing from it).
TEST_F(cuda_test, cublas_runs_without_a_workspace_and_takes_nothing_from_a_heap) {
  device_options dopts;
  dopts.kind = "cuda";
  auto dev = make_device(dopts);
  heap_options h;
  h.pool_bytes = std::size_t{1} << 20;  // below any workspace cuBLAS would want
  device_heap heap(*dev, h);
  cuda_kernel_context c(stream_, cuda_kernel_options{});
  const shape4 in{64, 2048, 1, 1};
  fc_params p;
  p.out_features = 1000;
  const std::size_t n = 64, k = 2048, o = 1000;
  const auto xv = random_vector(n * k, 4), wv = random_vector(o * k, 5), bv = random_vector(o, 6),
             dyv = random_vector(n * o, 7);
  device_buffer x(xv), w(wv), b(bv), dy(dyv), y(n * o), dx(n * k), dw(o * k), db(o);
  fc_forward(c, in, p, x.get(), w.get(), b.get(), y.get());
  fc_backward_data(c, in, p, w.get(), dy.get(), dx.get(), false);
  fc_backward_weights(c, in, p, x.get(), dy.get(), dw.get(), db.get());
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  std::vector<float> y_ref(n * o), dx_ref(n * k), dw_ref(o * k), db_ref(o);
  host::fc_forward(host_ctx(), in, p, xv.data(), wv.data(), bv.data(), y_ref.data());
  host::fc_backward_data(host_ctx(), in, p, wv.data(), dyv.data(), dx_ref.data(), false);
  host::fc_backward_weights(host_ctx(), in, p, xv.data(), dyv.data(), dw_ref.data(), db_ref.data());
  // Sums of 2048 (forward, weights: 64) products in other orders: close, not bit-identical.
  expect_near(y_ref, y.read(), 1e-3, 1e-3, "fc_forward without a workspace");
  expect_near(dx_ref, dx.read(), 1e-3, 1e-3, "fc_backward_data without a workspace");
  expect_near(dw_ref, dw.read(), 1e-3, 1e-3, "fc_backward_weights without a workspace");
  expect_near(db_ref, db.read(), 1e-3, 1e-3, "the bias gradient");
  EXPECT_EQ(heap.stats().bytes_in_use, 0u);
  EXPECT_EQ(heap.stats().allocations, 0u);
}

}  // namespace
}  // namespace memweave::kernels::cuda::test
