// The kernels of BN run micro-batch by micro-batch on the GPU: its sums over the
// micro-batches and the element-wise passes from them (micro_batch.hpp; the launchers'
// contracts in custom_kernels.hpp). Apart from custom_kernels.cu: one concern, and nvcc
// never sees memweave's C++20 headers (the wrappers taking shapes are micro_batch.cpp).
//
// Invariants: one block of k_threads per channel for every sum (deterministic: a thread's
// elements in index order, then a shared-memory tree, then one add to the running sum);
// element-wise kernels round each operation on its own (__fmul_rn, ...), in the host's order.
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/kernels/cuda/custom_kernels.hpp"
#include "engine/kernels/cuda/kernel_launch.cuh"

namespace memweave::kernels::cuda::detail {

namespace {

using std::int64_t;

// Adds the block's two partial sums (one per thread, in s_a and s_b) by a tree and then to
// *a and *b (or sets them, `first`), from thread 0.
__device__ void finish_block_sums(double* s_a, double* s_b, double* a, double* b, bool first) {
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      s_a[threadIdx.x] += s_a[threadIdx.x + half];
      s_b[threadIdx.x] += s_b[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    *a = first ? s_a[0] : *a + s_a[0];
    *b = first ? s_b[0] : *b + s_b[0];
  }
}

// One block per channel.
__global__ void bn_moments_kernel(int64_t n, int64_t c, int64_t hw, const float* __restrict__ x,
                                  double* sum, double* squares, bool first) {
  __shared__ double s_x[k_threads];
  __shared__ double s_xx[k_threads];
  const int64_t ch = blockIdx.x;
  double a = 0.0, b = 0.0;
  for (int64_t i = threadIdx.x; i < n * hw; i += blockDim.x) {
    const int64_t img = i / hw, pos = i - img * hw;
    const double v = static_cast<double>(x[(img * c + ch) * hw + pos]);
    a += v;
    b += v * v;
  }
  s_x[threadIdx.x] = a;
  s_xx[threadIdx.x] = b;
  finish_block_sums(s_x, s_xx, sum + ch, squares + ch, first);
}

__global__ void bn_finish_kernel(int64_t channels, double m, double epsilon, double momentum,
                                 const double* sum, const double* squares, float* mean,
                                 float* invstd, float* running_mean, float* running_var) {
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch >= channels) return;
  const double mu = sum[ch] / m;
  double var = squares[ch] / m - mu * mu;
  if (var < 0.0) var = 0.0;
  mean[ch] = static_cast<float>(mu);
  const float is = static_cast<float>(1.0 / sqrt(var + epsilon));
  invstd[ch] = is;
  if (running_mean == nullptr) return;
  // The host's bn_update_running: the variance back from the saved (float) invstd.
  const double isd = is;
  double v = 1.0 / (isd * isd) - epsilon;
  if (v < 0.0) v = 0.0;
  if (m > 1.0) v *= m / (m - 1.0);
  running_mean[ch] = static_cast<float>((1.0 - momentum) * running_mean[ch] +
                                        momentum * static_cast<double>(mean[ch]));
  running_var[ch] = static_cast<float>((1.0 - momentum) * running_var[ch] + momentum * v);
}

__global__ void bn_normalize_kernel(int64_t count, int64_t c, int64_t hw,
                                    const float* __restrict__ x, const float* __restrict__ gamma,
                                    const float* __restrict__ beta, const float* __restrict__ mean,
                                    const float* __restrict__ invstd, float* __restrict__ y) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const int64_t ch = (i / hw) % c;
    y[i] =
        __fadd_rn(__fmul_rn(gamma[ch], __fmul_rn(__fsub_rn(x[i], mean[ch]), invstd[ch])), beta[ch]);
  }
}

// One block per channel.
__global__ void bn_backward_sums_kernel(int64_t n, int64_t c, int64_t hw,
                                        const float* __restrict__ x, const float* __restrict__ mean,
                                        const float* __restrict__ invstd,
                                        const float* __restrict__ dy, double* sdy, double* sdy_xhat,
                                        bool first) {
  __shared__ double s_dy[k_threads];
  __shared__ double s_dyx[k_threads];
  const int64_t ch = blockIdx.x;
  const float mu = mean[ch], is = invstd[ch];
  double a = 0.0, b = 0.0;
  for (int64_t i = threadIdx.x; i < n * hw; i += blockDim.x) {
    const int64_t img = i / hw, pos = i - img * hw;
    const int64_t at = (img * c + ch) * hw + pos;
    const float xhat = __fmul_rn(__fsub_rn(x[at], mu), is);
    a += static_cast<double>(dy[at]);
    b += static_cast<double>(dy[at]) * static_cast<double>(xhat);
  }
  s_dy[threadIdx.x] = a;
  s_dyx[threadIdx.x] = b;
  finish_block_sums(s_dy, s_dyx, sdy + ch, sdy_xhat + ch, first);
}

