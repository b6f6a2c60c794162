// One way to run one convolution pass: an algorithm, the workspace it needs, and how long it
// took when measured (or modelled, on the null device).
#pragma once

#include <cstddef>
#include <string>

namespace memweave {

struct conv_candidate {
  std::string algorithm;            ///< backend name: "direct", "im2col_batch:8", a cuDNN enum
  std::size_t workspace_bytes = 0;  ///< scratch memory it needs
  double seconds = 0.0;             ///< measured (or modelled) time of one call
  friend bool operator==(const conv_candidate&, const conv_candidate&) = default;
};

}  // namespace memweave
