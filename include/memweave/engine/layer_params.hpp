// The vocabulary shared by the engine's graph (layers, zoo, liveness) and its kernels:
// tensor shapes and the parameters of each layer type. Plain data, no behaviour beyond
// shape arithmetic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace memweave {

/// An NCHW float32 shape. FC outputs are (n, c, 1, 1).
struct shape4 {
  std::int64_t n = 0, c = 0, h = 1, w = 1;
  std::int64_t count() const noexcept { return n * c * h * w; }
  std::int64_t per_image() const noexcept { return c * h * w; }
  std::size_t bytes() const noexcept { return static_cast<std::size_t>(count()) * sizeof(float); }
  friend bool operator==(const shape4&, const shape4&) = default;
};

/// "32x3x224x224".
std::string to_string(const shape4& s);

/// TILED is a fused segment of spatially-local layers run tile by tile (SFT; made by the
/// tiling planner, engine/tiling/, never by a network description).
enum class layer_type {
  data,
  conv,
  fc,
  pool,
  act,
  bn,
  lrn,
  dropout,
  softmax_loss,
  concat,
  add,
  tiled
};

/// "CONV", "FC", ...
const char* to_string(layer_type t) noexcept;

struct conv_params {
  std::int64_t out_channels = 0;
  std::int64_t kernel_h = 1, kernel_w = 1;
  std::int64_t stride_h = 1, stride_w = 1;
  std::int64_t pad_h = 0, pad_w = 0;
  std::int64_t dilation_h = 1, dilation_w = 1;
  std::int64_t groups = 1;
  bool bias = true;
  /// Output shape for input `in`.
  shape4 output(const shape4& in) const noexcept;
};

struct fc_params {
  std::int64_t out_features = 0;
  bool bias = true;
};

enum class pool_mode { max, average };

struct pool_params {
  pool_mode mode = pool_mode::max;
  std::int64_t kernel_h = 2, kernel_w = 2;
  std::int64_t stride_h = 2, stride_w = 2;
  std::int64_t pad_h = 0, pad_w = 0;
  bool global = false;  ///< kernel = input's H x W (global average pooling)
  /// Adaptive average pooling (torchvision's AdaptiveAvgPool2d) when both are > 0: the
  /// output is adaptive_h x adaptive_w whatever the input's H x W; kernel, stride and pad
  /// are unused. Output row i averages input rows [adaptive_begin(i, H, adaptive_h),
  /// adaptive_end(i, H, adaptive_h)) (columns alike), divided by its own window's size.
  std::int64_t adaptive_h = 0, adaptive_w = 0;
  // Average pooling divides by kernel_h * kernel_w, padding included (cuDNN's
  // COUNT_INCLUDE_PADDING); max ignores the padding.
  /// Output shape for input `in` (floor division, as cuDNN; windows start inside the
  /// padded input).
  shape4 output(const shape4& in) const noexcept;
  bool adaptive() const noexcept { return adaptive_h > 0 || adaptive_w > 0; }
};

/// The window of output index i of an adaptive pooling along one axis of `in` inputs and
/// `out` outputs: [floor(i * in / out), ceil((i + 1) * in / out)), never empty. Exact for
/// in, out up to 2^31 (the products stay below 2^63).
inline std::int64_t adaptive_begin(std::int64_t i, std::int64_t in, std::int64_t out) noexcept {
  return i * in / out;
}
inline std::int64_t adaptive_end(std::int64_t i, std::int64_t in, std::int64_t out) noexcept {
  return ((i + 1) * in + out - 1) / out;
}

/// y = max(x, 0), tanh(x), or the logistic sigmoid 1 / (1 + exp(-x)).
enum class act_mode { relu, tanh, sigmoid };

struct act_params {
  act_mode mode = act_mode::relu;
};

/// Training normalises with the batch mean and biased variance; the running variance keeps
/// the unbiased one (m / (m - 1), m = n*h*w); evaluation normalises with the running ones.
struct bn_params {
  float epsilon = 1e-5f;
  float momentum = 0.1f;  ///< running = (1 - momentum) * running + momentum * batch
};

/// Cross-channel local response normalization (AlexNet):
/// y = x / (k + alpha/size * sum_{window} x^2)^beta.
struct lrn_params {
  std::int64_t size = 5;
  float alpha = 1e-4f;
  float beta = 0.75f;
  float k = 2.0f;
};

struct dropout_params {
  float ratio = 0.5f;  ///< probability of dropping; kept values scale by 1/(1-ratio)
};

}  // namespace memweave
