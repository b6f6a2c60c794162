// Private: the cache of cuDNN convolution heuristics held by a cuda_kernel_context. The
// heuristic list of a (pass, input shape, convolution) depends only on them and on the
// device, so it is asked of cuDNN once and reused at every step; the choice by workspace
// size is made afresh from the cached list each time. Not thread-safe (as its context).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <vector>

#include "engine/kernels/cuda/conv.hpp"

namespace memweave::kernels::cuda::detail {

class conv_algo_cache {
 public:
  /// (pass, n, c, h, w, out_channels, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w,
  /// dilation_h, dilation_w, groups).
  using key = std::array<std::int64_t, 15>;

  static key make_key(conv_pass pass, const shape4& in, const conv_params& p) noexcept {
    return {static_cast<std::int64_t>(pass),
            in.n,
            in.c,
            in.h,
            in.w,
            p.out_channels,
            p.kernel_h,
            p.kernel_w,
            p.stride_h,
            p.stride_w,
            p.pad_h,
            p.pad_w,
            p.dilation_h,
            p.dilation_w,
            p.groups};
  }

  /// The cached list for `k`, or null.
  const std::vector<conv_algo_perf>* find(const key& k) const {
    const auto it = entries_.find(k);
    return it == entries_.end() ? nullptr : &it->second;
  }

  /// Stores `list` for `k` and returns the stored copy.
  const std::vector<conv_algo_perf>& store(const key& k, std::vector<conv_algo_perf> list) {
    return entries_[k] = std::move(list);
  }

 private:
  std::map<key, std::vector<conv_algo_perf>> entries_;
};

}  // namespace memweave::kernels::cuda::detail
