// The custom CUDA kernels of the cuda backend (what cuDNN and cuBLAS lack, and the fp16
// conversions of compressed swaps) and their launchers.
//
// Invariants:
//   - element-wise kernels evaluate the host kernels' expressions in the same order with
//     every operation rounded on its own (__fmul_rn, __fadd_rn, ... never contract into an
//     FMA), so for equal inputs they give the host's bits;
//   - the dropout hash is the host's (engine/kernels/host/dropout.cpp): two rounds of the
//     splitmix64 finalizer, the mask bit-identical to the host mask for a seed;
//   - reductions have one fixed order: a thread's elements in index order, then a shared
//     memory tree; one block for the loss (BN's sums, a block per channel, are in
//     micro_batch.cu). Deterministic.
// Thread safety: launchers are free functions over caller memory; none has state.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/kernels/cuda/custom_kernels.hpp"
#include "engine/kernels/cuda/kernel_launch.cuh"

namespace memweave::kernels::cuda::detail {

namespace {

using std::int64_t;

// The host's mix64 (splitmix64's finalizer after the golden-ratio increment).
__device__ __host__ inline std::uint64_t mix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__global__ void dropout_forward_kernel(int64_t count, std::uint64_t seed_hash, float ratio,
                                       float keep, const float* __restrict__ x,
                                       float* __restrict__ y, float* __restrict__ mask,
                                       int64_t first) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const std::uint64_t h = mix64(seed_hash + static_cast<std::uint64_t>(first + i));
    // h >> 40 < 2^24: exact in float, and so is the scaling by 2^-24.
    const float u = __fmul_rn(static_cast<float>(h >> 40), 0x1.0p-24f);
    const float m = u >= ratio ? keep : 0.0f;
    mask[i] = m;
    y[i] = __fmul_rn(x[i], m);
  }
}

__global__ void mask_backward_kernel(int64_t count, const float* __restrict__ mask, const float* dy,
                                     float* dx, bool accumulate) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const float g = __fmul_rn(dy[i], mask[i]);
    dx[i] = accumulate ? __fadd_rn(dx[i], g) : g;
  }
}

__global__ void act_backward_kernel(int64_t count, int mode, const float* __restrict__ y,
                                    const float* dy, float* dx, bool accumulate) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    // The host's expressions with its rounding (no contraction into fused multiply-adds).
    const float g = mode == 0   ? (y[i] > 0.0f ? dy[i] : 0.0f)
                    : mode == 1 ? __fmul_rn(dy[i], __fsub_rn(1.0f, __fmul_rn(y[i], y[i])))
                                : __fmul_rn(dy[i], __fmul_rn(y[i], __fsub_rn(1.0f, y[i])));
    dx[i] = accumulate ? __fadd_rn(dx[i], g) : g;
  }
}

__global__ void add_kernel(int64_t count, const float* a, const float* b, float* y) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    y[i] = __fadd_rn(a[i], b[i]);
  }
}

__global__ void accumulate_kernel(int64_t rows, int64_t row_length, const float* src,
                                  int64_t src_pitch, float* dst, int64_t dst_pitch) {
  const int64_t count = rows * row_length;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const int64_t r = i / row_length, j = i - r * row_length;
    float* d = dst + r * dst_pitch + j;
    *d = __fadd_rn(*d, src[r * src_pitch + j]);
  }
}

// One thread per column, its rows in order: deterministic.
__global__ void column_sums_kernel(int64_t rows, int64_t cols, const float* __restrict__ src,
                                   int64_t src_pitch, float* dst, bool accumulate) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < cols;
       j += stride) {
    float sum = accumulate ? dst[j] : 0.0f;
    for (int64_t r = 0; r < rows; ++r) sum = __fadd_rn(sum, src[r * src_pitch + j]);
    dst[j] = sum;
  }
}

__device__ inline bool label_ok(float l, int64_t classes) {
  return isfinite(l) && floorf(l) == l && l >= 0.0f && l < static_cast<float>(classes);
}

