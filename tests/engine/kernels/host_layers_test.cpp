// Host kernels other than convolution: forward against naive loops, every backward
// against central differences (h = 1e-2; tolerance |numeric - analytic| <= 1e-3 +
// 1e-3 * |analytic| for linear layers, 1e-3 + 5e-3 * |analytic| for tanh, sigmoid, BN
// and LRN, a
// tighter one for the softmax loss), and each layer's particular contract.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <numeric>

#include "kernel_test_util.hpp"

namespace memweave::kernels::host::test {
namespace {

std::size_t count(const shape4& s) {
  return static_cast<std::size_t>(s.count());
}

// ---- FC ----------------------------------------------------------------------------------

TEST(host_fc, forward_matches_naive_loops_and_gradients_match_finite_differences) {
  const shape4 in{3, 2, 3, 4};  // 24 features per image
  const fc_params p{.out_features = 7, .bias = true};
  auto x = random_vector(count(in), 1);
  auto w = random_vector(7 * 24, 2);
  auto b = random_vector(7, 3);
  const auto r = random_vector(21, 4);
  std::vector<float> y(21);
  fc_forward(context(), in, p, x.data(), w.data(), b.data(), y.data());
  for (int n = 0; n < 3; ++n) {
    for (int o = 0; o < 7; ++o) {
      double ref = b[o];
      for (int i = 0; i < 24; ++i) ref += double(x[n * 24 + i]) * w[o * 24 + i];
      EXPECT_NEAR(y[n * 7 + o], ref, 1e-5);
    }
  }
  std::vector<float> dx(x.size()), dw(w.size()), db(7);
  fc_backward_data(context(), in, p, w.data(), r.data(), dx.data(), false);
  fc_backward_weights(context(), in, p, x.data(), r.data(), dw.data(), db.data());
  auto loss = [&] {
    fc_forward(context(), in, p, x.data(), w.data(), b.data(), y.data());
    return dot(y, r);
  };
  expect_gradient("fc dx", x, dx, loss, k_linear);
  expect_gradient("fc dw", w, dw, loss, k_linear);
  expect_gradient("fc db", b, db, loss, k_linear);
}

TEST(host_fc, without_bias_the_bias_is_not_read) {
  const shape4 in{2, 5, 1, 1};
  const fc_params p{.out_features = 3, .bias = false};
  const auto x = random_vector(10, 1), w = random_vector(15, 2);
  std::vector<float> y(6);
  fc_forward(context(), in, p, x.data(), w.data(), nullptr, y.data());
  double ref = 0;
  for (int i = 0; i < 5; ++i) ref += double(x[i]) * w[i];
  EXPECT_NEAR(y[0], ref, 1e-6);
}

// ---- POOL --------------------------------------------------------------------------------

struct pool_case {
  shape4 in;
  pool_params p;
};

std::vector<pool_case> pool_cases() {
  return {
      {{2, 3, 7, 6},
       {.mode = pool_mode::max,
        .kernel_h = 3,
        .kernel_w = 3,
        .stride_h = 2,
        .stride_w = 2,
        .pad_h = 1,
        .pad_w = 1}},
      {{2, 3, 7, 6},
       {.mode = pool_mode::average,
        .kernel_h = 3,
        .kernel_w = 2,
        .stride_h = 2,
        .stride_w = 1,
        .pad_h = 1,
        .pad_w = 1}},
      {{1, 2, 8, 8},
       {.mode = pool_mode::max, .kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2}},
      {{2, 2, 5, 3}, {.mode = pool_mode::average, .global = true}},
      {{2, 2, 5, 3}, {.mode = pool_mode::max, .global = true}},
  };
}

shape4 pool_out(const pool_case& c) {
  if (c.p.global) return {c.in.n, c.in.c, 1, 1};
  return {c.in.n, c.in.c, (c.in.h + 2 * c.p.pad_h - c.p.kernel_h) / c.p.stride_h + 1,
          (c.in.w + 2 * c.p.pad_w - c.p.kernel_w) / c.p.stride_w + 1};
}

TEST(host_pool, forward_matches_naive_loops) {
  for (const pool_case& c : pool_cases()) {
    SCOPED_TRACE(shape_text(c.in));
    const auto x = random_vector(count(c.in), 11);
    const shape4 o = pool_out(c);
    std::vector<float> y(count(o));
    pool_forward(context(), c.in, c.p, x.data(), y.data());
    const std::int64_t kh = c.p.global ? c.in.h : c.p.kernel_h;
    const std::int64_t kw = c.p.global ? c.in.w : c.p.kernel_w;
    for (std::int64_t t = 0; t < o.n * o.c; ++t) {
      for (std::int64_t oh = 0; oh < o.h; ++oh) {
        for (std::int64_t ow = 0; ow < o.w; ++ow) {
          double best = -1e30, sum = 0;
          for (std::int64_t i = 0; i < kh; ++i) {
            for (std::int64_t j = 0; j < kw; ++j) {
              const std::int64_t ih = oh * c.p.stride_h - (c.p.global ? 0 : c.p.pad_h) + i;
              const std::int64_t iw = ow * c.p.stride_w - (c.p.global ? 0 : c.p.pad_w) + j;
              if (ih < 0 || iw < 0 || ih >= c.in.h || iw >= c.in.w) continue;
              const double v = x[static_cast<std::size_t>((t * c.in.h + ih) * c.in.w + iw)];
              best = std::max(best, v);
              sum += v;
            }
          }
          const double ref = c.p.mode == pool_mode::max ? best : sum / double(kh * kw);
          EXPECT_NEAR(y[static_cast<std::size_t>((t * o.h + oh) * o.w + ow)], ref, 1e-6);
        }
      }
    }
  }
}

TEST(host_pool, gradients_match_finite_differences) {
  for (const pool_case& c : pool_cases()) {
    SCOPED_TRACE(shape_text(c.in));
    auto x = distinct_vector(count(c.in), 12);  // no ties: max stays differentiable
    const shape4 o = pool_out(c);
    const auto r = random_vector(count(o), 13);
    std::vector<float> y(count(o)), dx(x.size());
    pool_forward(context(), c.in, c.p, x.data(), y.data());
    pool_backward(context(), c.in, c.p, x.data(), y.data(), r.data(), dx.data(), false);
    expect_gradient(
        "pool dx", x, dx,
        [&] {
          pool_forward(context(), c.in, c.p, x.data(), y.data());
          return dot(y, r);
        },
        k_linear);
  }
}

TEST(host_pool, max_backward_sends_a_tied_window_gradient_to_its_first_maximum_only) {
  const shape4 in{1, 1, 2, 2};
  const pool_params p{.mode = pool_mode::max, .kernel_h = 2, .kernel_w = 2};
  const std::vector<float> x{1.0f, 3.0f, 3.0f, 2.0f};
  std::vector<float> y(1), dy{5.0f}, dx(4);
  pool_forward(context(), in, p, x.data(), y.data());
  pool_backward(context(), in, p, x.data(), y.data(), dy.data(), dx.data(), false);
  EXPECT_EQ(dx, (std::vector<float>{0.0f, 5.0f, 0.0f, 0.0f}));
}

// Adaptive average pooling: PyTorch's windows [floor(i*H/oh), ceil((i+1)*H/oh)), computed
// here in double, each output divided by its own window's size.
struct adaptive_case {
  shape4 in;
  std::int64_t oh, ow;
};

const adaptive_case adaptive_cases[] = {
    {{2, 3, 7, 6}, 3, 4},  // overlapping windows of two sizes
    {{1, 2, 5, 3}, 7, 2},  // more outputs than input rows: windows repeat rows
    {{1, 1, 8, 8}, 2, 2},  // divides evenly: 4x4 blocks
    {{1, 1, 4, 5}, 4, 5},  // the identity
};

pool_params adaptive_params(const adaptive_case& c) {
  return {.mode = pool_mode::average, .adaptive_h = c.oh, .adaptive_w = c.ow};
}

TEST(host_pool, adaptive_average_matches_pytorch_s_windows) {
  for (const adaptive_case& c : adaptive_cases) {
    SCOPED_TRACE(shape_text(c.in));
    const auto x = random_vector(count(c.in), 14);
    std::vector<float> y(static_cast<std::size_t>(c.in.n * c.in.c * c.oh * c.ow));
    pool_forward(context(), c.in, adaptive_params(c), x.data(), y.data());
    auto lo = [](std::int64_t i, std::int64_t in, std::int64_t out) {
      return static_cast<std::int64_t>(std::floor(double(i) * double(in) / double(out)));
    };
    auto hi = [](std::int64_t i, std::int64_t in, std::int64_t out) {
      return static_cast<std::int64_t>(std::ceil(double(i + 1) * double(in) / double(out)));
    };
    for (std::int64_t t = 0; t < c.in.n * c.in.c; ++t) {
      for (std::int64_t oh = 0; oh < c.oh; ++oh) {
        for (std::int64_t ow = 0; ow < c.ow; ++ow) {
          double sum = 0;
          std::int64_t n = 0;
          for (std::int64_t ih = lo(oh, c.in.h, c.oh); ih < hi(oh, c.in.h, c.oh); ++ih) {
            for (std::int64_t iw = lo(ow, c.in.w, c.ow); iw < hi(ow, c.in.w, c.ow); ++iw, ++n)
              sum += x[static_cast<std::size_t>((t * c.in.h + ih) * c.in.w + iw)];
          }
          EXPECT_NEAR(y[static_cast<std::size_t>((t * c.oh + oh) * c.ow + ow)], sum / double(n),
                      1e-6);
        }
      }
    }
  }
  // Three rows to two: [0, 2) and [1, 3), each divided by 2.
  const std::vector<float> x{1.0f, 3.0f, 7.0f};
  std::vector<float> y(2), dx(3);
  const pool_params p{.mode = pool_mode::average, .adaptive_h = 2, .adaptive_w = 1};
  pool_forward(context(), {1, 1, 3, 1}, p, x.data(), y.data());
  EXPECT_EQ(y, (std::vector<float>{2.0f, 5.0f}));
  const std::vector<float> dy{2.0f, 4.0f};
  pool_backward(context(), {1, 1, 3, 1}, p, nullptr, nullptr, dy.data(), dx.data(), false);
  EXPECT_EQ(dx, (std::vector<float>{1.0f, 3.0f, 2.0f}));
}

TEST(host_pool, adaptive_average_gradients_match_finite_differences_and_accumulate) {
  for (const adaptive_case& c : adaptive_cases) {
    SCOPED_TRACE(shape_text(c.in));
    const pool_params p = adaptive_params(c);
    auto x = random_vector(count(c.in), 15);
    const auto r = random_vector(static_cast<std::size_t>(c.in.n * c.in.c * c.oh * c.ow), 16);
    std::vector<float> y(r.size()), dx(x.size());
    pool_backward(context(), c.in, p, nullptr, nullptr, r.data(), dx.data(), false);
    expect_gradient(
        "adaptive pool dx", x, dx,
        [&] {
          pool_forward(context(), c.in, p, x.data(), y.data());
          return dot(y, r);
        },
        k_linear);
    std::vector<float> acc(x.size(), 1.0f);
    pool_backward(context(), c.in, p, nullptr, nullptr, r.data(), acc.data(), true);
    for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(acc[i], 1.0f + dx[i]);
  }
}

TEST(host_pool, padding_not_smaller_than_the_kernel_is_rejected) {
  const shape4 in{1, 1, 4, 4};
  const pool_params p{.kernel_h = 2, .kernel_w = 2, .pad_h = 2};
  std::vector<float> x(16), y(16);
  EXPECT_THROW(pool_forward(context(), in, p, x.data(), y.data()), invalid_argument);
}

// ---- ACT ---------------------------------------------------------------------------------

TEST(host_act, relu_tanh_sigmoid_gradients_match_finite_differences_and_read_the_output) {
  const shape4 s{2, 3, 4, 5};
  for (act_mode mode : {act_mode::relu, act_mode::tanh, act_mode::sigmoid}) {
    const act_params p{mode};
    auto x = random_vector(count(s), 21, -2.0f, 2.0f);
    for (float& v : x) {
      if (std::abs(v) < 0.05f) v = 0.5f;  // away from ReLU's kink
    }
    const auto r = random_vector(count(s), 22);
    std::vector<float> y(x.size()), dx(x.size());
    act_forward(context(), s, p, x.data(), y.data());
    for (std::size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(y[i], mode == act_mode::relu   ? std::max(x[i], 0.0f)
                      : mode == act_mode::tanh ? std::tanh(x[i])
                                               : 1.0f / (1.0f + std::exp(-x[i])));
    }
    act_backward(context(), s, p, y.data(), r.data(), dx.data(), false);
    expect_gradient(
        mode == act_mode::relu   ? "relu dx"
        : mode == act_mode::tanh ? "tanh dx"
                                 : "sigmoid dx",
        x, dx,
        [&] {
          act_forward(context(), s, p, x.data(), y.data());
          return dot(y, r);
        },
        mode == act_mode::relu ? k_linear : fd_tolerance{});
    // In place: y == x, dx == dy.
    std::vector<float> inplace = x, g = r;
    act_forward(context(), s, p, inplace.data(), inplace.data());
    act_forward(context(), s, p, x.data(), y.data());
    act_backward(context(), s, p, inplace.data(), g.data(), g.data(), false);
    EXPECT_TRUE(same_bits(inplace, y));
    EXPECT_TRUE(same_bits(g, dx));
  }
}

// ---- BN ----------------------------------------------------------------------------------

TEST(host_bn, training_forward_matches_naive_statistics) {
  const shape4 in{3, 4, 5, 2};
  const bn_params p{};
  const auto x = random_vector(count(in), 31, -2.0f, 3.0f);
  const auto gamma = random_vector(4, 32), beta = random_vector(4, 33);
  std::vector<float> y(x.size()), mean(4), invstd(4);
  bn_forward_training(context(), in, p, x.data(), gamma.data(), beta.data(), y.data(), mean.data(),
                      invstd.data());
  for (std::int64_t c = 0; c < 4; ++c) {
    double s = 0, sq = 0;
    const double m = 3 * 10;
    for (std::int64_t n = 0; n < 3; ++n) {
      for (std::int64_t j = 0; j < 10; ++j) s += x[static_cast<std::size_t>((n * 4 + c) * 10 + j)];
    }
    const double mu = s / m;
    for (std::int64_t n = 0; n < 3; ++n) {
      for (std::int64_t j = 0; j < 10; ++j) {
        const double d = x[static_cast<std::size_t>((n * 4 + c) * 10 + j)] - mu;
        sq += d * d;
      }
    }
    const double is = 1.0 / std::sqrt(sq / m + p.epsilon);
    EXPECT_NEAR(mean[c], mu, 1e-6);
    EXPECT_NEAR(invstd[c], is, 1e-5 * is);
    for (std::int64_t n = 0; n < 3; ++n) {
      for (std::int64_t j = 0; j < 10; ++j) {
        const auto i = static_cast<std::size_t>((n * 4 + c) * 10 + j);
        EXPECT_NEAR(y[i], gamma[c] * (x[i] - mu) * is + beta[c], 1e-5);
      }
    }
  }
}

// A fused replay rebuilds an ACT's output from the BN's input and saved statistics: the same
// bits as BN's forward and then the ACT, for every activation, with no y in between.
TEST(host_bn, bn_act_normalize_gives_the_bits_of_bn_then_act) {
  const shape4 in{3, 5, 7, 3};
  const bn_params p{};
  const auto x = random_vector(count(in), 41, -3.0f, 4.0f);
  const auto gamma = random_vector(5, 42), beta = random_vector(5, 43);
  std::vector<float> y(x.size()), mean(5), invstd(5);
  bn_forward_training(context(), in, p, x.data(), gamma.data(), beta.data(), y.data(), mean.data(),
                      invstd.data());
  for (const act_mode mode : {act_mode::relu, act_mode::tanh, act_mode::sigmoid}) {
    const act_params a{.mode = mode};
    std::vector<float> z(x.size()), fused(x.size(), 42.0f);
    act_forward(context(), in, a, y.data(), z.data());
    bn_act_normalize(context(), in, p, x.data(), gamma.data(), beta.data(), mean.data(),
                     invstd.data(), a, fused.data());
    std::size_t zeros = 0;
    for (std::size_t i = 0; i < z.size(); ++i) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(fused[i]), std::bit_cast<std::uint32_t>(z[i]))
          << static_cast<int>(mode) << " element " << i;
      zeros += z[i] == 0.0f ? 1 : 0;
    }
    if (mode == act_mode::relu) {
      EXPECT_GT(zeros, 0u) << "relu clipped nothing: a weak test";
    }
  }
}

