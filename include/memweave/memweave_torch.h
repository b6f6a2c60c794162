/* PyTorch's pluggable-allocator entry points, exported from libmemweave.so:
 *
 *   import torch
 *   alloc = torch.cuda.memory.CUDAPluggableAllocator(
 *       "/path/to/libmemweave.so", "memweave_torch_malloc", "memweave_torch_free")
 *   torch.cuda.memory.change_current_allocator(alloc)   # before any CUDA allocation
 *
 * The signatures are exactly the ones PyTorch loads; cudaStream_t is written as
 * `struct CUstream_st*` (what cuda_runtime_api.h defines it as) so that this header needs no
 * CUDA header. The pool is memweave's process-wide instance (memweave.h): configured by
 * memweaveInit when that was called first, else from the MEMWEAVE_* environment on the
 * first allocation; each device PyTorch uses gets its own pool.
 *
 * Streams: PyTorch passes the stream a block is allocated for, and the same stream when it
 * frees it. A freed block is reused at once by later allocations for the same stream and
 * by other streams only once an event recorded on that stream at the free has completed,
 * as PyTorch's own caching allocator and cudaMallocAsync do. (PyTorch does not forward
 * Tensor.record_stream to a pluggable allocator: a tensor used on a second stream must be
 * kept alive, or that stream synchronized with, until the work on it is done.) A stream
 * the program destroys itself (an external stream) after blocks were freed on it: call
 * memweaveRetireStream(stream) first (memweave.h), as the LD_PRELOAD interposer does for
 * every cudaStreamDestroy; a stream created later may get the same handle, and would
 * otherwise take those blocks at once while the destroyed stream's queued work still runs.
 *
 * Out of memory: the pool first waits for pending frees of other streams and retries; if
 * the request still cannot be served, memweave_torch_malloc THROWS a C++
 * std::runtime_error whose message starts "memweave: CUDA out of memory." and names the
 * request, the free bytes, the largest free run and the fragmentation (also logged).
 * PyTorch passes it on as it does its own allocator's errors: Python sees a RuntimeError
 * with that message at the allocating call, and the CUDA context stays usable (free
 * tensors and retry). NULL is never returned for size > 0: PyTorch would store it unchecked
 * and fail later with an illegal memory access. A bad free logs one line and is ignored. */
#ifndef MEMWEAVE_MEMWEAVE_TORCH_H_
#define MEMWEAVE_MEMWEAVE_TORCH_H_

#include <sys/types.h> /* ssize_t */

#include "memweave/memweave.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;

/* `size` bytes from the pool of CUDA device `device` for work on `stream`; NULL when
 * size <= 0. Throws std::runtime_error (see above) when the pool is exhausted or memweave
 * cannot serve the device. The simulated devices (MEMWEAVE_DEVICE=host|null, named) have
 * one pool and ignore `device`. */
MEMWEAVE_API void* memweave_torch_malloc(ssize_t size, int device, struct CUstream_st* stream);

/* Returns `ptr` (from memweave_torch_malloc) to its pool in `stream`'s order (as
 * memweaveFreeAsync; a NULL stream is the default stream of the block's device, which
 * `device` names: where it names another, a warning is logged and the block's is taken).
 * NULL is ignored; a pointer no pool holds is logged and ignored. */
MEMWEAVE_API void memweave_torch_free(void* ptr, ssize_t size, int device,
                                      struct CUstream_st* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MEMWEAVE_MEMWEAVE_TORCH_H_ */
