// Host fully connected layer over detail::gemm.
//
// Invariants: every element is summed in a fixed order that depends only on the shapes:
// y by a lane-wise dot product over the input features (then + b), dW and db one image at a
// time in image order, dx over the output features in feature order. So a split of the
// batch or of the output features (TSPLIT; fc_backward_data_extend) gives the same bits. Thread
// safety: none of its own; concurrent calls must not share outputs.
#include "engine/kernels/host/fc.hpp"

#include <algorithm>

#include "engine/kernels/host/parallel.hpp"
#include "engine/kernels/kernel_checks.hpp"

namespace memweave::kernels::host {

using std::int64_t;

namespace {

// x . w over n elements in a fixed order: k_lanes partial sums of strided elements, added
// in lane order, then the tail. The order depends on n alone, so an output feature gets the
// same bits whichever other features the call computes (a split along output features).
float dot(const float* __restrict a, const float* __restrict b, int64_t n) {
  constexpr int64_t k_lanes = 16;
  float acc[k_lanes] = {};
  int64_t k = 0;
  for (; k + k_lanes <= n; k += k_lanes) {
    for (int64_t l = 0; l < k_lanes; ++l) acc[l] += a[k + l] * b[k + l];
  }
  float sum = 0.0f;
  for (float v : acc) sum += v;
  for (; k < n; ++k) sum += a[k] * b[k];
  return sum;
}

// Columns of dx per task: the order of each element's sum does not depend on it.
constexpr int64_t k_dx_block = 64;

enum class dx_mode { write, add, extend };

void backward_data(const kernel_context& ctx, const char* kernel, const shape4& in,
                   const fc_params& p, const float* w, const float* dy, float* dx, dx_mode mode) {
  const checks::fc_dims d = checks::check_fc(kernel, in, p, {{"w", w}, {"dy", dy}, {"dx", dx}});
  const int64_t blocks = (d.in + k_dx_block - 1) / k_dx_block;
  // Each element of dx sums its output features one by one in feature order, starting from
  // 0 (write, add) or from dx (extend: the features before this call's), so a call over
  // features [0, a) and an extend over [a, b) give the bits of one call over [0, b).
  detail::parallel_for(ctx, blocks, detail::grain_for(d.n * d.out * k_dx_block),
                       [&](int64_t lo, int64_t hi) {
                         float acc[k_dx_block];
                         for (int64_t blk = lo; blk < hi; ++blk) {
                           const int64_t c0 = blk * k_dx_block;
                           const int64_t nc = std::min(k_dx_block, d.in - c0);
                           for (int64_t i = 0; i < d.n; ++i) {
                             float* __restrict dxr = dx + i * d.in + c0;
                             for (int64_t c = 0; c < nc; ++c) {
                               acc[c] = mode == dx_mode::extend ? dxr[c] : 0.0f;
                             }
                             const float* dyr = dy + i * d.out;
                             for (int64_t j = 0; j < d.out; ++j) {
                               const float g = dyr[j];
                               const float* __restrict wr = w + j * d.in + c0;
                               for (int64_t c = 0; c < nc; ++c) acc[c] += g * wr[c];
                             }
                             for (int64_t c = 0; c < nc; ++c) {
                               dxr[c] = mode == dx_mode::add ? dxr[c] + acc[c] : acc[c];
                             }
                           }
                         }
                       });
}

}  // namespace

void fc_forward(const kernel_context& ctx, const shape4& in, const fc_params& p, const float* x,
                const float* w, const float* b, float* y) {
  const char* kernel = "fc_forward";
  const checks::fc_dims d = checks::check_fc(kernel, in, p, {{"x", x}, {"w", w}, {"y", y}});
  if (p.bias) detail::check_pointer(kernel, "b (the layer has a bias)", b);
  // Each output element is one fixed-order dot product (plus the bias): the same bits for
  // any batch split (TSPLIT, images) and any split of the output features (TSPLIT,
  // channels). OpenBLAS rounds an element differently with the GEMM's M and N.
  detail::parallel_for(ctx, d.out, detail::grain_for(d.n * d.in), [&](int64_t lo, int64_t hi) {
    for (int64_t j = lo; j < hi; ++j) {
      for (int64_t i = 0; i < d.n; ++i) {
        const float v = dot(x + i * d.in, w + j * d.in, d.in);
        y[i * d.out + j] = p.bias ? v + b[j] : v;
      }
    }
  });
}

void fc_backward_data(const kernel_context& ctx, const shape4& in, const fc_params& p,
                      const float* w, const float* dy, float* dx, bool accumulate) {
  backward_data(ctx, "fc_backward_data", in, p, w, dy, dx,
                accumulate ? dx_mode::add : dx_mode::write);
}

void fc_backward_data_extend(const kernel_context& ctx, const shape4& in, const fc_params& p,
                             const float* w, const float* dy, float* dx) {
  backward_data(ctx, "fc_backward_data_extend", in, p, w, dy, dx, dx_mode::extend);
}

void fc_backward_weights(const kernel_context& ctx, const shape4& in, const fc_params& p,
                         const float* x, const float* dy, float* dw, float* db, bool accumulate) {
  const char* kernel = "fc_backward_weights";
  const checks::fc_dims d = checks::check_fc(kernel, in, p, {{"x", x}, {"dy", dy}, {"dw", dw}});
  // Each element adds its images' products one by one in image order (the first
  // overwriting unless accumulate): the same bits for any split of the batch or of the
  // output features.
  detail::parallel_for(ctx, d.out, detail::grain_for(d.n * d.in), [&](int64_t lo, int64_t hi) {
    for (int64_t j = lo; j < hi; ++j) {
      float* __restrict row = dw + j * d.in;
      for (int64_t i = 0; i < d.n; ++i) {
        const float g = dy[i * d.out + j];
        const float* __restrict xr = x + i * d.in;
        if (i == 0 && !accumulate) {
          for (int64_t c = 0; c < d.in; ++c) row[c] = g * xr[c];
        } else {
          for (int64_t c = 0; c < d.in; ++c) row[c] += g * xr[c];
        }
      }
    }
  });
  if (db == nullptr) return;
  detail::parallel_for(ctx, d.out, detail::grain_for(d.n), [&](int64_t lo, int64_t hi) {
    for (int64_t j = lo; j < hi; ++j) {
      float sum = accumulate ? db[j] : 0.0f;
      for (int64_t i = 0; i < d.n; ++i) sum += dy[i * d.out + j];
      db[j] = sum;
    }
  });
}

}  // namespace memweave::kernels::host
