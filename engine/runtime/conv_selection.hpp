// The engine's side of convolution-workspace selection: the host backend's candidate
// algorithms for one convolution pass (direct; im2col per image; im2col over chunks of n,
// 7n/8, ..., n/8, n/16, n/32, ... images), their cache key, their measurement (each run once on
// scratch buffers after a warm-up) and, on the null device, their modelled time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/kernels/host/conv.hpp"
#include "memweave/conv_workspace/conv_candidate.hpp"
#include "memweave/engine/layer_params.hpp"

namespace memweave {

/// An algorithm and its im2col_batch chunk, as a candidate names it ("im2col_batch:8").
struct host_conv_choice {
  kernels::host::conv_algo algo = kernels::host::conv_algo::direct;
  std::int64_t chunk = 0;
};

/// "direct", "im2col_image", "im2col_batch:<chunk>" <-> choice. Throws invalid_argument for
/// a name that is none of these.
std::string conv_candidate_name(const host_conv_choice& c);
host_conv_choice parse_conv_candidate(const std::string& name);

/// "host|forward|2x3x32x32|oc=8 k=3x3 s=1x1 p=1x1 d=1x1 g=1 b=1".
std::string conv_key(const std::string& backend, kernels::host::conv_pass pass, const shape4& in,
                     const conv_params& p);

/// The candidates with their workspaces, seconds left 0.
std::vector<conv_candidate> host_conv_candidates(kernels::host::conv_pass pass, const shape4& in,
                                                 const conv_params& p);

/// host_conv_candidates with measured seconds.
std::vector<conv_candidate> measure_host_conv(const kernels::host::kernel_context& ctx,
                                              kernels::host::conv_pass pass, const shape4& in,
                                              const conv_params& p);

/// host_conv_candidates with seconds from the null device's model: the pass's flops at an
/// efficiency that grows with the workspace (direct 30%, im2col_image 60%, im2col_batch
/// 60% + 30% x chunk/n of `flops_per_s`).
std::vector<conv_candidate> model_host_conv(kernels::host::conv_pass pass, const shape4& in,
                                            const conv_params& p, double flops_per_s);

}  // namespace memweave
