// Helpers of the tiled-segment tests: small networks whose middle is a segment, the
// segment's tensors filled at random, the members run untiled with the ordinary host layer
// steps (the reference), and the fused tiled steps.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "engine/layers/layer_step.hpp"
#include "engine/tiling/tiled_segment.hpp"
#include "engine/zoo/zoo_common.hpp"
#include "memweave/engine/network_builder.hpp"

namespace memweave::tiling::test {

namespace k = kernels::host;

/// A context of `threads` workers, one per count, shared by the tests.
inline const k::kernel_context& context(int threads = 2) {
  static std::unique_ptr<k::kernel_context> ctx[5];
  auto& c = ctx[threads];
  if (!c) c = std::make_unique<k::kernel_context>(threads);
  return *c;
}

inline std::vector<float> random_values(std::size_t count, std::mt19937& rng, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(count);
  for (float& x : v) x = d(rng);
  return v;
}

/// CONV k x k with a bias, stride, padding and dilation the same on both axes.
inline conv_params conv(std::int64_t out, std::int64_t k, std::int64_t stride, std::int64_t pad,
                        std::int64_t dilation = 1) {
  conv_params p = zoo_detail::conv_p(out, k, k, stride, pad, pad, true);
  p.dilation_h = p.dilation_w = dilation;
  return p;
}

/// A network: DATA (shape `in`), the layers `body` adds (returning the segment's output),
/// FC and SOFTMAX. Returns the network; the members are every layer `body` added.
inline network wrap(shape4 in,
                    const std::function<layer_handle(network_builder&, layer_handle)>& body) {
  network_builder b("tiling_test");
  const layer_handle x = b.data(in, 2);
  const layer_handle out = body(b, x);
  b.softmax_loss(b.fc(out, {2, true}));
  return std::move(b).build();
}

/// The segment of `net` from the DATA layer through every layer before the FC.
inline tiled_segment whole_body(const network& net, std::int64_t th, std::int64_t tw) {
  std::vector<layer_id> members;
  for (layer_id id = 1; id + 2 < net.size(); ++id) members.push_back(id);
  return make_segment(net, 0, members, th, tw);
}

/// The segment's tensors: the input, every member's parameters (trained ones random, BN's
/// running statistics 0 and 1) and aux, the output gradient.
struct segment_data {
  std::vector<float> input, output_grad;
  std::vector<std::vector<float>> params;  ///< every member's param_tensors, in order
  std::vector<std::vector<float>> aux;     ///< every member's aux_tensors, in order
};

inline segment_data random_data(const tiled_segment& s, std::uint32_t seed) {
  std::mt19937 rng(seed);
  segment_data d;
  d.input = random_values(static_cast<std::size_t>(s.layers[0].output_shape.count()), rng);
  for (std::size_t m = 1; m < s.layers.size(); ++m) {
    for (const param_tensor_spec& p : s.layers[m].param_tensors) {
      const auto count = static_cast<std::size_t>(p.shape.count());
      if (p.name == "running_mean") {
        d.params.emplace_back(count, 0.0f);
      } else if (p.name == "running_var") {
        d.params.emplace_back(count, 1.0f);
      } else if (p.name == "gamma") {
        d.params.push_back(random_values(count, rng, 0.5f, 1.5f));
      } else {
        d.params.push_back(random_values(count, rng, -0.5f, 0.5f));
      }
    }
    for (const aux_tensor_spec& a : s.layers[m].aux_tensors) {
      d.aux.emplace_back(static_cast<std::size_t>(a.shape.count()), 0.0f);
    }
  }
  d.output_grad =
      random_values(static_cast<std::size_t>(s.layers.back().output_shape.count()), rng);
  return d;
}

/// What a forward and backward produced.
struct segment_result {
  std::vector<float> output;
  std::vector<std::vector<float>> params, aux;  ///< after the forward (BN running stats)
  std::vector<std::vector<float>> param_grads;  ///< trained parameters' gradients, in order
  std::vector<float> input_grad;
};

inline std::vector<std::vector<float>> trained_grads(const tiled_segment& s) {
  std::vector<std::vector<float>> g;
  for (std::size_t m = 1; m < s.layers.size(); ++m) {
    for (const param_tensor_spec& p : s.layers[m].param_tensors) {
      if (p.trained) g.emplace_back(static_cast<std::size_t>(p.shape.count()), 0.0f);
    }
  }
  return g;
}

/// The members run untiled, one host layer step each (CONV: direct), forward then backward.
/// With `abs_backward` the backward runs on |dy|, |w| and CONV's |x| (the forward's values
/// otherwise): for CONV, POOL, ACT, ADD and CONCAT each gradient element is then the sum of
/// the absolute values of the terms the true one sums (ReLU's and max pooling's choices, and
/// tanh's 1 - y^2 >= 0, come from the forward).
/// With `inference` the forward is an evaluation's (BN: the running statistics).
inline segment_result run_untiled(const tiled_segment& s, segment_data d, bool backward = true,
                                  int threads = 2, bool abs_backward = false,
                                  bool inference = false) {
  const auto& ctx = context(threads);
  const std::size_t count = s.layers.size();
  std::vector<std::vector<float>> y(count), dy(count);
  y[0] = d.input;
  auto grads = trained_grads(s);
  std::vector<layers::step_io> ios(count);
  std::size_t p = 0, g = 0, a = 0;
  for (std::size_t m = 1; m < count; ++m) {
    const layer& l = s.layers[m];
    layers::step_io& io = ios[m];
    io.l = &l;
    for (const layer_id in : l.inputs) {
      io.inputs.push_back(y[in].data());
      io.input_shapes.push_back(s.layers[in].output_shape);
    }
    for (const param_tensor_spec& t : l.param_tensors) {
      io.params.push_back(d.params[p++].data());
      if (t.trained) io.param_grads.push_back(grads[g++].data());
    }
    for (std::size_t i = 0; i < l.aux_tensors.size(); ++i) io.aux.push_back(d.aux[a++].data());
    y[m].assign(static_cast<std::size_t>(l.output_shape.count()), 0.0f);
    io.output = y[m].data();
    io.inference = inference;
    layers::layer_steps_for(l.type).forward(ctx, io);
  }
  segment_result r;
  r.output = y.back();
  r.params = d.params;
  r.aux = d.aux;
  if (!backward) return r;
  for (std::size_t m = 0; m < count; ++m) {
    dy[m].assign(static_cast<std::size_t>(s.layers[m].output_shape.count()), 0.0f);
  }
  dy.back() = d.output_grad;
  std::vector<std::vector<float>> abs_params, abs_inputs(count);
  auto absolute = [](std::vector<float> v) {
    for (float& x : v) x = std::fabs(x);
    return v;
  };
  if (abs_backward) {
    dy.back() = absolute(dy.back());
    for (const auto& t : d.params) abs_params.push_back(absolute(t));
    std::size_t q = 0;
    for (std::size_t m = 1; m < count; ++m) {
      layers::step_io& io = ios[m];
      for (float*& t : io.params) t = abs_params[q++].data();
      if (s.layers[m].type == layer_type::conv) {
        abs_inputs[m] = absolute(y[s.layers[m].inputs[0]]);
        io.inputs[0] = abs_inputs[m].data();
      }
    }
  }
  for (std::size_t m = count - 1; m >= 1; --m) {
    layers::step_io& io = ios[m];
    io.output_grad = dy[m].data();
    for (const layer_id in : s.layers[m].inputs) io.input_grads.push_back({dy[in].data(), true});
    layers::layer_steps_for(s.layers[m].type).backward(ctx, io);
  }
  r.param_grads = grads;
  r.input_grad = dy[0];
  return r;
}

/// The bounds of run_untiled's backward terms (see abs_backward).
inline segment_result run_untiled_abs(const tiled_segment& s, const segment_data& d) {
  return run_untiled(s, d, true, 2, true);
}

/// The fused tiled steps (forward, then backward unless `backward` is false; `inference`:
/// an evaluation's forward).
inline segment_result run_tiled(const tiled_segment& s, segment_data d, bool backward = true,
                                int threads = 2, bool inference = false) {
  const auto& ctx = context(threads);
  layers::step_io io;
  io.input_shapes = {s.layers[0].output_shape};
  io.inputs = {d.input.data()};
  segment_result r;
  r.output.assign(static_cast<std::size_t>(s.layers.back().output_shape.count()), 0.0f);
  io.output = r.output.data();
  for (auto& t : d.params) io.params.push_back(t.data());
  for (auto& t : d.aux) io.aux.push_back(t.data());
  std::vector<float> ws(tiled_workspace_bytes(s, backward) / sizeof(float) + 1);
  io.workspace = ws.data();
  io.workspace_bytes = ws.size() * sizeof(float);
  io.inference = inference;
  tiled_forward(ctx, s, io);
  r.params = d.params;
  r.aux = d.aux;
  if (!backward) return r;
  auto grads = trained_grads(s);
  for (auto& t : grads) io.param_grads.push_back(t.data());
  r.input_grad.assign(d.input.size(), 0.0f);
  io.input_grads = {{r.input_grad.data(), false}};
  io.output_grad = d.output_grad.data();
  io.update_running_stats = false;
  tiled_backward(ctx, s, io);
  r.param_grads = grads;
  return r;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// The index of the first element where a and b differ by more than tol(i), or -1.
inline long first_beyond(const std::vector<float>& a, const std::vector<float>& b,
                         const std::function<double(std::size_t)>& tol) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!(std::fabs(static_cast<double>(a[i]) - b[i]) <= tol(i))) return static_cast<long>(i);
  }
  return -1;
}

}  // namespace memweave::tiling::test
