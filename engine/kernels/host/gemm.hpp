// Private: a row-major single-precision GEMM cut into tiles that run in parallel, each
// tile one single-threaded cblas_sgemm. The tiling depends only on (M, N), so a GEMM
// gives the same bits for any thread count and any addresses.
#pragma once

#include <cstdint>

#include "engine/kernels/host/kernel_context.hpp"

namespace memweave::kernels::host::detail {

/// Operands of C = alpha * op(A) * op(B) + beta * C, row-major; op(A) is M x K, op(B) is
/// K x N. A transposed operand is stored as its transpose (op(A) = A^T, A is K x M).
struct gemm_args {
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  const float* a = nullptr;
  std::int64_t lda = 0;
  const float* b = nullptr;
  std::int64_t ldb = 0;
  float* c = nullptr;
  std::int64_t ldc = 0;
};

/// C = op(A) * op(B) + beta * C (beta 0 or 1). With beta = 0, C's old contents (NaN
/// included) are ignored.
void gemm(const kernel_context& ctx, const gemm_args& g, float beta);

/// C = C + (op(A) * op(B)): each tile is computed into scratch with beta = 0 and then added,
/// so the result equals, bit for bit, C + (what gemm with beta = 0 would write).
void gemm_add(const kernel_context& ctx, const gemm_args& g);

}  // namespace memweave::kernels::host::detail
