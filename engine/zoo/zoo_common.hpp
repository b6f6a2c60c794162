// Helpers shared by the zoo's network families (private to engine/zoo).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "memweave/engine/network_builder.hpp"
#include "memweave/engine/zoo.hpp"

namespace memweave::zoo_detail {

/// The options after defaults and checks: the input side resolved (0 -> native), every
/// field validated with a message naming `net`. Throws invalid_argument.
zoo_options resolve(std::string_view net, const zoo_options& o, std::int64_t native_side,
                    std::int64_t min_side);

/// max(1, round(c * scale)), rounded up to a multiple of `multiple`.
std::int64_t scaled(std::int64_t c, double scale, std::int64_t multiple = 1);

/// A convolution's parameters: kernel kh x kw, stride s, padding ph x pw.
conv_params conv_p(std::int64_t out, std::int64_t kh, std::int64_t kw, std::int64_t stride,
                   std::int64_t ph, std::int64_t pw, bool bias);

/// CONV (no bias) -> BN -> RELU, named <name>, <name>_bn, <name>_relu. Returns the RELU.
layer_handle conv_bn_relu(network_builder& b, layer_handle x, std::int64_t out, std::int64_t kh,
                          std::int64_t kw, std::int64_t stride, std::int64_t ph, std::int64_t pw,
                          const std::string& name, float bn_epsilon = 1e-5f);

/// Max or average pooling k x k, stride s, padding p.
pool_params pool_p(pool_mode mode, std::int64_t k, std::int64_t s, std::int64_t p);

}  // namespace memweave::zoo_detail