TEST(host_bn, gradients_match_finite_differences) {
  const shape4 in{2, 3, 3, 3};
  const bn_params p{};
  auto x = random_vector(count(in), 41);
  auto gamma = random_vector(3, 42, 0.5f, 1.5f), beta = random_vector(3, 43);
  const auto r = random_vector(count(in), 44);
  std::vector<float> y(x.size()), mean(3), invstd(3), dx(x.size()), dgamma(3), dbeta(3);
  bn_forward_training(context(), in, p, x.data(), gamma.data(), beta.data(), y.data(), mean.data(),
                      invstd.data());
  bn_backward(context(), in, p, x.data(), mean.data(), invstd.data(), gamma.data(), r.data(),
              dx.data(), dgamma.data(), dbeta.data(), false);
  auto loss = [&] {
    std::vector<float> m(3), s(3);
    bn_forward_training(context(), in, p, x.data(), gamma.data(), beta.data(), y.data(), m.data(),
                        s.data());
    return dot(y, r);
  };
  expect_gradient("bn dx", x, dx, loss, {}, 5e-3f);
  expect_gradient("bn dgamma", gamma, dgamma, loss);
  expect_gradient("bn dbeta", beta, dbeta, loss);
}

TEST(host_bn, running_statistics_change_only_in_the_update_and_inference_uses_them) {
  const shape4 in{4, 2, 3, 3};
  const bn_params p{.epsilon = 1e-5f, .momentum = 0.25f};
  const auto x = random_vector(count(in), 51, 0.0f, 4.0f);
  const std::vector<float> gamma{1.0f, 2.0f}, beta{0.0f, -1.0f};
  std::vector<float> rm{0.0f, 1.0f}, rv{1.0f, 1.0f};
  std::vector<float> y(x.size()), mean(2), invstd(2);
  bn_forward_training(context(), in, p, x.data(), gamma.data(), beta.data(), y.data(), mean.data(),
                      invstd.data());
  EXPECT_EQ(rm, (std::vector<float>{0.0f, 1.0f}));  // the forward leaves them alone
  bn_update_running(in, p, mean.data(), invstd.data(), rm.data(), rv.data());
  for (std::size_t c = 0; c < 2; ++c) {
    double s = 0, sq = 0;
    for (std::size_t n = 0; n < 4; ++n) {
      for (std::size_t j = 0; j < 9; ++j) s += x[(n * 2 + c) * 9 + j];
    }
    const double mu = s / 36;
    for (std::size_t n = 0; n < 4; ++n) {
      for (std::size_t j = 0; j < 9; ++j) sq += std::pow(x[(n * 2 + c) * 9 + j] - mu, 2);
    }
    const double unbiased = sq / 35;
    EXPECT_NEAR(rm[c], 0.75 * (c == 0 ? 0.0 : 1.0) + 0.25 * mu, 1e-5);
    EXPECT_NEAR(rv[c], 0.75 * 1.0 + 0.25 * unbiased, 1e-4);
  }
  std::vector<float> yi(x.size());
  bn_forward_inference(context(), in, p, x.data(), gamma.data(), beta.data(), rm.data(), rv.data(),
                       yi.data());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t c = (i / 9) % 2;
    EXPECT_NEAR(yi[i], gamma[c] * (x[i] - rm[c]) / std::sqrt(rv[c] + 1e-5) + beta[c], 1e-5);
  }
}

