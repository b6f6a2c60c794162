// Small networks and checks shared by the engine/graph tests.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>

#include "memweave/core/error.hpp"
#include "memweave/engine/network_builder.hpp"

namespace memweave::test {

/// The message of the invalid_argument `f` throws, or "(no exception)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const invalid_argument& e) {
    return e.what();
  }
  return "(no exception)";
}

/// Expects `message` to contain every one of `parts`.
inline void expect_contains(const std::string& message,
                            std::initializer_list<std::string_view> parts) {
  for (std::string_view p : parts)
    EXPECT_NE(message.find(p), std::string::npos) << "'" << p << "' missing from: " << message;
}

inline conv_params conv3x3(std::int64_t out, bool bias = true) {
  conv_params p;
  p.out_channels = out;
  p.kernel_h = p.kernel_w = 3;
  p.pad_h = p.pad_w = 1;
  p.bias = bias;
  return p;
}

/// The nested fans of the paper's Fig. 6: a -> b; b fans to c and d; c -> e; d -> f; f fans
/// to g and h; i joins e, g, h; j is the loss. With `c_first` false, b's d branch is added
/// (and so explored) before its c branch.
inline network make_fig6(bool c_first = true) {
  network_builder b("fig6");
  auto a = b.data({2, 3, 8, 8}, 12, "a");
  auto bb = b.conv(a, conv3x3(4), "b");
  layer_handle c, d, e;
  pool_params gap;
  gap.global = true;
  gap.mode = pool_mode::average;
  auto c_branch = [&] {
    c = b.conv(bb, conv3x3(4), "c");
    e = b.pool(c, gap, "e");  // 2x4x1x1
  };
  if (c_first) c_branch();
  d = b.conv(bb, conv3x3(4), "d");
  auto f = b.conv(d, conv3x3(4), "f");
  auto g = b.fc(f, fc_params{4, true}, "g");
  auto h = b.fc(f, fc_params{4, true}, "h");
  if (!c_first) c_branch();
  auto i = b.concat({e, g, h}, "i");  // 2x12x1x1
  b.softmax_loss(i, "j");
  return std::move(b).build();
}

/// DATA -> FC -> k LRN -> SOFTMAX on (batch, classes, 1, 1): every forward output is read by
/// some backward step (the paper's footnote-2 assumption), all activations the same size.
inline network make_lrn_chain(int k, std::int64_t batch = 64, std::int64_t classes = 10) {
  network_builder b("lrn_chain");
  auto x = b.data({batch, classes, 1, 1}, classes);
  x = b.fc(x, fc_params{classes, true}, "fc");
  for (int i = 1; i <= k; ++i) x = b.lrn(x, lrn_params{}, "lrn" + std::to_string(i));
  b.softmax_loss(x, "loss");
  return std::move(b).build();
}

}  // namespace memweave::test
