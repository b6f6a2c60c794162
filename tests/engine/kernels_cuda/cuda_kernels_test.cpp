// The cuda kernels against the host kernels: random small inputs, every layer type, forward
// and backward (overwriting and accumulating), within stated tolerances; the custom
// element-wise kernels (dropout, CONCAT, ADD, softmax gradient) bit for bit; the cuDNN
// convolution listings and choice. Every test skips without a CUDA device.
//
// Tolerances: |cuda - host| <= atol + rtol * |host|. cuDNN and cuBLAS sum in other orders
// than the host (and FFT/Winograd convolutions transform), so sums of k terms of size ~1
// differ by ~k * 2^-24 relative; the bounds below leave a wide margin over that while
// staying far below any real error (a wrong index or a missing term is off by ~0.1-1).
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "memweave/core/error.hpp"
#include "tests/engine/kernels_cuda/cuda_test_util.hpp"

namespace memweave::kernels::cuda::test {
namespace {

namespace h = kernels::host;

constexpr double k_atol = 1e-4, k_rtol = 1e-4;            // cuDNN/cuBLAS FMA sums vs the host
constexpr double k_conv_atol = 2e-3, k_conv_rtol = 1e-3;  // also FFT / Winograd algorithms

using cuda_kernels_test = cuda_test;

// ---- context ---------------------------------------------------------------------------

TEST_F(cuda_kernels_test, context_binds_both_handles_to_its_stream_in_fp32_math) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudnnGetStream(ctx().cudnn(), &s), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(s, stream_);
  s = nullptr;
  ASSERT_EQ(cublasGetStream(ctx().cublas(), &s), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(s, stream_);
  cublasMath_t m{};
  ASSERT_EQ(cublasGetMathMode(ctx().cublas(), &m), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(m, CUBLAS_DEFAULT_MATH);
  EXPECT_EQ(cuda_kernel_context::cudnn_math, CUDNN_FMA_MATH);
}

TEST_F(cuda_kernels_test, null_tensor_is_rejected_before_anything_runs) {
  const shape4 s{2, 3, 4, 4};
  device_buffer y(count_of(s));
  EXPECT_THROW(act_forward(ctx(), s, act_params{}, nullptr, y.get()), invalid_argument);
  EXPECT_THROW(
      pool_forward(ctx(), s, pool_params{pool_mode::max, 3, 3, 1, 1, 3, 0}, y.get(), y.get()),
      invalid_argument);  // pad >= kernel
}

// ---- CONV ------------------------------------------------------------------------------

struct conv_case {
  const char* name;
  shape4 in;
  conv_params p;
};

std::vector<conv_case> conv_cases() {
  std::vector<conv_case> c;
  conv_params a;  // 3x3, pad 1, bias
  a.out_channels = 6, a.kernel_h = a.kernel_w = 3, a.pad_h = a.pad_w = 1;
  c.push_back({"3x3_pad1_bias", {2, 4, 7, 7}, a});
  conv_params b;  // groups 2, dilation, stride, asymmetric
  b.out_channels = 4, b.kernel_h = 3, b.kernel_w = 2, b.stride_h = 2, b.stride_w = 1;
  b.pad_h = 1, b.pad_w = 0, b.dilation_h = 2, b.dilation_w = 1, b.groups = 2;
  c.push_back({"grouped_dilated_strided", {2, 4, 9, 8}, b});
  conv_params d;  // 1x1 without bias
  d.out_channels = 5, d.bias = false;
  c.push_back({"1x1_no_bias", {3, 8, 5, 5}, d});
  conv_params e;  // depthwise
  e.out_channels = 4, e.kernel_h = e.kernel_w = 3, e.pad_h = e.pad_w = 1, e.groups = 4;
  c.push_back({"depthwise", {2, 4, 6, 6}, e});
  return c;
}

shape4 conv_out(const shape4& in, const conv_params& p) {
  const std::int64_t eh = p.dilation_h * (p.kernel_h - 1) + 1;
  const std::int64_t ew = p.dilation_w * (p.kernel_w - 1) + 1;
  return {in.n, p.out_channels, (in.h + 2 * p.pad_h - eh) / p.stride_h + 1,
          (in.w + 2 * p.pad_w - ew) / p.stride_w + 1};
}

// Host and device copies of one convolution's tensors, and the host reference results.
struct conv_data {
  shape4 in, out;
  std::vector<float> x, w, b, dy, dx0, y_ref, dx_ref, dx_acc_ref, dw_ref, db_ref;

  conv_data(const conv_case& c, const h::kernel_context& hc) : in(c.in), out(conv_out(c.in, c.p)) {
    const std::size_t wc = static_cast<std::size_t>(c.p.out_channels * (in.c / c.p.groups) *
                                                    c.p.kernel_h * c.p.kernel_w);
    x = random_vector(count_of(in), 1);
    w = random_vector(wc, 2);
    b = random_vector(static_cast<std::size_t>(c.p.out_channels), 3);
    dy = random_vector(count_of(out), 4);
    dx0 = random_vector(count_of(in), 5);
    const h::conv_config cfg{};  // direct: the plainest reference
    y_ref.resize(count_of(out));
    h::conv_forward(hc, cfg, in, c.p, x.data(), w.data(), b.data(), y_ref.data());
    dx_ref.resize(count_of(in));
    h::conv_backward_data(hc, cfg, in, c.p, w.data(), dy.data(), dx_ref.data(), false);
    dx_acc_ref = dx0;
    h::conv_backward_data(hc, cfg, in, c.p, w.data(), dy.data(), dx_acc_ref.data(), true);
    dw_ref.resize(wc);
    db_ref.resize(b.size());
    h::conv_backward_filter(hc, cfg, in, c.p, x.data(), dy.data(), dw_ref.data(),
                            c.p.bias ? db_ref.data() : nullptr);
  }
};

TEST_F(cuda_kernels_test, conv_listings_offer_at_least_one_algorithm_for_every_pass) {
  for (const conv_case& c : conv_cases()) {
    for (conv_pass pass :
         {conv_pass::forward, conv_pass::backward_data, conv_pass::backward_filter}) {
      const auto& list = conv_algorithms(ctx(), pass, c.in, c.p);
      EXPECT_FALSE(list.empty()) << c.name << " " << to_string(pass);
      // Cached: the same list object the second time.
      EXPECT_EQ(&list, &conv_algorithms(ctx(), pass, c.in, c.p));
      for (const conv_algo_perf& e : list) {
        EXPECT_EQ(e.workspace_bytes, conv_workspace_bytes(ctx(), pass, e.algo, c.in, c.p))
            << c.name << " " << to_string(pass) << " " << conv_algo_name(pass, e.algo);
      }
    }
  }
}

TEST_F(cuda_kernels_test, conv_choice_respects_the_workspace_bound) {
  for (const conv_case& c : conv_cases()) {
    for (conv_pass pass :
         {conv_pass::forward, conv_pass::backward_data, conv_pass::backward_filter}) {
      for (std::size_t bytes : {std::size_t{0}, std::size_t{1} << 20, std::size_t{1} << 30}) {
        const int algo = choose_conv_algorithm(ctx(), pass, c.in, c.p, bytes);
        EXPECT_LE(conv_workspace_bytes(ctx(), pass, algo, c.in, c.p), bytes)
            << c.name << " " << to_string(pass) << " bound " << bytes;
      }
    }
  }
}

TEST_F(cuda_kernels_test, conv_measurement_times_algorithms_fastest_first) {
  const conv_case c = conv_cases()[0];
  conv_data d(c, host_ctx());
  device_buffer x(d.x), w(d.w), y(d.dy);
  device_bytes ws(64u << 20);
  for (conv_pass pass :
       {conv_pass::forward, conv_pass::backward_data, conv_pass::backward_filter}) {
    const auto list = measure_conv_algorithms(ctx(), pass, c.in, c.p,
                                              {x.get(), w.get(), y.get(), ws.get(), ws.size()});
    ASSERT_FALSE(list.empty()) << to_string(pass);
    for (std::size_t i = 0; i < list.size(); ++i) {
      EXPECT_GE(list[i].time_ms, 0.0f) << to_string(pass);
      EXPECT_LE(list[i].workspace_bytes, ws.size()) << to_string(pass);
      if (i > 0) {
        EXPECT_LE(list[i - 1].time_ms, list[i].time_ms) << to_string(pass);
      }
    }
  }
}

// Every listed algorithm of every pass against the host, with a workspace of its size.
TEST_F(cuda_kernels_test, conv_matches_host_for_every_listed_algorithm) {
  constexpr std::size_t k_max_workspace = 512u << 20;
  for (const conv_case& c : conv_cases()) {
    SCOPED_TRACE(c.name);
    conv_data d(c, host_ctx());
    device_buffer x(d.x), w(d.w), b(d.b), dy(d.dy), y(count_of(d.out)), dx(count_of(d.in)),
        dw(d.w.size()), db(d.b.size());
    for (const conv_algo_perf& e : conv_algorithms(ctx(), conv_pass::forward, c.in, c.p)) {
      if (e.workspace_bytes > k_max_workspace) continue;
      device_bytes ws(e.workspace_bytes);
      conv_forward(ctx(), static_cast<cudnnConvolutionFwdAlgo_t>(e.algo), ws.get(), ws.size(), c.in,
                   c.p, x.get(), w.get(), b.get(), y.get());
      expect_near(d.y_ref, read(y), k_conv_atol, k_conv_rtol,
                  std::string("forward ") + conv_algo_name(conv_pass::forward, e.algo));
    }
    for (const conv_algo_perf& e : conv_algorithms(ctx(), conv_pass::backward_data, c.in, c.p)) {
      if (e.workspace_bytes > k_max_workspace) continue;
      device_bytes ws(e.workspace_bytes);
      const auto algo = static_cast<cudnnConvolutionBwdDataAlgo_t>(e.algo);
      const std::string name = conv_algo_name(conv_pass::backward_data, e.algo);
      conv_backward_data(ctx(), algo, ws.get(), ws.size(), c.in, c.p, w.get(), dy.get(), dx.get(),
                         false);
      expect_near(d.dx_ref, read(dx), k_conv_atol, k_conv_rtol, "backward data " + name);
      dx.write(d.dx0);
      conv_backward_data(ctx(), algo, ws.get(), ws.size(), c.in, c.p, w.get(), dy.get(), dx.get(),
                         true);
      expect_near(d.dx_acc_ref, read(dx), k_conv_atol, k_conv_rtol,
                  "accumulating backward data " + name);
    }
    for (const conv_algo_perf& e : conv_algorithms(ctx(), conv_pass::backward_filter, c.in, c.p)) {
      if (e.workspace_bytes > k_max_workspace) continue;
      device_bytes ws(e.workspace_bytes);
      conv_backward_filter(ctx(), static_cast<cudnnConvolutionBwdFilterAlgo_t>(e.algo), ws.get(),
                           ws.size(), c.in, c.p, x.get(), dy.get(), dw.get(),
                           c.p.bias ? db.get() : nullptr);
      const std::string name = conv_algo_name(conv_pass::backward_filter, e.algo);
      expect_near(d.dw_ref, read(dw), k_conv_atol, k_conv_rtol, "backward filter " + name);
      if (c.p.bias) expect_near(d.db_ref, read(db), k_atol, k_rtol, "bias gradient " + name);
    }
  }
}

TEST_F(cuda_kernels_test, conv_with_too_small_a_workspace_is_rejected) {
  const conv_case c = conv_cases()[0];
  for (const conv_algo_perf& e : conv_algorithms(ctx(), conv_pass::forward, c.in, c.p)) {
    if (e.workspace_bytes == 0) continue;
    device_buffer x(count_of(c.in)), w(6 * 4 * 9), b(6), y(count_of(conv_out(c.in, c.p)));
    EXPECT_THROW(conv_forward(ctx(), static_cast<cudnnConvolutionFwdAlgo_t>(e.algo), nullptr, 0,
                              c.in, c.p, x.get(), w.get(), b.get(), y.get()),
                 invalid_argument);
    return;
  }
  GTEST_SKIP() << "every forward algorithm listed for this shape needs no workspace";
}

// ---- FC --------------------------------------------------------------------------------

TEST_F(cuda_kernels_test, fc_matches_host_forward_and_backward) {
  for (bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "bias" : "no bias");
    const shape4 in{4, 3, 2, 2};
    fc_params p;
    p.out_features = 5, p.bias = bias;
    const std::size_t k = 12, o = 5, n = 4;
    const auto x = random_vector(n * k, 11), w = random_vector(o * k, 12), b = random_vector(o, 13),
               dy = random_vector(n * o, 14), dx0 = random_vector(n * k, 15);
    std::vector<float> y_ref(n * o), dx_ref(n * k), dx_acc = dx0, dw_ref(o * k), db_ref(o);
    h::fc_forward(host_ctx(), in, p, x.data(), w.data(), b.data(), y_ref.data());
    h::fc_backward_data(host_ctx(), in, p, w.data(), dy.data(), dx_ref.data(), false);
    h::fc_backward_data(host_ctx(), in, p, w.data(), dy.data(), dx_acc.data(), true);
    h::fc_backward_weights(host_ctx(), in, p, x.data(), dy.data(), dw_ref.data(),
                           bias ? db_ref.data() : nullptr);

    device_buffer dx_(x), dw_(w), db_(b), ddy(dy), dy_out(n * o), ddx(n * k), ddw(o * k), ddb(o);
    fc_forward(ctx(), in, p, dx_.get(), dw_.get(), db_.get(), dy_out.get());
    expect_near(y_ref, read(dy_out), k_atol, k_rtol, "forward");
    fc_backward_data(ctx(), in, p, dw_.get(), ddy.get(), ddx.get(), false);
    expect_near(dx_ref, read(ddx), k_atol, k_rtol, "backward data");
    ddx.write(dx0);
    fc_backward_data(ctx(), in, p, dw_.get(), ddy.get(), ddx.get(), true);
    expect_near(dx_acc, read(ddx), k_atol, k_rtol, "accumulating backward data");
    fc_backward_weights(ctx(), in, p, dx_.get(), ddy.get(), ddw.get(), bias ? ddb.get() : nullptr);
    expect_near(dw_ref, read(ddw), k_atol, k_rtol, "weight gradient");
    if (bias) expect_near(db_ref, read(ddb), k_atol, k_rtol, "bias gradient");
  }
}

// ---- POOL ------------------------------------------------------------------------------

TEST_F(cuda_kernels_test, pool_matches_host_for_max_average_and_global) {
  struct pool_case {
    const char* name;
    pool_params p;
  };
  pool_params max_pad{pool_mode::max, 3, 3, 2, 2, 1, 1, false};
  pool_params max_plain{pool_mode::max, 2, 2, 2, 2, 0, 0, false};
  pool_params avg_pad{pool_mode::average, 3, 3, 2, 2, 1, 1, false};
  pool_params global{pool_mode::average, 2, 2, 2, 2, 0, 0, true};
  const shape4 in{2, 3, 7, 6};
  for (const pool_case& c :
       {pool_case{"max padded overlapping", max_pad}, pool_case{"max 2x2", max_plain},
        pool_case{"average padded", avg_pad}, pool_case{"global average", global}}) {
    SCOPED_TRACE(c.name);
    const shape4 out =
        c.p.global ? shape4{in.n, in.c, 1, 1}
                   : shape4{in.n, in.c, (in.h + 2 * c.p.pad_h - c.p.kernel_h) / c.p.stride_h + 1,
                            (in.w + 2 * c.p.pad_w - c.p.kernel_w) / c.p.stride_w + 1};
    const auto x = distinct_vector(count_of(in), 21);
    const auto dy = random_vector(count_of(out), 22), dx0 = random_vector(count_of(in), 23);
    std::vector<float> y_ref(count_of(out)), dx_ref(count_of(in)), dx_acc = dx0;
    h::pool_forward(host_ctx(), in, c.p, x.data(), y_ref.data());
    h::pool_backward(host_ctx(), in, c.p, x.data(), y_ref.data(), dy.data(), dx_ref.data(), false);
    h::pool_backward(host_ctx(), in, c.p, x.data(), y_ref.data(), dy.data(), dx_acc.data(), true);

    device_buffer dx_(x), dy_(dy), y(count_of(out)), dx(count_of(in));
    pool_forward(ctx(), in, c.p, dx_.get(), y.get());
    expect_near(y_ref, read(y), k_atol, k_rtol, "forward");
    const bool max = c.p.mode == pool_mode::max;
    // Average pooling's backward gets no x or y, as from the engine.
    pool_backward(ctx(), in, c.p, max ? dx_.get() : nullptr, max ? y.get() : nullptr, dy_.get(),
                  dx.get(), false);
    expect_near(dx_ref, read(dx), k_atol, k_rtol, "backward");
    dx.write(dx0);
    pool_backward(ctx(), in, c.p, max ? dx_.get() : nullptr, max ? y.get() : nullptr, dy_.get(),
                  dx.get(), true);
    expect_near(dx_acc, read(dx), k_atol, k_rtol, "accumulating backward");
  }
}

TEST_F(cuda_kernels_test, adaptive_average_pool_gives_the_host_s_bits) {
  // Overlapping windows of two sizes, repeated rows (more outputs than rows), and 7x7 from a
  // side that is no multiple of 7 (VGG16's avgpool).
  for (const auto& [in, oh, ow] :
       {std::tuple{shape4{2, 3, 7, 6}, 3, 4}, std::tuple{shape4{1, 2, 5, 3}, 7, 2},
        std::tuple{shape4{1, 4, 17, 12}, 7, 7}}) {
    SCOPED_TRACE(to_string(in));
    const pool_params p{.mode = pool_mode::average, .adaptive_h = oh, .adaptive_w = ow};
    const shape4 out{in.n, in.c, oh, ow};
    const auto x = random_vector(count_of(in), 24);
    const auto dy = random_vector(count_of(out), 25), dx0 = random_vector(count_of(in), 26);
    std::vector<float> y_ref(count_of(out)), dx_ref(count_of(in)), dx_acc = dx0;
    h::pool_forward(host_ctx(), in, p, x.data(), y_ref.data());
    h::pool_backward(host_ctx(), in, p, nullptr, nullptr, dy.data(), dx_ref.data(), false);
    h::pool_backward(host_ctx(), in, p, nullptr, nullptr, dy.data(), dx_acc.data(), true);

    device_buffer x_(x), dy_(dy), y(count_of(out)), dx(count_of(in));
    pool_forward(ctx(), in, p, x_.get(), y.get());
    EXPECT_EQ(y_ref, read(y));
    pool_backward(ctx(), in, p, nullptr, nullptr, dy_.get(), dx.get(), false);
    EXPECT_EQ(dx_ref, read(dx));
    dx.write(dx0);
    pool_backward(ctx(), in, p, nullptr, nullptr, dy_.get(), dx.get(), true);
    EXPECT_EQ(dx_acc, read(dx));
  }
}

// ---- ACT -------------------------------------------------------------------------------

TEST_F(cuda_kernels_test, act_matches_host_forward_and_backward_also_in_place) {
  const shape4 s{2, 3, 5, 4};
  for (act_mode mode : {act_mode::relu, act_mode::tanh, act_mode::sigmoid}) {
    SCOPED_TRACE(mode == act_mode::relu ? "relu" : mode == act_mode::tanh ? "tanh" : "sigmoid");
    const act_params p{mode};
    const auto x = random_vector(count_of(s), 31, -2.0f, 2.0f);
    const auto dy = random_vector(count_of(s), 32), dx0 = random_vector(count_of(s), 33);
    std::vector<float> y_ref(count_of(s)), dx_ref(count_of(s)), dx_acc = dx0;
    h::act_forward(host_ctx(), s, p, x.data(), y_ref.data());
    h::act_backward(host_ctx(), s, p, y_ref.data(), dy.data(), dx_ref.data(), false);
    h::act_backward(host_ctx(), s, p, y_ref.data(), dy.data(), dx_acc.data(), true);

    device_buffer y(x), ddy(dy), dx(dx0);
    act_forward(ctx(), s, p, y.get(), y.get());  // in place
    expect_near(y_ref, read(y), 1e-6, 1e-5, "forward in place");
    // The backward from the host's y: the custom kernel gives the host's bits.
    y.write(y_ref);
    act_backward(ctx(), s, p, y.get(), ddy.get(), dx.get(), true);
    expect_bitwise(dx_acc, read(dx), "accumulating backward");
    act_backward(ctx(), s, p, y.get(), ddy.get(), ddy.get(), false);  // dx == dy
    expect_bitwise(dx_ref, read(ddy), "backward in place");
  }
}

// ---- BN --------------------------------------------------------------------------------

TEST_F(cuda_kernels_test, bn_matches_host_statistics_output_and_running_update) {
  const shape4 in{4, 3, 5, 5};
  const bn_params p{1e-5f, 0.1f};
  const std::size_t c = 3;
  const auto x = random_vector(count_of(in), 41, -2.0f, 3.0f);
  const auto gamma = random_vector(c, 42, 0.5f, 1.5f), beta = random_vector(c, 43);
  const auto rm0 = random_vector(c, 44), rv0 = random_vector(c, 45, 0.5f, 2.0f);
  std::vector<float> y_ref(count_of(in)), mean_ref(c), invstd_ref(c), rm_ref = rm0, rv_ref = rv0;
  h::bn_forward_training(host_ctx(), in, p, x.data(), gamma.data(), beta.data(), y_ref.data(),
                         mean_ref.data(), invstd_ref.data());
  h::bn_update_running(in, p, mean_ref.data(), invstd_ref.data(), rm_ref.data(), rv_ref.data());

  device_buffer dx_(x), dg(gamma), db(beta), y(count_of(in)), mean(c), invstd(c), rm(rm0), rv(rv0);
  // Without running statistics (a recomputed forward): they stay untouched.
  bn_forward_training(ctx(), in, p, dx_.get(), dg.get(), db.get(), y.get(), mean.get(),
                      invstd.get());
  expect_near(y_ref, read(y), k_atol, k_rtol, "output");
  expect_near(mean_ref, read(mean), 1e-6, 1e-5, "saved mean");
  expect_near(invstd_ref, read(invstd), 1e-6, 1e-4, "saved inverse std");
  expect_bitwise(rm0, read(rm), "running mean untouched");
  // With them: the host's update.
  bn_forward_training(ctx(), in, p, dx_.get(), dg.get(), db.get(), y.get(), mean.get(),
                      invstd.get(), rm.get(), rv.get());
  expect_near(rm_ref, read(rm), 1e-6, 1e-5, "running mean");
  expect_near(rv_ref, read(rv), 1e-6, 1e-4, "running variance");
  EXPECT_THROW(bn_forward_training(ctx(), in, p, dx_.get(), dg.get(), db.get(), y.get(), mean.get(),
                                   invstd.get(), rm.get(), nullptr),
               invalid_argument);
}

TEST_F(cuda_kernels_test, bn_backward_matches_host_with_and_without_input_gradient) {
  const shape4 in{3, 4, 4, 5};
  const bn_params p{1e-5f, 0.1f};
  const std::size_t c = 4;
  const auto x = random_vector(count_of(in), 51, -1.0f, 2.0f);
  const auto gamma = random_vector(c, 52, 0.5f, 1.5f), beta = random_vector(c, 53);
  const auto dy = random_vector(count_of(in), 54), dx0 = random_vector(count_of(in), 55);
  std::vector<float> y(count_of(in)), mean(c), invstd(c), dx_ref(count_of(in)),
      dx_acc = dx0, dgamma_ref(c), dbeta_ref(c);
  h::bn_forward_training(host_ctx(), in, p, x.data(), gamma.data(), beta.data(), y.data(),
                         mean.data(), invstd.data());
  h::bn_backward(host_ctx(), in, p, x.data(), mean.data(), invstd.data(), gamma.data(), dy.data(),
                 dx_ref.data(), dgamma_ref.data(), dbeta_ref.data(), false);
  h::bn_backward(host_ctx(), in, p, x.data(), mean.data(), invstd.data(), gamma.data(), dy.data(),
                 dx_acc.data(), dgamma_ref.data(), dbeta_ref.data(), true);

  // The device gets the host's saved statistics, so only the backward is compared.
  device_buffer dx_(x), dm(mean), di(invstd), dg(gamma), ddy(dy), dx(count_of(in)), dgamma(c),
      dbeta(c);
  bn_backward(ctx(), in, p, dx_.get(), dm.get(), di.get(), dg.get(), ddy.get(), dx.get(),
              dgamma.get(), dbeta.get(), false);
  expect_near(dx_ref, read(dx), k_atol, 1e-3, "input gradient");
  expect_near(dgamma_ref, read(dgamma), k_atol, k_rtol, "gamma gradient");
  expect_near(dbeta_ref, read(dbeta), k_atol, k_rtol, "beta gradient");
  dx.write(dx0);
  bn_backward(ctx(), in, p, dx_.get(), dm.get(), di.get(), dg.get(), ddy.get(), dx.get(),
              dgamma.get(), dbeta.get(), true);
  expect_near(dx_acc, read(dx), k_atol, 1e-3, "accumulating input gradient");
  // No input gradient: the custom reduction gives the parameter gradients alone.
  dgamma.write(std::vector<float>(c, 0.0f));
  dbeta.write(std::vector<float>(c, 0.0f));
  bn_backward(ctx(), in, p, dx_.get(), dm.get(), di.get(), dg.get(), ddy.get(), nullptr,
              dgamma.get(), dbeta.get(), false);
  expect_near(dgamma_ref, read(dgamma), 1e-5, 1e-5, "gamma gradient without dx");
  expect_near(dbeta_ref, read(dbeta), 1e-5, 1e-5, "beta gradient without dx");
}

// ---- LRN -------------------------------------------------------------------------------

TEST_F(cuda_kernels_test, lrn_matches_host_forward_and_backward) {
  const shape4 in{2, 7, 3, 4};
  for (std::int64_t size : {5, 4}) {
    SCOPED_TRACE("size " + std::to_string(size));
    lrn_params p;
    p.size = size, p.alpha = 1e-2f, p.beta = 0.75f, p.k = 2.0f;  // alpha large enough to matter
    const auto x = random_vector(count_of(in), 61, -3.0f, 3.0f);
    const auto dy = random_vector(count_of(in), 62), dx0 = random_vector(count_of(in), 63);
    std::vector<float> y_ref(count_of(in)), dx_ref(count_of(in)), dx_acc = dx0;
    h::lrn_forward(host_ctx(), in, p, x.data(), y_ref.data());
    h::lrn_backward(host_ctx(), in, p, x.data(), y_ref.data(), dy.data(), dx_ref.data(), false);
    h::lrn_backward(host_ctx(), in, p, x.data(), y_ref.data(), dy.data(), dx_acc.data(), true);

    device_buffer dx_(x), ddy(dy), y(count_of(in)), dx(count_of(in));
    lrn_forward(ctx(), in, p, dx_.get(), y.get());
    expect_near(y_ref, read(y), k_atol, k_rtol, "forward");
    lrn_backward(ctx(), in, p, dx_.get(), y.get(), ddy.get(), dx.get(), false);
    expect_near(dx_ref, read(dx), k_atol, 1e-3, "backward");
    dx.write(dx0);
    lrn_backward(ctx(), in, p, dx_.get(), y.get(), ddy.get(), dx.get(), true);
    expect_near(dx_acc, read(dx), k_atol, 1e-3, "accumulating backward");
  }
  lrn_params wide;
  wide.size = 17;  // beyond cuDNN's bound
  device_buffer x(count_of(in)), y(count_of(in));
  EXPECT_THROW(lrn_forward(ctx(), in, wide, x.get(), y.get()), invalid_argument);
}

// ---- DROPOUT ---------------------------------------------------------------------------

TEST_F(cuda_kernels_test, dropout_mask_output_and_gradient_are_bit_identical_to_host) {
  const shape4 s{3, 5, 7, 11};
  for (float ratio : {0.5f, 0.1f, 0.0f}) {
    for (std::uint64_t seed : {std::uint64_t{0}, std::uint64_t{42}, ~std::uint64_t{0}}) {
      SCOPED_TRACE("ratio " + std::to_string(ratio) + " seed " + std::to_string(seed));
      const dropout_params p{ratio};
      const auto x = random_vector(count_of(s), 71), dy = random_vector(count_of(s), 72),
                 dx0 = random_vector(count_of(s), 73);
      std::vector<float> y_ref(count_of(s)), mask_ref(count_of(s)), dx_acc = dx0,
                                                                    dx_ref(count_of(s));
      h::dropout_forward(host_ctx(), s, p, seed, x.data(), y_ref.data(), mask_ref.data());
      h::dropout_backward(host_ctx(), s, mask_ref.data(), dy.data(), dx_ref.data(), false);
      h::dropout_backward(host_ctx(), s, mask_ref.data(), dy.data(), dx_acc.data(), true);

      device_buffer dx_(x), y(count_of(s)), mask(count_of(s)), ddy(dy), dx(dx0);
      dropout_forward(ctx(), s, p, seed, dx_.get(), y.get(), mask.get());
      expect_bitwise(mask_ref, read(mask), "mask");
      expect_bitwise(y_ref, read(y), "output");
      dropout_backward(ctx(), s, mask.get(), ddy.get(), dx.get(), true);
      expect_bitwise(dx_acc, read(dx), "accumulating gradient");
      dropout_backward(ctx(), s, mask.get(), ddy.get(), ddy.get(), false);  // dx == dy
      expect_bitwise(dx_ref, read(ddy), "gradient in place");
    }
  }
  device_buffer x(count_of(s)), y(count_of(s)), mask(count_of(s));
  EXPECT_THROW(dropout_forward(ctx(), s, dropout_params{1.0f}, 1, x.get(), y.get(), mask.get()),
               invalid_argument);
}

// ---- SOFTMAX ---------------------------------------------------------------------------

TEST_F(cuda_kernels_test, softmax_loss_matches_host_probabilities_loss_and_gradient) {
  const shape4 in{6, 10, 1, 1};
  const auto x = random_vector(count_of(in), 81, -4.0f, 4.0f);
  const std::vector<float> labels{0, 9, 3, 3, 7, 1};
  const auto dx0 = random_vector(count_of(in), 82);
  std::vector<float> y_ref(count_of(in)), dx_ref(count_of(in)), dx_acc = dx0;
  const double loss_ref =
      h::softmax_loss_forward(host_ctx(), in, x.data(), labels.data(), y_ref.data());
  h::softmax_loss_backward(host_ctx(), in, y_ref.data(), labels.data(), dx_ref.data(), false);
  h::softmax_loss_backward(host_ctx(), in, y_ref.data(), labels.data(), dx_acc.data(), true);

  device_buffer dx_(x), dl(labels), y(count_of(in)), dx(count_of(in));
  double loss = -1.0;
  softmax_loss_forward(ctx(), in, dx_.get(), dl.get(), y.get(), &loss);
  EXPECT_NEAR(loss, loss_ref, 1e-6 * (1.0 + loss_ref));
  expect_near(y_ref, read(y), 1e-6, 1e-5, "probabilities");
  // The gradient from the host's probabilities: the same bits.
  y.write(y_ref);
  softmax_loss_backward(ctx(), in, y.get(), dl.get(), dx.get(), false);
  expect_bitwise(dx_ref, read(dx), "gradient");
  dx.write(dx0);
  softmax_loss_backward(ctx(), in, y.get(), dl.get(), dx.get(), true);
  expect_bitwise(dx_acc, read(dx), "accumulating gradient");
}

TEST_F(cuda_kernels_test, softmax_loss_rejects_a_label_out_of_range_when_read_back) {
  const shape4 in{3, 4, 1, 1};
  device_buffer x(random_vector(count_of(in), 91)), y(count_of(in));
  for (float bad : {4.0f, -1.0f, 1.5f}) {
    device_buffer labels(std::vector<float>{0.0f, bad, 2.0f});
    double loss = 0.0;
    EXPECT_THROW(softmax_loss_forward(ctx(), in, x.get(), labels.get(), y.get(), &loss),
                 invalid_argument)
        << "label " << bad;
  }
  device_buffer good(std::vector<float>{0.0f, 3.0f, 2.0f});
  double loss = -1.0;
  softmax_loss_forward(ctx(), in, x.get(), good.get(), y.get(), &loss);
  EXPECT_GT(loss, 0.0);
}

// ---- CONCAT, ADD -----------------------------------------------------------------------

TEST_F(cuda_kernels_test, concat_is_bit_identical_to_host_forward_and_backward) {
  const std::vector<shape4> in{{2, 3, 4, 5}, {2, 1, 4, 5}, {2, 4, 4, 5}};
  const shape4 out{2, 8, 4, 5};
  std::vector<std::vector<float>> x;
  for (std::size_t i = 0; i < in.size(); ++i) {
    x.push_back(random_vector(count_of(in[i]), 101 + static_cast<std::uint32_t>(i)));
  }
  const auto dy = random_vector(count_of(out), 110);
  std::vector<float> y_ref(count_of(out));
  const std::vector<const float*> hx{x[0].data(), x[1].data(), x[2].data()};
  h::concat_forward(host_ctx(), in, hx, y_ref.data());
  // Input 0 overwritten, 1 without gradient, 2 accumulated.
  std::vector<float> g0(count_of(in[0])), g2 = random_vector(count_of(in[2]), 111);
  const std::vector<float> g2_start = g2;
  const std::vector<h::grad_out> hg{{g0.data(), false}, {nullptr, false}, {g2.data(), true}};
  h::concat_backward(host_ctx(), in, dy.data(), hg);

  device_buffer x0(x[0]), x1(x[1]), x2(x[2]), y(count_of(out)), ddy(dy), d0(count_of(in[0])),
      d2(g2_start);
  const std::vector<const float*> dx{x0.get(), x1.get(), x2.get()};
  concat_forward(ctx(), in, dx, y.get());
  expect_bitwise(y_ref, read(y), "forward");
  const std::vector<grad_out> dg{{d0.get(), false}, {nullptr, false}, {d2.get(), true}};
  concat_backward(ctx(), in, ddy.get(), dg);
  expect_bitwise(g0, read(d0), "gradient of input 0");
  expect_bitwise(g2, read(d2), "accumulated gradient of input 2");
}

TEST_F(cuda_kernels_test, add_is_bit_identical_to_host_forward_and_backward) {
  const shape4 s{2, 3, 5, 7};
  for (std::size_t k : {1u, 2u, 4u}) {
    SCOPED_TRACE(std::to_string(k) + " inputs");
    std::vector<std::vector<float>> x;
    std::vector<const float*> hx;
    for (std::size_t i = 0; i < k; ++i) {
      x.push_back(random_vector(count_of(s), 121 + static_cast<std::uint32_t>(i), -100.0f, 100.0f));
    }
    for (const auto& v : x) hx.push_back(v.data());
    std::vector<float> y_ref(count_of(s));
    h::add_forward(host_ctx(), s, hx, y_ref.data());

    std::vector<std::unique_ptr<device_buffer>> dx;
    std::vector<const float*> px;
    for (const auto& v : x) {
      dx.push_back(std::make_unique<device_buffer>(v));
      px.push_back(dx.back()->get());
    }
    device_buffer y(count_of(s));
    add_forward(ctx(), s, px, y.get());
    expect_bitwise(y_ref, read(y), "forward");
  }
  const auto dy = random_vector(count_of(s), 130), acc0 = random_vector(count_of(s), 131);
  std::vector<float> g0(count_of(s)), g1 = acc0;
  const std::vector<h::grad_out> hg{{g0.data(), false}, {g1.data(), true}, {nullptr, false}};
  h::add_backward(host_ctx(), s, dy.data(), hg);
  device_buffer ddy(dy), d0(count_of(s)), d1(acc0);
  const std::vector<grad_out> dg{{d0.get(), false}, {d1.get(), true}, {nullptr, false}};
  add_backward(ctx(), s, ddy.get(), dg);
  expect_bitwise(g0, read(d0), "copied gradient");
  expect_bitwise(g1, read(d1), "accumulated gradient");
}

}  // namespace
}  // namespace memweave::kernels::cuda::test
