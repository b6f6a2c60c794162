// Helpers shared by the host kernel tests: seeded random tensors, a central-difference
// gradient check, bitwise comparison, and a harness that reruns a kernel at other
// addresses and thread counts.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/kernels/host/host_kernels.hpp"
#include "memweave/core/error.hpp"

namespace memweave::kernels::host::test {

/// A context of `threads` workers, made once per count and shared by the tests.
inline const kernel_context& context(int threads = 2) {
  static std::unique_ptr<kernel_context> ctx[5];
  auto& c = ctx[threads];
  if (!c) c = std::make_unique<kernel_context>(threads);
  return *c;
}

/// "2x3x4x5".
inline std::string shape_text(const shape4& s) {
  return std::to_string(s.n) + "x" + std::to_string(s.c) + "x" + std::to_string(s.h) + "x" +
         std::to_string(s.w);
}

/// `count` uniform values in [lo, hi) from a generator seeded with `seed`.
inline std::vector<float> random_vector(std::size_t count, std::uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(count);
  for (float& x : v) x = dist(gen);
  return v;
}

/// Distinct values spaced by `gap` in random order (no ties: max pooling stays
/// differentiable under perturbations smaller than gap / 2).
inline std::vector<float> distinct_vector(std::size_t count, std::uint32_t seed,
                                          float gap = 0.05f) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) {
    v[i] = (static_cast<float>(i) - static_cast<float>(count) / 2) * gap;
  }
  std::mt19937 gen(seed);
  std::shuffle(v.begin(), v.end(), gen);
  return v;
}

/// sum_i y[i] * r[i] in double: the scalar loss whose gradient w.r.t. y is r.
inline double dot(const std::vector<float>& y, const std::vector<float>& r) {
  double s = 0.0;
  for (std::size_t i = 0; i < y.size(); ++i) s += static_cast<double>(y[i]) * r[i];
  return s;
}

/// Tolerance of the gradient check: |numeric - analytic| <= atol + rtol * |analytic|. The
/// default suits smooth nonlinear layers (tanh, BN, LRN: truncation error of order h^2);
/// k_linear suits layers linear in the checked tensor (conv, FC, pooling, dropout, concat,
/// add), where only float rounding of the forward remains.
struct fd_tolerance {
  double atol = 1e-3;
  double rtol = 5e-3;
};
inline constexpr fd_tolerance k_linear{1e-3, 1e-3};

/// Central differences: for up to `max_checks` indices of `param` (all when it is small,
/// else evenly spaced), numeric = (loss(p + h) - loss(p - h)) / (actual 2h, in double) and
/// compares with `analytic`. `loss` reruns the forward with the current `param`.
inline void expect_gradient(const std::string& what, std::vector<float>& param,
                            const std::vector<float>& analytic, const std::function<double()>& loss,
                            fd_tolerance tol = {}, float h = 1e-2f, std::size_t max_checks = 400) {
  ASSERT_EQ(param.size(), analytic.size()) << what;
  const std::size_t n = param.size();
  const std::size_t step = n <= max_checks ? 1 : (n + max_checks - 1) / max_checks;
  int failures = 0;
  for (std::size_t i = 0; i < n; i += step) {
    const float orig = param[i];
    const float up = orig + h, down = orig - h;
    param[i] = up;
    const double lu = loss();
    param[i] = down;
    const double ld = loss();
    param[i] = orig;
    const double numeric = (lu - ld) / (static_cast<double>(up) - static_cast<double>(down));
    const double err = std::abs(numeric - analytic[i]);
    if (err > tol.atol + tol.rtol * std::abs(analytic[i]) && failures++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: analytic " << analytic[i] << ", numeric " << numeric
                    << " (|diff| " << err << ")";
    }
  }
  EXPECT_EQ(failures, 0) << what << ": " << failures << " gradient entries off";
}

/// Whether two float vectors are bit-identical (NaNs included).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  return a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// Largest |a - b|.
inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

/// Largest |a|.
inline double max_abs(const std::vector<float>& a) {
  double m = 0.0;
  for (float v : a) m = std::max(m, std::abs(double(v)));
  return m;
}

