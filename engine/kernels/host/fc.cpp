// Host fully connected layer over detail::gemm.
//
// Invariants: GEMM tiles depend only on shapes (gemm.cpp); the bias add and the bias
// gradient are per element / per output feature with a fixed order (images ascending,
// float); the weight and bias gradients add one image at a time, so a split of the batch
// gives the same bits. Thread safety: none of its own; concurrent calls must not share outputs.
#include "engine/kernels/host/fc.hpp"

#include "engine/kernels/host/gemm.hpp"
#include "engine/kernels/host/parallel.hpp"
#include "engine/kernels/kernel_checks.hpp"

namespace memweave::kernels::host {

using std::int64_t;

void fc_forward(const kernel_context& ctx, const shape4& in, const fc_params& p, const float* x,
                const float* w, const float* b, float* y) {
  const char* kernel = "fc_forward";
  const checks::fc_dims d = checks::check_fc(kernel, in, p, {{"x", x}, {"w", w}, {"y", y}});
  if (p.bias) detail::check_pointer(kernel, "b (the layer has a bias)", b);
  // One GEMM per image: OpenBLAS rounds a row differently with the number of rows (its
  // kernels for small M), so a batch split into micro-batches (TSPLIT) would not give the
  // same bits as one GEMM over the batch.
  for (int64_t i = 0; i < d.n; ++i) {
    detail::gemm_args g;
    g.trans_b = true;
    g.m = 1, g.n = d.out, g.k = d.in;
    g.a = x + i * d.in, g.lda = d.in;
    g.b = w, g.ldb = d.in;
    g.c = y + i * d.out, g.ldc = d.out;
    detail::gemm(ctx, g, 0.0f);
  }
  if (!p.bias) return;
  detail::parallel_for(ctx, d.n, detail::grain_for(d.out), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      float* __restrict yr = y + i * d.out;
      for (int64_t j = 0; j < d.out; ++j) yr[j] += b[j];
    }
  });
}

void fc_backward_data(const kernel_context& ctx, const shape4& in, const fc_params& p,
                      const float* w, const float* dy, float* dx, bool accumulate) {
  const char* kernel = "fc_backward_data";
  const checks::fc_dims d = checks::check_fc(kernel, in, p, {{"w", w}, {"dy", dy}, {"dx", dx}});
  for (int64_t i = 0; i < d.n; ++i) {  // per image, as fc_forward
    detail::gemm_args g;
    g.m = 1, g.n = d.in, g.k = d.out;
    g.a = dy + i * d.out, g.lda = d.out;
    g.b = w, g.ldb = d.in;
    g.c = dx + i * d.in, g.ldc = d.in;
    if (accumulate) {
      detail::gemm_add(ctx, g);
    } else {
      detail::gemm(ctx, g, 0.0f);
    }
  }
}

void fc_backward_weights(const kernel_context& ctx, const shape4& in, const fc_params& p,
                         const float* x, const float* dy, float* dw, float* db, bool accumulate) {
  const char* kernel = "fc_backward_weights";
  const checks::fc_dims d = checks::check_fc(kernel, in, p, {{"x", x}, {"dy", dy}, {"dw", dw}});
  // One rank-1 GEMM per image, added in image order: one GEMM over the batch would sum the
  // images inside BLAS, and a split of the batch (TSPLIT) would change that sum.
  for (int64_t i = 0; i < d.n; ++i) {
    detail::gemm_args g;
    g.trans_a = true;
    g.m = d.out, g.n = d.in, g.k = 1;
    g.a = dy + i * d.out, g.lda = d.out;
    g.b = x + i * d.in, g.ldb = d.in;
    g.c = dw, g.ldc = d.in;
    detail::gemm(ctx, g, i == 0 && !accumulate ? 0.0f : 1.0f);
  }
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
