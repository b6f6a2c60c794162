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
 * first allocation. Errors cannot be returned through these signatures: a failed
 * allocation returns NULL (PyTorch raises its out-of-memory error) and logs one line naming
 * the request, the free bytes and the largest free run; a bad free logs one line.
 *
 * Streams: memory freed here is reused at once by the next allocation, whatever stream it
 * is for. That is safe when all work runs in order on one stream (PyTorch's default
 * stream use); a program that hands tensors between streams must synchronize (or
 * record_stream and wait) before freeing, as with any allocator that does not track
 * streams. */
#ifndef MEMWEAVE_MEMWEAVE_TORCH_H_
#define MEMWEAVE_MEMWEAVE_TORCH_H_

#include <sys/types.h> /* ssize_t */

#include "memweave/memweave.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;

/* `size` bytes from the pool for CUDA device `device` (on the cuda backend it must be the
 * ordinal memweave manages, MEMWEAVE_CUDA_DEVICE; other backends ignore it), or NULL when
 * size <= 0, the pool is exhausted, or memweave cannot initialize. */
MEMWEAVE_API void* memweave_torch_malloc(ssize_t size, int device, struct CUstream_st* stream);

/* Returns `ptr` (from memweave_torch_malloc) to the pool. NULL is ignored; a pointer the
 * pool does not hold is logged and ignored. */
MEMWEAVE_API void memweave_torch_free(void* ptr, ssize_t size, int device,
                                      struct CUstream_st* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MEMWEAVE_MEMWEAVE_TORCH_H_ */