// ---- LRN ---------------------------------------------------------------------------------

std::vector<double> lrn_naive(const shape4& in, const lrn_params& p, const std::vector<float>& x) {
  std::vector<double> y(x.size());
  const std::int64_t hw = in.h * in.w, pre = (p.size - 1) / 2;
  for (std::int64_t n = 0; n < in.n; ++n) {
    for (std::int64_t c = 0; c < in.c; ++c) {
      for (std::int64_t j = 0; j < hw; ++j) {
        double sq = 0;
        for (std::int64_t cc = c - pre; cc < c - pre + p.size; ++cc) {
          if (cc < 0 || cc >= in.c) continue;
          sq += std::pow(x[static_cast<std::size_t>((n * in.c + cc) * hw + j)], 2);
        }
        const auto i = static_cast<std::size_t>((n * in.c + c) * hw + j);
        y[i] = x[i] * std::pow(p.k + p.alpha / p.size * sq, -p.beta);
      }
    }
  }
  return y;
}

TEST(host_lrn, forward_matches_naive_loops) {
  const shape4 in{2, 7, 3, 4};
  for (lrn_params p : {lrn_params{}, lrn_params{.size = 3, .alpha = 0.5f, .beta = 0.75f, .k = 1.0f},
                       lrn_params{.size = 4, .alpha = 1.0f, .beta = 0.5f, .k = 2.0f}}) {
    const auto x = random_vector(count(in), 61, -3.0f, 3.0f);
    std::vector<float> y(x.size());
    lrn_forward(context(), in, p, x.data(), y.data());
    const auto ref = lrn_naive(in, p, x);
    for (std::size_t i = 0; i < y.size(); ++i)
      EXPECT_NEAR(y[i], ref[i], 1e-5 * (1 + std::abs(ref[i])));
  }
}

