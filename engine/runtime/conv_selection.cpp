// Host convolution candidates, their measurement and model. Measurement allocates its own
// scratch host buffers (the heap's memory is for the network's tensors); it runs once per
// distinct convolution, the selector caching the result.
#include "engine/runtime/conv_selection.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <vector>

#include "memweave/core/error.hpp"

namespace memweave {
namespace k = kernels::host;

std::string conv_candidate_name(const host_conv_choice& c) {
  if (c.algo == k::conv_algo::im2col_batch) return "im2col_batch:" + std::to_string(c.chunk);
  return k::to_string(c.algo);
}

host_conv_choice parse_conv_candidate(const std::string& name) {
  if (name == "direct") return {k::conv_algo::direct, 0};
  if (name == "im2col_image") return {k::conv_algo::im2col_image, 0};
  if (name.starts_with("im2col_batch:")) {
    std::int64_t chunk = 0;
    const char* b = name.data() + 13;
    const char* e = name.data() + name.size();
    auto [p, ec] = std::from_chars(b, e, chunk);
    if (ec == std::errc() && p == e && chunk > 0) return {k::conv_algo::im2col_batch, chunk};
  }
  throw invalid_argument("'" + name +
                         "' is not a host convolution algorithm: expected direct, "
                         "im2col_image or im2col_batch:<images>");
}

std::string conv_key(const std::string& backend, k::conv_pass pass, const shape4& in,
                     const conv_params& p) {
  static constexpr const char* passes[] = {"forward", "backward_data", "backward_filter"};
  return backend + "|" + passes[static_cast<int>(pass)] + "|" + to_string(in) +
         "|oc=" + std::to_string(p.out_channels) + " k=" + std::to_string(p.kernel_h) + "x" +
         std::to_string(p.kernel_w) + " s=" + std::to_string(p.stride_h) + "x" +
         std::to_string(p.stride_w) + " p=" + std::to_string(p.pad_h) + "x" +
         std::to_string(p.pad_w) + " d=" + std::to_string(p.dilation_h) + "x" +
         std::to_string(p.dilation_w) + " g=" + std::to_string(p.groups) +
         " b=" + std::to_string(p.bias ? 1 : 0);
}

std::vector<conv_candidate> host_conv_candidates(k::conv_pass pass, const shape4& in,
                                                 const conv_params& p) {
  std::vector<conv_candidate> out;
  out.push_back({"direct", 0, 0.0});
  out.push_back(
      {"im2col_image", k::conv_workspace_bytes(k::conv_algo::im2col_image, pass, in, p), 0.0});
  // Chunks of n, 7n/8, ..., n/8 images, then halving: workspace selection takes the largest
  // chunk that fits what is free, and a ladder of halves alone leaves up to half of that
  // unused (VGG16's conv1_2 at half its peak: 24 images fit, 16 ran).
  std::int64_t last = in.n + 1;
  auto add_batch = [&](std::int64_t chunk) {
    if (chunk < 2 || chunk >= last) return;
    out.push_back({"im2col_batch:" + std::to_string(chunk),
                   k::conv_workspace_bytes(k::conv_algo::im2col_batch, pass, in, p, chunk), 0.0});
    last = chunk;
  };
  for (std::int64_t eighths = 8; eighths >= 1; --eighths) add_batch(in.n * eighths / 8);
  for (std::int64_t chunk = in.n / 16; chunk >= 2; chunk /= 2) add_batch(chunk);
  return out;
}

std::vector<conv_candidate> measure_host_conv(const k::kernel_context& ctx, k::conv_pass pass,
                                              const shape4& in, const conv_params& p) {
  std::vector<conv_candidate> out = host_conv_candidates(pass, in, p);
  const shape4 y = p.output(in);
  const shape4 w{p.out_channels, in.c / p.groups, p.kernel_h, p.kernel_w};
  std::vector<float> x(static_cast<std::size_t>(in.count()), 0.5f);
  std::vector<float> wt(static_cast<std::size_t>(w.count()), 0.25f);
  std::vector<float> b(static_cast<std::size_t>(p.out_channels), 0.125f);
  std::vector<float> yb(static_cast<std::size_t>(y.count()), 0.75f);
  std::size_t ws_max = 0;
  for (const auto& c : out) ws_max = std::max(ws_max, c.workspace_bytes);
  std::vector<float> ws(ws_max / sizeof(float) + 1);
  for (auto& c : out) {
    const host_conv_choice choice = parse_conv_candidate(c.algorithm);
    const k::conv_config cfg{choice.algo, choice.chunk, ws.data(), ws.size() * sizeof(float)};
    auto run = [&] {
      switch (pass) {
        case k::conv_pass::forward:
          k::conv_forward(ctx, cfg, in, p, x.data(), wt.data(), p.bias ? b.data() : nullptr,
                          yb.data());
          break;
        case k::conv_pass::backward_data:
          k::conv_backward_data(ctx, cfg, in, p, wt.data(), yb.data(), x.data(), false);
          break;
        case k::conv_pass::backward_filter:
          k::conv_backward_filter(ctx, cfg, in, p, x.data(), yb.data(), wt.data(), nullptr);
          break;
      }
    };
    run();  // warm-up: page faults, caches
    const auto t0 = std::chrono::steady_clock::now();
    run();
    c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return out;
}

std::vector<conv_candidate> model_host_conv(k::conv_pass pass, const shape4& in,
                                            const conv_params& p, double flops_per_s) {
  std::vector<conv_candidate> out = host_conv_candidates(pass, in, p);
  const shape4 y = p.output(in);
  const double flops = 2.0 * static_cast<double>(y.count()) *
                       static_cast<double>(in.c / p.groups * p.kernel_h * p.kernel_w);
  for (auto& c : out) {
    const host_conv_choice choice = parse_conv_candidate(c.algorithm);
    double efficiency = 0.3;
    if (choice.algo == k::conv_algo::im2col_image) efficiency = 0.6;
    if (choice.algo == k::conv_algo::im2col_batch) {
      efficiency = 0.6 + 0.3 * static_cast<double>(choice.chunk) / static_cast<double>(in.n);
    }
    c.seconds = flops / (flops_per_s * efficiency);
  }
  return out;
}

}  // namespace memweave
