// The solver's settings, changeable between iterations (executor::set_solver), and the
// learning-rate schedules of `memweave train` (--lr-schedule, --warmup).
//
// Training conventions (those of Caffe, which the engine follows on every backend):
//   SGD with momentum in Caffe's form: v = momentum * v + lr * (g + weight_decay * w);
//     w = w - v. The stored momentum ("<layer>.<param>.momentum") is therefore lr times
//     PyTorch's momentum buffer (PyTorch: b = momentum * b + (g + wd * w); w -= lr * b),
//     and equal to it only while lr is constant and 1.
//   Weight decay applies to every trained tensor (weights, biases, BN gamma and beta).
//   The loss is the mean over the batch of the softmax cross-entropy.
//   BN normalises with the biased batch variance and keeps the unbiased one (n / (n - 1))
//     in its running variance: running = (1 - momentum) * running + momentum * batch.
//   Average pooling divides by the whole window, padding included.
//   Initial weights are He-uniform: U(-b, b), b = sqrt(6 / fan_in); biases, BN beta and
//     running means 0; BN gamma and running variances 1; momenta 0.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace memweave {

struct solver_settings {
  float learning_rate = 0.01f;  ///< lr, finite, in [0, 1000]
  float momentum = 0.9f;        ///< mu, finite, in [0, 1)
  float weight_decay = 5e-4f;   ///< wd, finite, in [0, 1]
  /// Throws invalid_argument naming the field (prefixed with `knob`, the option or call the
  /// values came from) and the range expected.
  void validate(const std::string& knob) const;
  friend bool operator==(const solver_settings&, const solver_settings&) = default;
};

/// A learning-rate schedule: the rate of iteration `it` (counted from 0, as
/// run_iteration's batch, so a resumed run continues it) from the base rate.
///   constant        base
///   step:E:G        base * G^floor(it / E)          (E >= 1, G in (0, 1])
///   cosine:T        base * (1 + cos(pi * min(it, T) / T)) / 2   (T >= 1; 0 from T on)
/// and, with warmup N >= 1, each multiplied by (it + 1) / N while it < N (linear warm-up).
struct lr_schedule {
  enum class kind { constant, step, cosine };
  kind type = kind::constant;
  std::int64_t every = 1;   ///< step: iterations per decay
  double gamma = 1.0;       ///< step: the factor per decay
  std::int64_t t_max = 1;   ///< cosine: iterations to reach 0
  std::int64_t warmup = 0;  ///< iterations of linear warm-up (0: none)

  /// Parses "constant", "step:EVERY:GAMMA" or "cosine:T_MAX"; invalid_argument naming
  /// `knob` and the form expected otherwise.
  static lr_schedule parse(std::string_view text, const std::string& knob);
  /// The learning rate of iteration `it` (>= 0).
  double rate(double base, std::int64_t it) const noexcept;
  /// "step:30:0.1", "cosine:100", "constant", with " warmup N" when set.
  std::string describe() const;
};

}  // namespace memweave
