// The micro-steps of a split step; see micro_steps.hpp.
#include "engine/layers/micro_steps.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace memweave::layers {

step_io micro_batch_io(const step_io& io, std::int64_t b, std::int64_t e, bool forward) {
  step_io s = io;
  const auto at = [b](const float* p, const shape4& shape) {
    return p == nullptr ? p : p + b * shape.per_image();
  };
  for (std::size_t i = 0; i < s.input_shapes.size(); ++i) {
    if (i < s.inputs.size()) s.inputs[i] = at(io.inputs[i], io.input_shapes[i]);
    if (i < s.input_grads.size()) {
      s.input_grads[i].data = const_cast<float*>(at(io.input_grads[i].data, io.input_shapes[i]));
    }
    s.input_shapes[i].n = e - b;
  }
  const shape4& out = io.l->output_shape;
  s.output = const_cast<float*>(at(io.output, out));
  s.output_grad = at(io.output_grad, out);
  if (io.labels != nullptr) s.labels = io.labels + b;
  if (io.l->type == layer_type::dropout) s.aux[0] = const_cast<float*>(at(io.aux[0], out));
  s.first_image = b;
  // A micro-batch after the first adds to what the earlier ones left (and the first adds too
  // where the whole step would).
  s.accumulate_param_grads = io.accumulate_param_grads || (!forward && b > 0);
  return s;
}

namespace {

// Visits the pointers of `s` that may name a staged tensor (batch-shaped ones): the inputs
// and their gradients, the aux tensors (DROPOUT's mask), the output and its gradient, the
// labels.
template <class F>
void each_batch_pointer(step_io& s, F&& f) {
  for (const float*& p : s.inputs) f(p);
  for (auto& g : s.input_grads) f(g.data);
  for (float*& p : s.aux) f(p);
  f(s.output);
  f(s.output_grad);
  f(s.labels);
}

}  // namespace

namespace detail {

std::size_t slice_link_bytes(const staged_tensor& t, std::int64_t images) {
  return static_cast<std::size_t>(images * t.per_image) *
         (t.fp16 ? sizeof(std::uint16_t) : sizeof(float));
}

float* micro_buffer_of(std::span<const staged_tensor> staged, const float* p) noexcept {
  if (p == nullptr) return nullptr;
  for (const staged_tensor& t : staged) {
    if (p >= t.whole && p < t.whole + t.n * t.per_image) return t.micro;
  }
  return nullptr;
}

float* group_rows(std::span<const staged_tensor> staged, float* whole, std::int64_t k0,
                  std::int64_t row) noexcept {
  if (whole == nullptr) return nullptr;
  if (float* m = micro_buffer_of(staged, whole)) return m;
  return whole + k0 * row;
}

bool starts_reversed(std::span<const staged_tensor> staged, std::size_t micro_batches) {
  if (micro_batches < 2) return false;
  return std::any_of(staged.begin(), staged.end(), [&](const staged_tensor& t) {
    return t.channels == 0 && t.held == static_cast<std::int64_t>(micro_batches) - 1;
  });
}

}  // namespace detail

micro_steps::micro_steps(const step_io& io, bool forward, int parts,
                         std::span<const staged_tensor> staged, slice_copier* copier)
    : io_(io),
      forward_(forward),
      staged_(staged),
      copier_(copier),
      bounds_(micro_batch_bounds(io.input_shapes[0].n, parts)),
      held_(staged),
      reverse_(detail::starts_reversed(staged, bounds_.size() - 1)),
      out_(staged.size(), 0) {
  if (!staged.empty() && copier == nullptr) {
    throw std::logic_error("split step of " + io.l->name + ": staged tensors but no copier");
  }
  // io's pointer to a staged tensor is its whole value's (staged_tensor::whole): each
  // micro-step gets the micro buffer instead, and the slicing never moves along the whole
  // value (which an fp16 one holds in half the bytes).
  base_ = io;
  std::size_t field = 0;
  each_batch_pointer(base_, [&](auto& p) {
    for (std::size_t ti = 0; ti < staged_.size(); ++ti) {
      if (p == nullptr || p != staged_[ti].whole) continue;
      links_.emplace_back(field, ti);
      p = nullptr;
      break;
    }
    ++field;
  });
}

// A micro-step's pointers to the staged tensors (nulled in base_) become their micro
// buffers, which hold the running micro-batch's slices from their first image.
void micro_steps::link_micro_buffers(step_io& s) const {
  std::size_t field = 0, next = 0;
  each_batch_pointer(s, [&](auto& p) {
    if (next < links_.size() && links_[next].first == field) {
      p = staged_[links_[next].second].micro;
      ++next;
    }
    ++field;
  });
}

// After micro-batch i ran (`final`: the pass's last): what the last pass wrote of it is to go
// out with the next copies.
void micro_steps::ran(std::size_t i, bool final, bool last_pass) const {
  out_from_ = bounds_[i];
  for (std::size_t ti = 0; ti < staged_.size(); ++ti) {
    const staged_tensor& t = staged_[ti];
    out_[ti] = detail::held_slices::copy_out(t, last_pass, final) ? bounds_[i + 1] - bounds_[i] : 0;
    held_.ran(ti, t, i, last_pass);
  }
}

// The copies out of the micro-batch that ran last (out_, from image out_from_) and the
// copies in of micro-batch i (k_none: none): the outs and the other tensors' ins at once,
// then the ins of tensors whose slice went out (their one micro buffer). Each side touches
// only its own tensors' buffers, so the two never race.
void micro_steps::copy_around(std::size_t i, bool last_pass) const {
  const auto in_images = [&](std::size_t ti) -> std::int64_t {
    if (i == detail::k_none || !held_.copy_in(ti, staged_[ti], i, last_pass)) return 0;
    return bounds_[i + 1] - bounds_[i];
  };
  const auto copy_in = [&](bool after_out) {
    for (std::size_t ti = 0; ti < staged_.size(); ++ti) {
      const std::int64_t n = in_images(ti);
      if (n == 0 || (out_[ti] != 0) != after_out) continue;
      copier_->copy_in(staged_[ti], bounds_[i], n);
    }
  };
  const auto copy_out = [&] {
    for (std::size_t ti = 0; ti < staged_.size(); ++ti) {
      if (out_[ti] != 0) copier_->copy_out(staged_[ti], out_from_, out_[ti]);
    }
  };
  std::size_t outs = 0, ins = 0;
  for (std::size_t ti = 0; ti < staged_.size(); ++ti) {
    outs += detail::slice_link_bytes(staged_[ti], out_[ti]);
    ins += detail::slice_link_bytes(staged_[ti], in_images(ti));
  }
  if (outs != 0 && ins != 0) {
    copier_->both(copy_out, [&] { copy_in(false); });
  } else {
    copy_out();
    copy_in(false);
  }
  copy_in(true);
  copied_ += outs + ins;
  std::fill(out_.begin(), out_.end(), 0);
}

}  // namespace memweave::layers
