// Every host kernel other than convolution (host_conv_test covers it): bit-identical
// outputs across runs, addresses and thread counts; accumulate = true adds exactly the
// gradient that accumulate = false writes. Shapes are large enough for several tasks per
// loop and several GEMM tiles.
#include <gtest/gtest.h>

#include "kernel_test_util.hpp"

namespace memweave::kernels::host::test {
namespace {

std::size_t elements(const shape4& s) {
  return static_cast<std::size_t>(s.count());
}
std::vector<float> zeros(std::size_t n) {
  return std::vector<float>(n, 0.0f);
}

TEST(host_determinism, fc_forward_and_backward_are_bit_identical_and_accumulate_adds) {
  for (const shape4 in : {shape4{5, 3, 10, 10}, shape4{1, 300, 1, 1}}) {
    const fc_params p{.out_features = 70};
    const std::size_t out = static_cast<std::size_t>(in.n * 70);
    const auto x = random_vector(elements(in), 1), w = random_vector(70 * 300, 2);
    const auto b = random_vector(70, 3), dy = random_vector(out, 4);
    expect_deterministic("fc forward",
                         [&](const kernel_context& ctx, const auto& i, const auto& o) {
                           fc_forward(ctx, in, p, i[0], i[1], i[2], o[0]);
                         },
                         {x, w, b}, {zeros(out)});
    for (bool acc : {false, true}) {
      expect_deterministic("fc backward data",
                           [&](const kernel_context& ctx, const auto& i, const auto& o) {
                             fc_backward_data(ctx, in, p, i[0], i[1], o[0], acc);
                           },
                           {w, dy}, {random_vector(x.size(), 5)});
    }
    expect_deterministic("fc backward weights",
                         [&](const kernel_context& ctx, const auto& i, const auto& o) {
                           fc_backward_weights(ctx, in, p, i[0], i[1], o[0], o[1]);
                         },
                         {x, dy}, {zeros(w.size()), zeros(70)});
    expect_accumulate_adds(
        "fc backward data",
        [&](const kernel_context& ctx, float* dx, bool acc) {
          fc_backward_data(ctx, in, p, w.data(), dy.data(), dx, acc);
        },
        x.size());
  }
}

TEST(host_determinism, pool_is_bit_identical_and_accumulate_adds) {
  const shape4 in{3, 8, 21, 17};
  for (pool_params p : {pool_params{.mode = pool_mode::max,
                       .kernel_h = 3,
                       .kernel_w = 3,
                       .stride_h = 2,
                       .stride_w = 2,
                       .pad_h = 1,
                       .pad_w = 1},
                        pool_params{.mode = pool_mode::average,
                        .kernel_h = 3,
                        .kernel_w = 3,
                        .stride_h = 1,
                        .stride_w = 2,
                        .pad_h = 1,
                        .pad_w = 0},
                        pool_params{.mode = pool_mode::average, .global = true}}) {
    const shape4 o = p.global ? shape4{3, 8, 1, 1}
                              : shape4{3, 8, (21 + 2 * p.pad_h - 3) / p.stride_h + 1,
                                       (17 + 2 * p.pad_w - 3) / p.stride_w + 1};
    const auto x = random_vector(elements(in), 6), dy = random_vector(elements(o), 7);
    std::vector<float> y(elements(o));
    pool_forward(context(), in, p, x.data(), y.data());
    expect_deterministic("pool forward",
                         [&](const kernel_context& ctx, const auto& i, const auto& out) {
                           pool_forward(ctx, in, p, i[0], out[0]);
                         },
                         {x}, {zeros(y.size())});
    expect_deterministic("pool backward",
                         [&](const kernel_context& ctx, const auto& i, const auto& out) {
                           pool_backward(ctx, in, p, i[0], i[1], i[2], out[0], true);
                         },
                         {x, y, dy}, {random_vector(x.size(), 8)});
    expect_accumulate_adds(
        "pool backward",
        [&](const kernel_context& ctx, float* dx, bool acc) {
          pool_backward(ctx, in, p, x.data(), y.data(), dy.data(), dx, acc);
        },
        x.size());
  }
}

TEST(host_determinism, act_bn_lrn_dropout_are_bit_identical_and_accumulate_adds) {
  const shape4 s{4, 16, 15, 13};
  const auto x = random_vector(elements(s), 11), dy = random_vector(elements(s), 12);
  const auto gamma = random_vector(16, 13), beta = random_vector(16, 14);
  for (act_mode m : {act_mode::relu, act_mode::tanh, act_mode::sigmoid}) {
    std::vector<float> y(x.size());
    act_forward(context(), s, {m}, x.data(), y.data());
    expect_deterministic("act forward",
                         [&](const kernel_context& ctx, const auto& i, const auto& o) {
                           act_forward(ctx, s, {m}, i[0], o[0]);
                         },
                         {x}, {zeros(x.size())});
    expect_accumulate_adds(
        "act backward",
        [&](const kernel_context& ctx, float* dx, bool acc) {
          act_backward(ctx, s, {m}, y.data(), dy.data(), dx, acc);
        },
        x.size());
  }
  const bn_params bp{};
  std::vector<float> y(x.size()), mean(16), invstd(16);
  bn_forward_training(context(), s, bp, x.data(), gamma.data(), beta.data(), y.data(), mean.data(),
                      invstd.data());
  expect_deterministic("bn forward",
                       [&](const kernel_context& ctx, const auto& i, const auto& o) {
                         bn_forward_training(ctx, s, bp, i[0], i[1], i[2], o[0], o[1], o[2]);
                       },
                       {x, gamma, beta}, {zeros(x.size()), zeros(16), zeros(16)});
  expect_deterministic(
      "bn backward",
      [&](const kernel_context& ctx, const auto& i, const auto& o) {
        bn_backward(ctx, s, bp, i[0], i[1], i[2], i[3], i[4], o[0], o[1], o[2], true);
      },
      {x, mean, invstd, gamma, dy}, {random_vector(x.size(), 15), zeros(16), zeros(16)});
  expect_accumulate_adds(
      "bn backward",
      [&](const kernel_context& ctx, float* dx, bool acc) {
        std::vector<float> dg(16), db(16);
        bn_backward(ctx, s, bp, x.data(), mean.data(), invstd.data(), gamma.data(), dy.data(), dx,
                    dg.data(), db.data(), acc);
      },
      x.size());

  const lrn_params lp{};
  lrn_forward(context(), s, lp, x.data(), y.data());
  expect_deterministic("lrn forward",
                       [&](const kernel_context& ctx, const auto& i, const auto& o) {
                         lrn_forward(ctx, s, lp, i[0], o[0]);
                       },
                       {x}, {zeros(x.size())});
  expect_accumulate_adds(
      "lrn backward",
      [&](const kernel_context& ctx, float* dx, bool acc) {
        lrn_backward(ctx, s, lp, x.data(), y.data(), dy.data(), dx, acc);
      },
      x.size());

  const dropout_params dp{.ratio = 0.5f};
  std::vector<float> mask(x.size());
  dropout_forward(context(), s, dp, 3, x.data(), y.data(), mask.data());
  expect_deterministic("dropout forward",
                       [&](const kernel_context& ctx, const auto& i, const auto& o) {
                         dropout_forward(ctx, s, dp, 3, i[0], o[0], o[1]);
                       },
                       {x}, {zeros(x.size()), zeros(x.size())});
  expect_accumulate_adds(
      "dropout backward",
      [&](const kernel_context& ctx, float* dx, bool acc) {
        dropout_backward(ctx, s, mask.data(), dy.data(), dx, acc);
      },
      x.size());
}

TEST(host_determinism, softmax_concat_add_are_bit_identical_and_accumulate_adds) {
  const shape4 in{37, 100, 1, 1};
  const auto x = random_vector(elements(in), 21, -5.0f, 5.0f);
  std::vector<float> labels(37);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<float>((i * 7) % 100);
  std::vector<float> y(x.size());
  const double loss = softmax_loss_forward(context(), in, x.data(), labels.data(), y.data());
  for (int threads : {1, 3}) {
    std::vector<float> y2(x.size());
    const double again =
        softmax_loss_forward(context(threads), in, x.data(), labels.data(), y2.data());
    EXPECT_EQ(std::memcmp(&loss, &again, sizeof loss), 0) << threads << " threads";
    EXPECT_TRUE(same_bits(y, y2));
  }
  expect_accumulate_adds(
      "softmax backward",
      [&](const kernel_context& ctx, float* dx, bool acc) {
        softmax_loss_backward(ctx, in, y.data(), labels.data(), dx, acc);
      },
      x.size());

  const std::vector<shape4> parts{{3, 5, 9, 7}, {3, 2, 9, 7}};
  const auto a = random_vector(elements(parts[0]), 22), b = random_vector(elements(parts[1]), 23);
  const auto dy = random_vector(a.size() + b.size(), 24);
  for (bool acc : {false, true}) {
    const auto a0 = random_vector(a.size(), 25);
    std::vector<float> da = a0, db(b.size(), std::nanf(""));
    const grad_out outs[] = {{da.data(), acc}, {db.data(), false}};
    concat_backward(context(), parts, dy.data(), outs);
    for (std::int64_t n = 0; n < 3; ++n) {
      for (std::size_t j = 0; j < 5 * 63; ++j) {
        const std::size_t i = static_cast<std::size_t>(n) * 5 * 63 + j;
        const float g = dy[static_cast<std::size_t>(n) * 7 * 63 + j];
        ASSERT_EQ(da[i], acc ? a0[i] + g : g);
      }
    }
  }
  expect_deterministic("concat forward",
                       [&](const kernel_context& ctx, const auto& i, const auto& o) {
                         const float* xs[] = {i[0], i[1]};
                         concat_forward(ctx, parts, xs, o[0]);
                       },
                       {a, b}, {zeros(dy.size())});
  const shape4 s = parts[0];
  expect_deterministic("add forward",
                       [&](const kernel_context& ctx, const auto& i, const auto& o) {
                         const float* xs[] = {i[0], i[1], i[2]};
                         add_forward(ctx, s, xs, o[0]);
                       },
                       {a, random_vector(a.size(), 26), random_vector(a.size(), 27)},
                       {zeros(a.size())});
  expect_accumulate_adds(
      "add backward",
      [&](const kernel_context& ctx, float* dx, bool acc) {
        const grad_out outs[] = {{dx, acc}};
        add_backward(ctx, s, dy.data(), outs);
      },
      a.size());
}

}  // namespace
}  // namespace memweave::kernels::host::test
