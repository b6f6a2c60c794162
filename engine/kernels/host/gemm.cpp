// Tiled GEMM over CBLAS.
//
// Invariant: the tile grid is a function of (M, N) alone: tiles of at most k_tile_m rows,
// and columns cut into about k_target_col_tiles pieces of at least k_min_tile_n (rounded to
// 16). Each tile is one cblas_sgemm call with OpenBLAS single-threaded (kernel_context), so
// the order of the floating-point operations of every element of C is fixed by the shape.
// Thread safety: tiles write disjoint parts of C; concurrent single-threaded OpenBLAS calls
// are safe.
#include "engine/kernels/host/gemm.hpp"

#include <cblas.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "engine/kernels/host/parallel.hpp"

namespace memweave::kernels::host::detail {

namespace {

constexpr std::int64_t k_tile_m = 256;
constexpr std::int64_t k_min_tile_n = 64;
constexpr std::int64_t k_target_col_tiles = 16;

struct tiling {
  std::int64_t tm, tn, rows, cols;
};

tiling tile(std::int64_t m, std::int64_t n) {
  tiling t{};
  t.tm = std::min(m, k_tile_m);
  std::int64_t tn = (n + k_target_col_tiles - 1) / k_target_col_tiles;
  tn = (tn + 15) / 16 * 16;
  t.tn = std::min(n, std::max(tn, k_min_tile_n));
  t.rows = (m + t.tm - 1) / t.tm;
  t.cols = (n + t.tn - 1) / t.tn;
  return t;
}

// One tile: rows [i0, i0+mi), columns [j0, j0+nj) of C, written to `c` with leading
// dimension `ldc` (C itself, or scratch).
void tile_gemm(const gemm_args& g, std::int64_t i0, std::int64_t mi, std::int64_t j0,
               std::int64_t nj, float beta, float* c, std::int64_t ldc) {
  const float* a = g.trans_a ? g.a + i0 : g.a + i0 * g.lda;
  const float* b = g.trans_b ? g.b + j0 * g.ldb : g.b + j0;
  cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans,
              g.trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(mi), static_cast<int>(nj),
              static_cast<int>(g.k), 1.0f, a, static_cast<int>(g.lda), b, static_cast<int>(g.ldb),
              beta, c, static_cast<int>(ldc));
}

template <class TileFn>
void for_each_tile(const kernel_context& ctx, const gemm_args& g, TileFn&& fn) {
  const tiling t = tile(g.m, g.n);
  parallel_for(ctx, t.rows * t.cols, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const std::int64_t r = i / t.cols, c = i % t.cols;
      const std::int64_t i0 = r * t.tm, j0 = c * t.tn;
      fn(i0, std::min(t.tm, g.m - i0), j0, std::min(t.tn, g.n - j0));
    }
  });
}

// CBLAS takes int dimensions: a larger GEMM must be cut by the caller.
void check_dims(const gemm_args& g) {
  constexpr std::int64_t k_max = std::numeric_limits<int>::max();
  MEMWEAVE_EXPECTS(g.m <= k_max && g.n <= k_max && g.k <= k_max && g.lda <= k_max &&
                       g.ldb <= k_max && g.ldc <= k_max,
                   "host GEMM of " + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" +
                       std::to_string(g.k) + " (leading dimensions " + std::to_string(g.lda) +
                       ", " + std::to_string(g.ldb) + ", " + std::to_string(g.ldc) +
                       "): a dimension exceeds CBLAS's int range; use smaller tensors or chunks");
}

}  // namespace

void gemm(const kernel_context& ctx, const gemm_args& g, float beta) {
  if (g.m <= 0 || g.n <= 0) return;
  check_dims(g);
  if (g.k <= 0) {  // op(A) * op(B) is zero: C = beta * C without reading C when beta = 0
    parallel_for(ctx, g.m, 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        if (beta == 0.0f) std::fill_n(g.c + i * g.ldc, g.n, 0.0f);
      }
    });
    return;
  }
  for_each_tile(ctx, g, [&](std::int64_t i0, std::int64_t mi, std::int64_t j0, std::int64_t nj) {
    tile_gemm(g, i0, mi, j0, nj, beta, g.c + i0 * g.ldc + j0, g.ldc);
  });
}

void gemm_add(const kernel_context& ctx, const gemm_args& g) {
  if (g.m <= 0 || g.n <= 0 || g.k <= 0) return;
  check_dims(g);
  for_each_tile(ctx, g, [&](std::int64_t i0, std::int64_t mi, std::int64_t j0, std::int64_t nj) {
    std::vector<float> scratch(static_cast<std::size_t>(mi * nj));
    tile_gemm(g, i0, mi, j0, nj, 0.0f, scratch.data(), nj);
    for (std::int64_t i = 0; i < mi; ++i) {
      float* c = g.c + (i0 + i) * g.ldc + j0;
      const float* s = scratch.data() + i * nj;
      for (std::int64_t j = 0; j < nj; ++j) c[j] += s[j];
    }
  });
}

}  // namespace memweave::kernels::host::detail