// One block of k_threads: thread t takes images t, t + k_threads, ...
__global__ void softmax_loss_kernel(int64_t n, int64_t classes, const float* __restrict__ x,
                                    const float* __restrict__ labels, double* loss,
                                    int* label_error, int64_t divisor, bool accumulate) {
  __shared__ double partial[k_threads];
  __shared__ int bad[k_threads];
  double sum = 0.0;
  int b = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float l = labels[i];
    if (!label_ok(l, classes)) {
      b = 1;
      continue;
    }
    const float* xp = x + i * classes;
    float mx = xp[0];
    for (int64_t j = 1; j < classes; ++j) mx = xp[j] > mx ? xp[j] : mx;
    double s = 0.0;
    for (int64_t j = 0; j < classes; ++j) s += static_cast<double>(expf(__fsub_rn(xp[j], mx)));
    const double lse = static_cast<double>(mx) + log(s);
    sum += lse - static_cast<double>(xp[static_cast<int64_t>(l)]);
  }
  partial[threadIdx.x] = sum;
  bad[threadIdx.x] = b;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      partial[threadIdx.x] += partial[threadIdx.x + half];
      bad[threadIdx.x] |= bad[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const double share = partial[0] / static_cast<double>(divisor);
    *loss = accumulate ? *loss + share : share;
    *label_error = accumulate ? (*label_error | bad[0]) : bad[0];
  }
}

__global__ void softmax_loss_grad_kernel(int64_t n, int64_t classes, const float* __restrict__ y,
                                         const float* __restrict__ labels, float* dx,
                                         bool accumulate, int* label_error, int64_t divisor) {
  const int64_t count = n * classes;
  const float nf = static_cast<float>(divisor);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const int64_t img = i / classes, j = i - img * classes;
    const float l = labels[img];
    float target = 0.0f;
    if (label_ok(l, classes)) {
      target = static_cast<int64_t>(l) == j ? 1.0f : 0.0f;
    } else if (j == 0) {
      *label_error = 1;
    }
    const float g = __fdiv_rn(__fsub_rn(y[i], target), nf);
    dx[i] = accumulate ? __fadd_rn(dx[i], g) : g;
  }
}

__global__ void sgd_kernel(int64_t count, float lr, float momentum, float weight_decay,
                           const float* __restrict__ g, float* __restrict__ w,
                           float* __restrict__ v) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    // Host: v = momentum * v + lr * (g + weight_decay * w); w -= v.
    const float decayed = __fadd_rn(g[i], __fmul_rn(weight_decay, w[i]));
    const float vi = __fadd_rn(__fmul_rn(momentum, v[i]), __fmul_rn(lr, decayed));
    v[i] = vi;
    w[i] = __fsub_rn(w[i], vi);
  }
}

// Adaptive average pooling (the host's engine/kernels/host/pool.cpp). One thread per output
// (forward) or input (backward) element of a plane stack; windows as adaptive_begin/end of
// layer_params.hpp, restated here (nvcc compiles this file as C++17).
__device__ inline int64_t adaptive_lo(int64_t i, int64_t in, int64_t out) {
  return i * in / out;
}
__device__ inline int64_t adaptive_hi(int64_t i, int64_t in, int64_t out) {
  return ((i + 1) * in + out - 1) / out;
}

// Each output sums its window in row-major order, then divides by the window's size: the
// host's order and rounding.
__global__ void adaptive_avg_pool_forward_kernel(int64_t planes, int64_t h, int64_t w, int64_t oh,
                                                 int64_t ow, const float* __restrict__ x,
                                                 float* __restrict__ y) {
  const int64_t count = planes * oh * ow;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const int64_t t = i / (oh * ow), r = i / ow % oh, c = i % ow;
    const int64_t h0 = adaptive_lo(r, h, oh), h1 = adaptive_hi(r, h, oh);
    const int64_t w0 = adaptive_lo(c, w, ow), w1 = adaptive_hi(c, w, ow);
    const float* xp = x + t * h * w;
    float sum = 0.0f;
    for (int64_t ih = h0; ih < h1; ++ih) {
      for (int64_t iw = w0; iw < w1; ++iw) sum = __fadd_rn(sum, xp[ih * w + iw]);
    }
    y[i] = __fdiv_rn(sum, static_cast<float>((h1 - h0) * (w1 - w0)));
  }
}

