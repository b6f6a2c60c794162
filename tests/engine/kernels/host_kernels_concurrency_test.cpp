// Several threads running host kernels on one kernel_context at once (as the host device's
// stream workers do) get the same bits as one thread running them alone. Small shapes:
// this binary also runs under ThreadSanitizer.
#include <gtest/gtest.h>

#include <thread>

#include "kernel_test_util.hpp"

namespace memweave::kernels::host::test {
namespace {

struct outputs {
  std::vector<float> conv_y, conv_dw, fc_dx, bn_y;
};

outputs run_layers(const kernel_context& ctx, const std::vector<float>& x,
                   const std::vector<float>& w, const std::vector<float>& fw) {
  const shape4 in{2, 4, 9, 9};
  const conv_params cp{.out_channels = 6,
                       .kernel_h = 3,
                       .kernel_w = 3,
                       .pad_h = 1,
                       .pad_w = 1,
                       .groups = 2,
                       .bias = false};
  outputs o;
  o.conv_y.resize(2 * 6 * 81);
  o.conv_dw.resize(w.size());
  std::vector<float> ws(conv_workspace_bytes(conv_algo::im2col_batch, conv_pass::forward, in, cp) /
                        4);
  const conv_config cfg{conv_algo::im2col_batch, 0, ws.data(), ws.size() * 4};
  conv_forward(ctx, cfg, in, cp, x.data(), w.data(), nullptr, o.conv_y.data());
  conv_backward_filter(ctx, cfg, in, cp, x.data(), o.conv_y.data(), o.conv_dw.data(), nullptr);
  const fc_params fp{.out_features = 10, .bias = false};
  o.fc_dx.resize(x.size());
  fc_backward_data(ctx, in, fp, fw.data(), o.conv_y.data(), o.fc_dx.data(), false);
  const std::vector<float> gamma(4, 1.0f), beta(4, 0.0f);
  std::vector<float> mean(4), invstd(4);
  o.bn_y.resize(x.size());
  bn_forward_training(ctx, in, {}, x.data(), gamma.data(), beta.data(), o.bn_y.data(), mean.data(),
                      invstd.data());
  return o;
}

// Runs run_layers from `k_threads` threads at once on `ctx`, three times each, and
// expects the bits of a lone run.
void expect_concurrent_runs_match(const kernel_context& ctx) {
  const auto x = random_vector(2 * 4 * 81, 1), w = random_vector(6 * 2 * 9, 2);
  const auto fw = random_vector(10 * 4 * 81, 3);
  const outputs alone = run_layers(ctx, x, w, fw);
  constexpr int k_threads = 4;
  std::vector<outputs> got(k_threads);
  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep)
        got[static_cast<std::size_t>(t)] = run_layers(ctx, x, w, fw);
    });
  }
  for (auto& t : threads) t.join();
  for (const outputs& o : got) {
    EXPECT_TRUE(same_bits(o.conv_y, alone.conv_y));
    EXPECT_TRUE(same_bits(o.conv_dw, alone.conv_dw));
    EXPECT_TRUE(same_bits(o.fc_dx, alone.fc_dx));
    EXPECT_TRUE(same_bits(o.bn_y, alone.bn_y));
  }
}

// One-thread contexts never enter TBB: this checks the kernels' own code and concurrent
// single-threaded OpenBLAS calls, and is meaningful under ThreadSanitizer.
TEST(host_kernels_concurrency, threads_sharing_a_one_thread_context_get_the_bits_of_a_lone_run) {
  kernel_context ctx(1);
  expect_concurrent_runs_match(ctx);
}

TEST(host_kernels_concurrency, threads_sharing_a_tbb_context_get_the_bits_of_a_lone_run) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "Debian's libtbb is not built with ThreadSanitizer: its task hand-offs are "
                  "invisible to TSan and every one reads as a race";
#endif
  kernel_context ctx(2);
  expect_concurrent_runs_match(ctx);
}

}  // namespace
}  // namespace memweave::kernels::host::test