TEST(host_lrn, gradients_match_finite_differences) {
  const shape4 in{2, 6, 2, 3};
  // A large alpha so that the cross-channel term is far above the tolerance; an even size
  // to test the asymmetric window.
  for (lrn_params p : {lrn_params{.size = 5, .alpha = 2.0f, .beta = 0.75f, .k = 2.0f},
                       lrn_params{.size = 4, .alpha = 1.0f, .beta = 0.6f, .k = 1.0f}}) {
    auto x = random_vector(count(in), 62);
    const auto r = random_vector(count(in), 63);
    std::vector<float> y(x.size()), dx(x.size());
    lrn_forward(context(), in, p, x.data(), y.data());
    lrn_backward(context(), in, p, x.data(), y.data(), r.data(), dx.data(), false);
    expect_gradient("lrn dx", x, dx, [&] {
      lrn_forward(context(), in, p, x.data(), y.data());
      return dot(y, r);
    });
  }
}

// ---- DROPOUT -----------------------------------------------------------------------------

TEST(host_dropout, mask_is_reproducible_from_its_seed_and_keeps_the_right_fraction) {
  const shape4 s{4, 25, 40, 25};  // 100,000 elements
  const dropout_params p{.ratio = 0.3f};
  const auto x = random_vector(count(s), 71);
  std::vector<float> y1(x.size()), m1(x.size()), y2(x.size()), m2(x.size()), m3(x.size());
  dropout_forward(context(2), s, p, 42, x.data(), y1.data(), m1.data());
  dropout_forward(context(1), s, p, 42, x.data(), y2.data(), m2.data());
  EXPECT_TRUE(same_bits(m1, m2));
  EXPECT_TRUE(same_bits(y1, y2));
  dropout_forward(context(2), s, p, 43, x.data(), y2.data(), m3.data());
  EXPECT_FALSE(same_bits(m1, m3)) << "another seed must give another mask";
  const float keep = 1.0f / 0.7f;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_TRUE(m1[i] == 0.0f || m1[i] == keep) << "mask value " << m1[i];
    EXPECT_EQ(y1[i], x[i] * m1[i]);
    EXPECT_EQ(m1[i] != 0.0f, dropout_uniform(42, static_cast<std::int64_t>(i)) >= 0.3f);
    kept += m1[i] != 0.0f;
  }
  // Binomial(1e5, 0.7): standard deviation 145; 1% is about 7 of them.
  EXPECT_NEAR(static_cast<double>(kept) / x.size(), 0.7, 0.01);
}

