// The micro-steps of one split step (TSPLIT, split_step.hpp), for every backend: each
// micro-batch's step_io, and which of its staged tensors' slices go into their micro buffers
// before it runs and back out after it. How a slice crosses (a memcpy on the host, a
// cudaMemcpyAsync on the GPU) is the backend's slice_copier; the order of the micro-batches
// and which slice each buffer holds is decided here once, so the host kernels, the cuda
// kernels and staged_copy_bytes (what the null device charges) agree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "engine/layers/split_step.hpp"

namespace memweave::layers {

/// The step_io of images [b, e) of `io`: every batch-shaped pointer moved to image b, every
/// shape's n set to e - b; parameters, their gradients and per-channel aux tensors unchanged.
/// In backward, a micro-batch after the first adds to the parameter gradients
/// (accumulate_param_grads).
step_io micro_batch_io(const step_io& io, std::int64_t b, std::int64_t e, bool forward);

namespace detail {

/// The link bytes of `images` images of staged tensor `t`: fp16 ones cross as half.
std::size_t slice_link_bytes(const staged_tensor& t, std::int64_t images);

/// Channel groups (both backends): the micro buffer of the staged tensor whose whole value
/// `p` points into (a micro-batch's y and dy point at its first image), or null.
float* micro_buffer_of(std::span<const staged_tensor> staged, const float* p) noexcept;
/// A group's rows [k0, ...) of `row` floats each of a tensor without images: its micro buffer
/// where staged, else in place (null stays null).
float* group_rows(std::span<const staged_tensor> staged, float* whole, std::int64_t k0,
                  std::int64_t row) noexcept;

/// No micro-batch.
constexpr std::size_t k_none = static_cast<std::size_t>(-1);

/// Which micro-batch's slice each staged tensor's micro buffer holds, pass by pass: what
/// micro_steps copies and what staged_copy_bytes charges, from one rule. A pass before the
/// last reads only what the step does not write (BN's statistics: x, dy), so only those are
/// copied in for it; a buffer that already holds the micro-batch's slice (the turn of a
/// pass, or a slice handed over by the step before: staged_tensor::held) is not copied again.
class held_slices {
 public:
  explicit held_slices(std::span<const staged_tensor> staged) {
    for (const staged_tensor& t : staged) {
      at_.push_back(t.held >= 0 ? static_cast<std::size_t>(t.held) : k_none);
    }
  }
  static bool wanted(const staged_tensor& t, bool last_pass) {
    return t.read && (!t.written || last_pass);
  }
  bool copy_in(std::size_t ti, const staged_tensor& t, std::size_t i, bool last_pass) const {
    return wanted(t, last_pass) && at_[ti] != i;
  }
  // After the last pass's micro-batch (`final`: its last), what it wrote goes out, but the
  // final slice of a tensor that keeps it for the next step.
  static bool copy_out(const staged_tensor& t, bool last_pass, bool final) {
    return last_pass && t.written && !(final && t.keeps_last);
  }
  // After micro-batch i ran (and, in the last pass, what it wrote went out).
  void ran(std::size_t ti, const staged_tensor& t, std::size_t i, bool last_pass) {
    at_[ti] = wanted(t, last_pass) || (t.written && last_pass) ? i : k_none;
  }

 private:
  std::vector<std::size_t> at_;
};

/// Whether a split step's passes start at its last micro-batch: where the step before handed
/// over that micro-batch's slices (staged_tensor::held).
bool starts_reversed(std::span<const staged_tensor> staged, std::size_t micro_batches);

}  // namespace detail

/// How a backend moves a staged tensor's slices between its whole value (host memory) and
/// its micro buffer (device memory). Called from the thread that runs the split step.
class slice_copier {
 public:
  virtual ~slice_copier() = default;
  /// Images [from, from + images) of `t` into its micro buffer (an fp16 one expanded).
  virtual void copy_in(const staged_tensor& t, std::int64_t from, std::int64_t images) = 0;
  /// The same out of it (an fp16 one rounded, its error kept: fp16_error).
  virtual void copy_out(const staged_tensor& t, std::int64_t from, std::int64_t images) = 0;
  /// Runs `outs` (only copy_out calls) and `ins` (only copy_in calls, of other tensors),
  /// returning when both are done: at once where the backend can (the link's two
  /// directions), one after the other by default.
  virtual void both(const std::function<void()>& outs, const std::function<void()>& ins) {
    outs();
    ins();
  }
  /// The largest relative error of the values rounded to fp16 on their way out so far.
  virtual double fp16_error() const noexcept { return 0; }
};

/// The micro-steps of one split step: each micro-batch's step_io, its staged tensors' slices
/// copied into their micro buffers before it runs and, after the step's last pass, back out
/// (each micro-batch's copies out beside the next one's copies in: slice_copier::both).
/// Consecutive passes run the micro-batches in alternating directions, so each turn starts at
/// the micro-batch whose slices are still in the buffers; the first pass starts at the last
/// micro-batch where that is the one handed over. The step's math must allow it: every pass
/// but a first one in order is element-wise or sums exactly (BN's statistics), and a step
/// handed a slice must allow any order in its first pass (any_order_first_pass).
class micro_steps {
 public:
  /// `copier` may be null when `staged` is empty.
  micro_steps(const step_io& io, bool forward, int parts, std::span<const staged_tensor> staged,
              slice_copier* copier);

  /// Runs f(micro-batch io) for each micro-batch, in this pass's direction; `last_pass`: the
  /// step is done with them afterwards (what it wrote is copied out: each micro-batch's while
  /// the next one's slices come in, the last one's at the end).
  template <class F>
  void each(F&& f, bool last_pass = true) const {
    const std::size_t n = bounds_.size() - 1;
    const bool reverse = reverse_;
    reverse_ = !reverse_;
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t i = reverse ? n - 1 - k : k;
      const std::int64_t b = bounds_[i], e = bounds_[i + 1];
      if (staged_.empty()) {
        f(micro_batch_io(io_, b, e, forward_));
        continue;
      }
      step_io s = micro_batch_io(base_, b, e, forward_);
      copy_around(i, last_pass);
      link_micro_buffers(s);
      f(s);
      ran(i, k + 1 == n, last_pass);
    }
    if (!staged_.empty()) copy_around(detail::k_none, last_pass);
  }

  /// Whether the next pass runs the micro-batches last first.
  bool reversed_start() const noexcept { return reverse_; }

  /// Bytes copied between the staged tensors' whole values and their micro buffers so far
  /// (an fp16 one's at two bytes a value).
  std::size_t copied() const noexcept { return copied_; }

 private:
  void link_micro_buffers(step_io& s) const;
  void copy_around(std::size_t i, bool last_pass) const;
  void ran(std::size_t i, bool final, bool last_pass) const;

  const step_io& io_;
  step_io base_;  // io_ with its pointers to staged tensors nulled (links_ names them)
  std::vector<std::pair<std::size_t, std::size_t>> links_;  // (batch pointer's field, tensor)
  bool forward_;
  std::span<const staged_tensor> staged_;
  slice_copier* copier_;
  std::vector<std::int64_t> bounds_;
  mutable detail::held_slices held_;
  mutable bool reverse_;                   // the next pass's direction
  mutable std::vector<std::int64_t> out_;  // per staged tensor: images to copy out, from out_from_
  mutable std::int64_t out_from_ = 0;      // the first image of the micro-batch that ran last
  mutable std::size_t copied_ = 0;
};

}  // namespace memweave::layers
