// The cuda kernels of memweave's layer engine, in one include: forward and backward of
// every layer type over float tensors in NCHW layout in device memory, through cuDNN,
// cuBLAS and a few custom kernels, enqueued on a cuda_kernel_context's stream. They mirror
// the host kernels (engine/kernels/host/host_kernels.hpp) function by function; common
// rules:
//   - every call enqueues work and returns without waiting (the softmax loss read-back
//     excepted); pointers are device pointers valid until that work has run;
//   - a backward producing an input gradient takes `accumulate`: true adds the gradient into
//     dx (cuDNN's or cuBLAS's beta = 1, or a custom add), false overwrites; parameter
//     gradients overwrite, except where a split step's micro-batches after the first add
//     to them (CONV's and FC's `accumulate`; micro_batch.hpp for BN's and the loss's sums);
//   - bad shapes, parameters or null tensors throw memweave::invalid_argument before
//     anything is enqueued; a failing CUDA, cuDNN or cuBLAS call throws device_error;
//   - FP32 without TF32 (cuda_kernel_context.hpp). Results agree with the host kernels to
//     float rounding; dropout masks, and the element-wise kernels (dropout, ACT backward,
//     ADD, CONCAT, softmax gradient, SGD), give the host's bits for equal inputs.
#pragma once

#include "engine/kernels/cuda/act.hpp"
#include "engine/kernels/cuda/bn.hpp"
#include "engine/kernels/cuda/concat_add.hpp"
#include "engine/kernels/cuda/conv.hpp"
#include "engine/kernels/cuda/cuda_kernel_context.hpp"
#include "engine/kernels/cuda/dropout.hpp"
#include "engine/kernels/cuda/fc.hpp"
#include "engine/kernels/cuda/lrn.hpp"
#include "engine/kernels/cuda/micro_batch.hpp"
#include "engine/kernels/cuda/pool.hpp"
#include "engine/kernels/cuda/sgd.hpp"
#include "engine/kernels/cuda/softmax_loss.hpp"