TEST(host_dropout, ratio_zero_keeps_everything_and_ratio_one_is_rejected) {
  const shape4 s{1, 1, 10, 10};
  const auto x = random_vector(100, 72);
  std::vector<float> y(100), m(100);
  dropout_forward(context(), s, {.ratio = 0.0f}, 1, x.data(), y.data(), m.data());
  EXPECT_TRUE(same_bits(x, y));
  EXPECT_THROW(dropout_forward(context(), s, {.ratio = 1.0f}, 1, x.data(), y.data(), m.data()),
               invalid_argument);
}

TEST(host_dropout, gradient_matches_finite_differences) {
  const shape4 s{2, 3, 4, 4};
  const dropout_params p{.ratio = 0.4f};
  auto x = random_vector(count(s), 73);
  const auto r = random_vector(count(s), 74);
  std::vector<float> y(x.size()), m(x.size()), dx(x.size());
  dropout_forward(context(), s, p, 7, x.data(), y.data(), m.data());
  dropout_backward(context(), s, m.data(), r.data(), dx.data(), false);
  expect_gradient(
      "dropout dx", x, dx,
      [&] {
        dropout_forward(context(), s, p, 7, x.data(), y.data(), m.data());
        return dot(y, r);
      },
      k_linear);
}

// ---- SOFTMAX + LOSS ----------------------------------------------------------------------