__global__ void bn_grads_from_sums_kernel(int64_t channels, const double* sdy,
                                          const double* sdy_xhat, float* dgamma, float* dbeta) {
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch >= channels) return;
  dbeta[ch] = static_cast<float>(sdy[ch]);
  dgamma[ch] = static_cast<float>(sdy_xhat[ch]);
}

__global__ void bn_backward_data_kernel(int64_t count, int64_t c, int64_t hw, double m,
                                        const float* __restrict__ x, const float* __restrict__ mean,
                                        const float* __restrict__ invstd,
                                        const float* __restrict__ gamma,
                                        const double* __restrict__ sdy,
                                        const double* __restrict__ sdy_xhat,
                                        const float* __restrict__ dy, float* dx, bool accumulate) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const int64_t ch = (i / hw) % c;
    const float is = invstd[ch];
    const double scale = static_cast<double>(gamma[ch]) * is / m;
    const float xhat = __fmul_rn(__fsub_rn(x[i], mean[ch]), is);
    const float g = static_cast<float>(scale * (m * static_cast<double>(dy[i]) - sdy[ch] -
                                                static_cast<double>(xhat) * sdy_xhat[ch]));
    dx[i] = accumulate ? __fadd_rn(dx[i], g) : g;
  }
}

unsigned channel_grid(int64_t channels) {
  return static_cast<unsigned>((channels + k_threads - 1) / k_threads);
}

}  // namespace

void launch_bn_moments(cudaStream_t stream, int64_t n, int64_t c, int64_t hw, const float* x,
                       double* sum, double* squares, bool first) {
  if (n <= 0 || c <= 0) return;
  bn_moments_kernel<<<static_cast<unsigned>(c), k_threads, 0, stream>>>(n, c, hw, x, sum, squares,
                                                                        first);
  check_launch("bn_moments_kernel");
}

void launch_bn_finish(cudaStream_t stream, int64_t channels, double m, double epsilon,
                      double momentum, const double* sum, const double* squares, float* mean,
                      float* invstd, float* running_mean, float* running_var) {
  if (channels <= 0) return;
  bn_finish_kernel<<<channel_grid(channels), k_threads, 0, stream>>>(
      channels, m, epsilon, momentum, sum, squares, mean, invstd, running_mean, running_var);
  check_launch("bn_finish_kernel");
}

void launch_bn_normalize(cudaStream_t stream, int64_t n, int64_t c, int64_t hw, const float* x,
                         const float* gamma, const float* beta, const float* mean,
                         const float* invstd, float* y) {
  const int64_t count = n * c * hw;
  if (count <= 0) return;
  bn_normalize_kernel<<<grid_for(count), k_threads, 0, stream>>>(count, c, hw, x, gamma, beta, mean,
                                                                 invstd, y);
  check_launch("bn_normalize_kernel");
}

void launch_bn_backward_sums(cudaStream_t stream, int64_t n, int64_t c, int64_t hw, const float* x,
                             const float* mean, const float* invstd, const float* dy, double* sdy,
                             double* sdy_xhat, bool first) {
  if (n <= 0 || c <= 0) return;
  bn_backward_sums_kernel<<<static_cast<unsigned>(c), k_threads, 0, stream>>>(
      n, c, hw, x, mean, invstd, dy, sdy, sdy_xhat, first);
  check_launch("bn_backward_sums_kernel");
}

void launch_bn_grads_from_sums(cudaStream_t stream, int64_t channels, const double* sdy,
                               const double* sdy_xhat, float* dgamma, float* dbeta) {
  if (channels <= 0) return;
  bn_grads_from_sums_kernel<<<channel_grid(channels), k_threads, 0, stream>>>(
      channels, sdy, sdy_xhat, dgamma, dbeta);
  check_launch("bn_grads_from_sums_kernel");
}

void launch_bn_backward_data(cudaStream_t stream, int64_t n, int64_t c, int64_t hw, double m,
                             const float* x, const float* mean, const float* invstd,
                             const float* gamma, const double* sdy, const double* sdy_xhat,
                             const float* dy, float* dx, bool accumulate) {
  const int64_t count = n * c * hw;
  if (count <= 0) return;
  bn_backward_data_kernel<<<grid_for(count), k_threads, 0, stream>>>(
      count, c, hw, m, x, mean, invstd, gamma, sdy, sdy_xhat, dy, dx, accumulate);
  check_launch("bn_backward_data_kernel");
}

}  // namespace memweave::kernels::cuda::detail
