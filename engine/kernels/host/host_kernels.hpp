// The host (CPU) kernels of memweave's layer engine, in one include: forward and backward
// of every layer type as pure functions over float tensors in NCHW layout, run in a
// kernel_context. See each header for layouts and semantics. Common rules:
//   - deterministic: bit-identical results for identical inputs, for any thread count and
//     any addresses (convolution: for a given algorithm and chunk);
//   - a backward producing an input gradient takes `accumulate`: true adds the finished
//     gradient (dx[i] = dx[i] + g[i], g being what false writes), false overwrites;
//     parameter gradients always overwrite;
//   - bad shapes, parameters or null tensors throw memweave::invalid_argument before any
//     output is written.
#pragma once

#include "engine/kernels/host/act.hpp"
#include "engine/kernels/host/bn.hpp"
#include "engine/kernels/host/concat_add.hpp"
#include "engine/kernels/host/conv.hpp"
#include "engine/kernels/host/dropout.hpp"
#include "engine/kernels/host/fc.hpp"
#include "engine/kernels/host/kernel_context.hpp"
#include "engine/kernels/host/lrn.hpp"
#include "engine/kernels/host/pool.hpp"
#include "engine/kernels/host/softmax_loss.hpp"