TEST(host_softmax_loss, uniform_logits_give_log_classes) {
  for (float v : {0.0f, 3.5f, -20.0f}) {
    const shape4 in{4, 10, 1, 1};
    const std::vector<float> x(40, v), labels{0, 3, 9, 5};
    std::vector<float> y(40);
    const double loss = softmax_loss_forward(context(), in, x.data(), labels.data(), y.data());
    EXPECT_NEAR(loss, std::log(10.0), 1e-12);
    for (float p : y) EXPECT_FLOAT_EQ(p, 0.1f);
  }
}

TEST(host_softmax_loss, gradient_matches_finite_differences_and_probabilities_sum_to_one) {
  const shape4 in{3, 5, 1, 1};
  auto x = random_vector(15, 81, -3.0f, 3.0f);
  const std::vector<float> labels{4, 0, 2};
  std::vector<float> y(15), dx(15);
  softmax_loss_forward(context(), in, x.data(), labels.data(), y.data());
  for (int n = 0; n < 3; ++n) {
    EXPECT_NEAR(std::accumulate(y.begin() + n * 5, y.begin() + n * 5 + 5, 0.0), 1.0, 1e-6);
  }
  softmax_loss_backward(context(), in, y.data(), labels.data(), dx.data(), false);
  // The loss is computed in double from x: a tighter tolerance holds.
  expect_gradient(
      "softmax dx", x, dx,
      [&] { return softmax_loss_forward(context(), in, x.data(), labels.data(), y.data()); },
      {.atol = 1e-4, .rtol = 1e-3}, 1e-3f);
}