// A gather: each input element sums the shares dy / size of the windows holding it in
// output scan order, which is the order the host's scatter adds them in.
__global__ void adaptive_avg_pool_backward_kernel(int64_t planes, int64_t h, int64_t w, int64_t oh,
                                                  int64_t ow, const float* __restrict__ dy,
                                                  float* dx, bool accumulate) {
  const int64_t count = planes * h * w;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const int64_t t = i / (h * w), ih = i / w % h, iw = i % w;
    // Windows holding row ih: r in [floor(ih * oh / h), ceil((ih + 1) * oh / h)).
    const int64_t r0 = ih * oh / h, r1 = ((ih + 1) * oh + h - 1) / h;
    const int64_t c0 = iw * ow / w, c1 = ((iw + 1) * ow + w - 1) / w;
    const float* dyp = dy + t * oh * ow;
    float g = 0.0f;
    for (int64_t r = r0; r < r1 && r < oh; ++r) {
      const int64_t h0 = adaptive_lo(r, h, oh), h1 = adaptive_hi(r, h, oh);
      if (ih < h0 || ih >= h1) continue;
      for (int64_t c = c0; c < c1 && c < ow; ++c) {
        const int64_t w0 = adaptive_lo(c, w, ow), w1 = adaptive_hi(c, w, ow);
        if (iw < w0 || iw >= w1) continue;
        g = __fadd_rn(g, __fdiv_rn(dyp[r * ow + c], static_cast<float>((h1 - h0) * (w1 - w0))));
      }
    }
    dx[i] = accumulate ? __fadd_rn(dx[i], g) : g;
  }
}

// fp16.hpp's conversions (the host codec's bits): __float2half_rn rounds to nearest even with
// +-inf from 65520 on, and every non-NaN fp16 is exactly an fp32, as the host's bit
// operations do; a NaN keeps its top payload bits (the quiet bit set where they are 0) both
// ways, where the conversion instructions would give a canonical NaN.
__device__ inline std::uint16_t fp16_bits_of(float x) {
  const std::uint32_t bits = __float_as_uint(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    const auto payload = static_cast<std::uint32_t>((bits & 0x7fffffu) >> 13);
    return static_cast<std::uint16_t>(((bits >> 16) & 0x8000u) | 0x7c00u |
                                      (payload != 0 ? payload : 0x200u));
  }
  return __half_as_ushort(__float2half_rn(x));
}

__device__ inline float float_of_fp16_bits(std::uint16_t h) {
  if ((h & 0x7fffu) > 0x7c00u) {
    return __uint_as_float((static_cast<std::uint32_t>(h & 0x8000u) << 16) | 0x7f800000u |
                           (static_cast<std::uint32_t>(h & 0x3ffu) << 13));
  }
  return __half2float(__ushort_as_half(h));
}

// The round trip's relative error is measured as fp16_encode measures it (in float,
// against max(|x|, 2^-14); NaN for NaN and infinite x, which the comparison skips). The
// largest is a max, the same in any order: per thread, then per warp, then atomicMax on the
// bits (non-negative floats, +inf included, order as their bit patterns do).
__global__ void fp16_encode_kernel(int64_t count, const float* __restrict__ src,
                                   std::uint16_t* __restrict__ dst, unsigned* max_error_bits) {
  constexpr float k_error_floor = 6.103515625e-05f;  // fp16_error_floor: 2^-14
  float worst = 0.0f;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const float x = src[i];
    const std::uint16_t h = fp16_bits_of(x);
    dst[i] = h;
    const float error =
        __fdiv_rn(fabsf(__fsub_rn(x, float_of_fp16_bits(h))), fmaxf(fabsf(x), k_error_floor));
    worst = error > worst ? error : worst;
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    worst = fmaxf(worst, __shfl_down_sync(0xffffffffu, worst, offset));
  }
  if ((threadIdx.x & 31u) == 0 && worst > 0.0f) atomicMax(max_error_bits, __float_as_uint(worst));
}

__global__ void fp16_decode_kernel(int64_t count, const std::uint16_t* __restrict__ src,
                                   float* __restrict__ dst) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    dst[i] = float_of_fp16_bits(src[i]);
  }
}

}  // namespace

void launch_dropout_forward(cudaStream_t stream, int64_t count, std::uint64_t seed, float ratio,
                            float keep, const float* x, float* y, float* mask, int64_t first) {
  if (count <= 0) return;
  dropout_forward_kernel<<<grid_for(count), k_threads, 0, stream>>>(count, mix64(seed), ratio, keep,
                                                                    x, y, mask, first);
  check_launch("dropout_forward_kernel");
}

void launch_mask_backward(cudaStream_t stream, int64_t count, const float* mask, const float* dy,
                          float* dx, bool accumulate) {
  if (count <= 0) return;
  mask_backward_kernel<<<grid_for(count), k_threads, 0, stream>>>(count, mask, dy, dx, accumulate);
  check_launch("mask_backward_kernel");
}