/// A kernel under test: reads `in`, writes (or adds into) `out`.
using kernel_call = std::function<void(const kernel_context&, const std::vector<const float*>& in,
                                       const std::vector<float*>& out)>;

/// Runs `call` with copies of `inputs` and of `outputs` (their initial contents) placed
/// `offset` floats into fresh buffers, on a context of `threads`; returns the outputs.
inline std::vector<std::vector<float>> run_at(const kernel_call& call,
                                              const std::vector<std::vector<float>>& inputs,
                                              const std::vector<std::vector<float>>& outputs,
                                              int threads, std::size_t offset) {
  std::vector<std::vector<float>> in_buf, out_buf;
  std::vector<const float*> in_ptr;
  std::vector<float*> out_ptr;
  for (const auto& v : inputs) {
    in_buf.emplace_back(v.size() + offset + 1, -7.0f);
    std::copy(v.begin(), v.end(), in_buf.back().begin() + static_cast<std::ptrdiff_t>(offset));
  }
  for (const auto& v : outputs) {
    out_buf.emplace_back(v.size() + offset + 1, -7.0f);
    std::copy(v.begin(), v.end(), out_buf.back().begin() + static_cast<std::ptrdiff_t>(offset));
  }
  for (auto& b : in_buf) in_ptr.push_back(b.data() + offset);
  for (auto& b : out_buf) out_ptr.push_back(b.data() + offset);
  call(context(threads), in_ptr, out_ptr);
  std::vector<std::vector<float>> result;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const auto first = out_buf[i].begin() + static_cast<std::ptrdiff_t>(offset);
    result.emplace_back(first, first + static_cast<std::ptrdiff_t>(outputs[i].size()));
  }
  return result;
}

/// Expects `call` to give bit-identical outputs when run twice, at other addresses
/// (offsets of 1, 3 and 4 floats) and with 1 to 4 threads (capped at the cores).
inline void expect_deterministic(const std::string& what, const kernel_call& call,
                                 const std::vector<std::vector<float>>& inputs,
                                 const std::vector<std::vector<float>>& outputs) {
  const auto base = run_at(call, inputs, outputs, 2, 0);
  const std::pair<int, std::size_t> runs[] = {{2, 0}, {1, 0}, {3, 1}, {2, 3}, {4, 4}, {1, 3}};
  for (auto [threads, offset] : runs) {
    const auto again = run_at(call, inputs, outputs, threads, offset);
    for (std::size_t i = 0; i < base.size(); ++i) {
      EXPECT_TRUE(same_bits(base[i], again[i]))
          << what << ": output " << i << " differs with " << threads << " threads at offset "
          << offset << " (max |diff| " << max_abs_diff(base[i], again[i]) << ")";
    }
  }
}

/// A backward under test with its accumulate flag: writes (or adds into) `dx`.
using grad_call = std::function<void(const kernel_context&, float* dx, bool accumulate)>;

/// Expects accumulate = true to give exactly dx0[i] + g[i], g being what
/// accumulate = false writes (into a buffer full of NaN, which it must ignore).
inline void expect_accumulate_adds(const std::string& what, const grad_call& call,
                                   std::size_t count, std::uint32_t seed = 99) {
  std::vector<float> g(count, std::nanf(""));
  call(context(2), g.data(), false);
  for (std::size_t i = 0; i < count; ++i) {
    ASSERT_FALSE(std::isnan(g[i])) << what << ": overwrite left element " << i << " unwritten";
  }
  const std::vector<float> dx0 = random_vector(count, seed);
  std::vector<float> dx = dx0;
  call(context(2), dx.data(), true);
  std::vector<float> expected(count);
  for (std::size_t i = 0; i < count; ++i) expected[i] = dx0[i] + g[i];
  EXPECT_TRUE(same_bits(dx, expected))
      << what << ": accumulate is not dx + g (max |diff| " << max_abs_diff(dx, expected) << ")";
}

}  // namespace memweave::kernels::host::test