TEST(host_softmax_loss, labels_out_of_range_or_fractional_are_rejected) {
  const shape4 in{2, 3, 1, 1};
  const std::vector<float> x(6, 0.0f);
  std::vector<float> y(6);
  for (std::vector<float> labels : {std::vector<float>{0, 3}, {0, -1}, {1.5f, 0}, {NAN, 0}}) {
    EXPECT_THROW(softmax_loss_forward(context(), in, x.data(), labels.data(), y.data()),
                 invalid_argument);
  }
}

// ---- CONCAT and ADD ----------------------------------------------------------------------

TEST(host_concat, forward_stacks_channels_and_backward_splits_them) {
  const std::vector<shape4> in{{2, 1, 2, 3}, {2, 3, 2, 3}, {2, 2, 2, 3}};
  auto a = random_vector(12, 91), b = random_vector(36, 92), c = random_vector(24, 93);
  const auto r = random_vector(72, 94);
  std::vector<float> y(72);
  auto loss = [&] {
    const float* xs[] = {a.data(), b.data(), c.data()};
    concat_forward(context(), in, xs, y.data());
    return dot(y, r);
  };
  loss();
  for (std::int64_t n = 0; n < 2; ++n) {
    EXPECT_EQ(y[static_cast<std::size_t>(n * 36)], a[static_cast<std::size_t>(n * 6)]);
    EXPECT_EQ(y[static_cast<std::size_t>(n * 36 + 6)], b[static_cast<std::size_t>(n * 18)]);
    EXPECT_EQ(y[static_cast<std::size_t>(n * 36 + 35)], c[static_cast<std::size_t>(n * 12 + 11)]);
  }
  std::vector<float> da(12), db(36), dc(24, 1.0f);
  const grad_out outs[] = {{da.data(), false}, {db.data(), false}, {nullptr, false}};
  concat_backward(context(), in, r.data(), outs);
  EXPECT_TRUE(std::all_of(dc.begin(), dc.end(), [](float v) { return v == 1.0f; }));
  expect_gradient("concat da", a, da, loss, k_linear);
  expect_gradient("concat db", b, db, loss, k_linear);
  const std::vector<shape4> bad{{2, 1, 2, 3}, {2, 1, 3, 3}};
  const float* xs[] = {a.data(), b.data()};
  EXPECT_THROW(concat_forward(context(), bad, xs, y.data()), invalid_argument);
}