void launch_act_backward(cudaStream_t stream, int64_t count, int mode, const float* y,
                         const float* dy, float* dx, bool accumulate) {
  if (count <= 0) return;
  act_backward_kernel<<<grid_for(count), k_threads, 0, stream>>>(count, mode, y, dy, dx,
                                                                 accumulate);
  check_launch("act_backward_kernel");
}

void launch_add(cudaStream_t stream, int64_t count, const float* a, const float* b, float* y) {
  if (count <= 0) return;
  add_kernel<<<grid_for(count), k_threads, 0, stream>>>(count, a, b, y);
  check_launch("add_kernel");
}

void launch_accumulate(cudaStream_t stream, int64_t rows, int64_t row_length, const float* src,
                       int64_t src_pitch, float* dst, int64_t dst_pitch) {
  if (rows <= 0 || row_length <= 0) return;
  accumulate_kernel<<<grid_for(rows * row_length), k_threads, 0, stream>>>(
      rows, row_length, src, src_pitch, dst, dst_pitch);
  check_launch("accumulate_kernel");
}

void launch_column_sums(cudaStream_t stream, int64_t rows, int64_t cols, const float* src,
                        int64_t src_pitch, float* dst, bool accumulate) {
  if (cols <= 0) return;
  column_sums_kernel<<<grid_for(cols), k_threads, 0, stream>>>(rows, cols, src, src_pitch, dst,
                                                               accumulate);
  check_launch("column_sums_kernel");
}

void launch_softmax_loss(cudaStream_t stream, int64_t n, int64_t classes, const float* x,
                         const float* labels, double* loss, int* label_error, int64_t divisor,
                         bool accumulate) {
  if (n <= 0 || classes <= 0) return;
  softmax_loss_kernel<<<1, k_threads, 0, stream>>>(n, classes, x, labels, loss, label_error,
                                                   divisor > 0 ? divisor : n, accumulate);
  check_launch("softmax_loss_kernel");
}

void launch_softmax_loss_grad(cudaStream_t stream, int64_t n, int64_t classes, const float* y,
                              const float* labels, float* dx, bool accumulate, int* label_error,
                              int64_t divisor) {
  if (n <= 0 || classes <= 0) return;
  softmax_loss_grad_kernel<<<grid_for(n * classes), k_threads, 0, stream>>>(
      n, classes, y, labels, dx, accumulate, label_error, divisor > 0 ? divisor : n);
  check_launch("softmax_loss_grad_kernel");
}

void launch_sgd(cudaStream_t stream, int64_t count, float learning_rate, float momentum,
                float weight_decay, const float* g, float* w, float* v) {
  if (count <= 0) return;
  sgd_kernel<<<grid_for(count), k_threads, 0, stream>>>(count, learning_rate, momentum,
                                                        weight_decay, g, w, v);
  check_launch("sgd_kernel");
}

void launch_adaptive_avg_pool_forward(cudaStream_t stream, int64_t planes, int64_t h, int64_t w,
                                      int64_t oh, int64_t ow, const float* x, float* y) {
  const int64_t count = planes * oh * ow;
  if (count <= 0) return;
  adaptive_avg_pool_forward_kernel<<<grid_for(count), k_threads, 0, stream>>>(planes, h, w, oh, ow,
                                                                              x, y);
  check_launch("adaptive_avg_pool_forward_kernel");
}

void launch_adaptive_avg_pool_backward(cudaStream_t stream, int64_t planes, int64_t h, int64_t w,
                                       int64_t oh, int64_t ow, const float* dy, float* dx,
                                       bool accumulate) {
  const int64_t count = planes * h * w;
  if (count <= 0) return;
  adaptive_avg_pool_backward_kernel<<<grid_for(count), k_threads, 0, stream>>>(planes, h, w, oh, ow,
                                                                               dy, dx, accumulate);
  check_launch("adaptive_avg_pool_backward_kernel");
}

void launch_fp16_encode(cudaStream_t stream, int64_t count, const float* src, std::uint16_t* dst,
                        unsigned* max_error_bits) {
  if (count <= 0) return;
  fp16_encode_kernel<<<grid_for(count), k_threads, 0, stream>>>(count, src, dst, max_error_bits);
  check_launch("fp16_encode_kernel");
}

void launch_fp16_decode(cudaStream_t stream, int64_t count, const std::uint16_t* src, float* dst) {
  if (count <= 0) return;
  fp16_decode_kernel<<<grid_for(count), k_threads, 0, stream>>>(count, src, dst);
  check_launch("fp16_decode_kernel");
}

}  // namespace memweave::kernels::cuda::detail