TEST(host_add, forward_sums_in_order_and_backward_passes_dy_to_each_input) {
  const shape4 s{2, 3, 2, 2};
  auto a = random_vector(24, 95), b = random_vector(24, 96), c = random_vector(24, 97);
  const auto r = random_vector(24, 98);
  std::vector<float> y(24);
  auto loss = [&] {
    const float* xs[] = {a.data(), b.data(), c.data()};
    add_forward(context(), s, xs, y.data());
    return dot(y, r);
  };
  loss();
  for (std::size_t i = 0; i < 24; ++i) EXPECT_EQ(y[i], (a[i] + b[i]) + c[i]);
  std::vector<float> da(24), db(24), dc(24);
  const grad_out outs[] = {{da.data(), false}, {db.data(), false}, {dc.data(), false}};
  add_backward(context(), s, r.data(), outs);
  EXPECT_TRUE(same_bits(da, r) && same_bits(db, r) && same_bits(dc, r));
  std::vector<float> shared = r;  // a gradient that is dy itself is left as it is
  const grad_out self[] = {{shared.data(), false}};
  add_backward(context(), s, shared.data(), self);
  EXPECT_TRUE(same_bits(shared, r));
  expect_gradient("add da", a, da, loss, k_linear);
  expect_gradient("add dc", c, dc, loss, k_linear);
}

// ---- kernel_context ----------------------------------------------------------------------

TEST(host_kernel_context, thread_count_comes_from_memweave_threads_and_bad_values_are_rejected) {
  ::setenv("MEMWEAVE_THREADS", "1", 1);
  EXPECT_EQ(kernel_context().threads(), 1);
  ::setenv("MEMWEAVE_THREADS", "0", 1);
  EXPECT_GE(kernel_context().threads(), 1);
  ::setenv("MEMWEAVE_THREADS", "2.5", 1);
  EXPECT_THROW(kernel_context{}, invalid_argument);
  ::setenv("MEMWEAVE_THREADS", "many", 1);
  EXPECT_THROW(kernel_context{}, invalid_argument);
  ::unsetenv("MEMWEAVE_THREADS");
  EXPECT_THROW(kernel_context(-1), invalid_argument);
  EXPECT_EQ(kernel_context(1).threads(), 1);
}

}  // namespace
}  // namespace memweave::kernels::host::test
