/* memweave's C API: a drop-in replacement for cudaMalloc/cudaFree backed by memweave's
 * device heap, plus pinned host memory, statistics and allocation traces.
 *
 * C ABI, no C++ types; link with -lmemweave (libmemweave.so). The library is one
 * process-wide instance: memweaveInit() configures it, memweaveFinalize() releases it, and
 * memweaveMalloc() before any memweaveInit() initializes it from the MEMWEAVE_* environment
 * variables. Every function is thread-safe except that memweaveInit/memweaveFinalize must
 * not run concurrently with other calls (as cudaDeviceReset). Nothing here throws, aborts
 * or exits: every failure is a return code (the number of the matching cudaError_t, so a
 * CUDA program can pass it on) and a message for memweaveGetLastErrorMessage().
 *
 * Also exported from libmemweave.so, for PyTorch's CUDAPluggableAllocator: see
 * memweave_torch.h. An unmodified CUDA program can use the pool through the interposer
 * libmemweave_preload.so (LD_PRELOAD), which replaces cudaMalloc, cudaFree,
 * cudaMallocAsync, cudaFreeAsync and cudaMemGetInfo, and cudaStreamDestroy (retiring the
 * stream first), cudaGetLastError and cudaPeekAtLastError (reporting its failures as the
 * runtime reports its own).
 *
 * In a process forked after memweave was initialized (its pools' streams and threads stay
 * in the parent), every call that would reach a pool returns MEMWEAVE_ERROR_NOT_SUPPORTED
 * naming the fork; memweaveOwns and memweaveIsInitialized say 0 there, memweaveFinalize
 * succeeds releasing nothing (the pools are the parent's), and the interposer passes the
 * calls to the runtime.
 *
 * Streams (cudaStream_t) are written `struct CUstream_st*`, what cuda_runtime_api.h
 * defines cudaStream_t as, so that this header needs no CUDA header. */
#ifndef MEMWEAVE_MEMWEAVE_H_
#define MEMWEAVE_MEMWEAVE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;

#if defined(__GNUC__)
#define MEMWEAVE_API __attribute__((visibility("default")))
#else
#define MEMWEAVE_API
#endif

/* Return codes, equal to the matching cudaError_t. */
typedef int memweave_status;
#define MEMWEAVE_SUCCESS 0                       /* cudaSuccess */
#define MEMWEAVE_ERROR_INVALID_VALUE 1           /* cudaErrorInvalidValue: a bad argument */
#define MEMWEAVE_ERROR_MEMORY_ALLOCATION 2       /* cudaErrorMemoryAllocation: pool exhausted */
#define MEMWEAVE_ERROR_INITIALIZATION_ERROR 3    /* cudaErrorInitializationError */
#define MEMWEAVE_ERROR_INVALID_DEVICE_POINTER 17 /* cudaErrorInvalidDevicePointer */
#define MEMWEAVE_ERROR_NO_DEVICE 100             /* cudaErrorNoDevice */
#define MEMWEAVE_ERROR_NOT_SUPPORTED 801         /* cudaErrorNotSupported */
/* cudaErrorStreamCaptureUnsupported: a stream-ordered call on a stream that is being
 * captured into a CUDA graph (memweaveMallocAsync, memweaveFreeAsync) */
#define MEMWEAVE_ERROR_STREAM_CAPTURE_UNSUPPORTED 900
#define MEMWEAVE_ERROR_UNKNOWN 999 /* cudaErrorUnknown */

/* Placement policy of the device heap (memweave_config.fit). */
#define MEMWEAVE_FIT_DEFAULT 0 /* MEMWEAVE_FIT, default best */
#define MEMWEAVE_FIT_BEST 1    /* smallest free run that fits, O(log n) */
#define MEMWEAVE_FIT_FIRST 2   /* lowest-address free run that fits (the SuperNeurons list) */

/* Configuration for memweaveInit. A zero (or NULL) field means "from the environment
 * variable named, else its default"; start from MEMWEAVE_CONFIG_INIT. */
typedef struct memweave_config {
  /* Heap arena size (MEMWEAVE_POOL_BYTES); 0 with the variable unset: use pool_fraction. */
  size_t pool_bytes;
  /* Fraction of free device memory taken for the arena (MEMWEAVE_POOL_FRACTION, 0.9). */
  double pool_fraction;
  /* Allocation unit, a power of two >= 256 (MEMWEAVE_BLOCK_BYTES, 1024). */
  size_t block_bytes;
  /* MEMWEAVE_FIT_* (MEMWEAVE_FIT, best). */
  int fit;
  /* When full, take a further arena of at least this size (MEMWEAVE_POOL_GROW, 0 = never). */
  size_t grow_bytes;
  /* "cuda", "host" or "null" (MEMWEAVE_DEVICE; "auto", the default, means cuda here). */
  const char* device;
  /* Capacity of the simulated host and null devices (MEMWEAVE_DEVICE_BYTES, 8 GiB). */
  size_t device_bytes;
  /* Write every heap allocation and free to this file (MEMWEAVE_TRACE, none): device 0's
   * (and a simulated device's); device N's to this path with ".device<N>" appended, so
   * that each file replays as one heap; the pool made after a device's pool was released
   * (cudaDeviceReset, memweaveReleaseDevicePool) with ".reset<K>" appended after that, the
   * K-th release, so that the earlier trace stays whole. */
  const char* trace_path;
  /* Size of each device's pinned host pool (MEMWEAVE_HOST_POOL_BYTES, 4 GiB). */
  size_t host_pool_bytes;
} memweave_config;

#define MEMWEAVE_CONFIG_INIT \
  { 0, 0.0, 0, 0, 0, NULL, 0, NULL, 0 }

/* A snapshot of the pool's numbers (memweaveGetStats). Device-heap bytes are whole blocks. */
typedef struct memweave_stats {
  /* The device heap. */
  size_t bytes_in_use;      /* bytes of live allocations */
  size_t peak_bytes_in_use; /* highest bytes_in_use since init or memweaveResetPeak */
  size_t bytes_reserved;    /* total arena bytes */
  size_t free_bytes;        /* bytes_reserved - bytes_in_use */
  size_t largest_free_run;  /* the largest allocation that would succeed */
  double fragmentation;     /* 1 - largest_free_run / free_bytes */
  uint64_t allocations;     /* successful allocations */
  uint64_t frees;           /* successful frees */
  uint64_t failures;        /* allocations refused */
  uint64_t invalid_frees;   /* frees rejected (foreign, double, interior) */
  size_t live_allocations;  /* allocations not yet freed */
  size_t arenas;            /* arenas taken from the device */
  /* The current device's pinned host pool (all 0 until its first use). */
  size_t host_capacity;          /* region bytes */
  size_t host_bytes_in_use;      /* bytes of live allocations */
  size_t host_peak_bytes_in_use; /* highest host_bytes_in_use */
  size_t host_live_allocations;  /* allocations not yet freed */
} memweave_stats;

/* Initializes the library and the pool of the calling thread's current device (other
 * devices get theirs on first use, with the same settings). `config` may be NULL (all
 * from the environment). The device kind `auto` means `cuda` here: when no GPU can be
 * used, MEMWEAVE_ERROR_NO_DEVICE; the simulated `host` device is used only when named.
 * Returns MEMWEAVE_SUCCESS; MEMWEAVE_ERROR_INITIALIZATION_ERROR when already initialized,
 * explicitly or lazily (memweaveMalloc, memweaveMemGetInfo, memweaveGetStats,
 * memweaveResetPeak, memweaveTraceStart and memweaveHostMalloc initialize from the
 * environment when called first): the running instance is left as it is, and
 * memweaveFinalize() first allows a new configuration; MEMWEAVE_ERROR_INVALID_VALUE for a
 * bad setting; MEMWEAVE_ERROR_NO_DEVICE when the device asked for is absent;
 * MEMWEAVE_ERROR_MEMORY_ALLOCATION when the arena cannot be taken. */
MEMWEAVE_API memweave_status memweaveInit(const memweave_config* config);

/* Releases the heap, the pinned host pool and the device. Allocations still live become
 * invalid (a warning says how many). Finalizing an uninitialized library is a successful
 * no-op, so it may be called unconditionally. */
MEMWEAVE_API memweave_status memweaveFinalize(void);

/* Whether the library is initialized (1) or not (0). */
MEMWEAVE_API int memweaveIsInitialized(void);

/* As cudaMalloc: *ptr = `bytes` of device memory from the pool of the calling thread's
 * current device (cudaGetDevice; each device has its own pool, made on first use there).
 * The block is free of all pending work: it may be used on any stream. size 0 gives
 * *ptr = NULL and success. NULL ptr: MEMWEAVE_ERROR_INVALID_VALUE. When the pool cannot
 * serve the request, memweave first waits for the pending stream-ordered frees and
 * retries; if that fails: MEMWEAVE_ERROR_MEMORY_ALLOCATION, *ptr = NULL, and a message
 * naming the request, the free bytes, the largest free run and the fragmentation. When
 * the device's pool cannot be made (its arena cannot be taken: MEMWEAVE_POOL_BYTES above
 * what the device has free): MEMWEAVE_ERROR_INITIALIZATION_ERROR, memweave cannot serve
 * that device (the interposer then forwards its calls to the CUDA runtime).
 * Initializes from the environment on first use. */
MEMWEAVE_API memweave_status memweaveMalloc(void** ptr, size_t bytes);

/* As cudaMallocAsync: as memweaveMalloc, for work on `stream` (a cudaStream_t; NULL is
 * the legacy default stream), from the pool of the stream's device (the current device's
 * for NULL, as cudaMallocAsync). It may return a block freed on the same stream whose free
 * the stream has not yet reached: the stream's order makes that safe, so use the block
 * on `stream` (or order other streams after it with an event). On a stream that is being
 * captured into a CUDA graph (cudaStreamBeginCapture): MEMWEAVE_ERROR_STREAM_CAPTURE_UNSUPPORTED
 * and *ptr = NULL, since an allocation made there belongs to the graph, which allocates it
 * each time it runs (the interposer passes such calls to the CUDA runtime). */
MEMWEAVE_API memweave_status memweaveMallocAsync(void** ptr, size_t bytes,
                                                 struct CUstream_st* stream);

/* As cudaFree: waits until the device owning the block is idle (as cudaFree does), then
 * returns the block to its pool. NULL is a successful no-op. A pointer that is not a live
 * allocation of a pool (foreign, freed twice, interior) returns
 * MEMWEAVE_ERROR_INVALID_DEVICE_POINTER and changes nothing. A failure the wait reports
 * (a kernel that failed) is returned with the CUDA runtime's code (cudaErrorIllegalAddress,
 * cudaErrorLaunchFailure, ...), with the block freed all the same. While a stream of the
 * device is being captured into a CUDA graph the wait is refused (as cudaFree is there):
 * MEMWEAVE_ERROR_STREAM_CAPTURE_UNSUPPORTED and nothing changes. */
MEMWEAVE_API memweave_status memweaveFree(void* ptr);

/* As cudaFreeAsync: frees `ptr` in `stream`'s order without waiting. The block is reused
 * at once by later allocations for the same stream, and by other streams only once the
 * stream has reached this point (an event recorded here has completed). Work on other
 * streams that still uses the block must be ordered before this point by the caller, as
 * with cudaFreeAsync. Errors as memweaveFree; on a stream being captured into a CUDA graph,
 * MEMWEAVE_ERROR_STREAM_CAPTURE_UNSUPPORTED and nothing changes (the free would happen
 * whenever the graph runs, which memweave cannot follow: free the block outside the
 * capture). */
MEMWEAVE_API memweave_status memweaveFreeAsync(void* ptr, struct CUstream_st* stream);

/* Call before destroying `stream` (cudaStreamDestroy) on which memweaveFreeAsync freed
 * blocks: from now on they are reused only once their events complete, by any stream. The
 * destroyed stream's queued work still runs, and a stream created later may get the same
 * handle, which would otherwise take those blocks at once. The interposer calls it for
 * cudaStreamDestroy. A default-stream handle (NULL, legacy, per-thread) is a no-op; so is a
 * call before initialization. */
MEMWEAVE_API memweave_status memweaveRetireStream(struct CUstream_st* stream);

/* Call before cudaDeviceReset: gives the pool of the calling thread's current device back
 * to the CUDA runtime (its arena freed, its pending frees waited for), so that the reset does
 * not free memory memweave would go on handing out. Every allocation from that pool is
 * invalid afterwards, as cudaDeviceReset makes every allocation of the device; the next one
 * on the device makes a new pool. As for cudaDeviceReset, no other thread may be using the
 * device meanwhile. The interposer calls it for cudaDeviceReset. Blocks of other devices'
 * pools freed on this device's streams are waited for too (their events die with the
 * device's context), also where the device has no pool. The device's pinned host pool
 * (memweaveHostMalloc while it was current) goes with it, as page-locked memory of the
 * device's context does; other devices' pinned memory stays. Nothing to do when memweave is
 * not initialized. */
MEMWEAVE_API memweave_status memweaveReleaseDevicePool(void);

/* Whether `ptr` lies inside the arenas of any pool (1) or not (0); 0 when not
 * initialized. */
MEMWEAVE_API int memweaveOwns(const void* ptr);

/* As cudaMemGetInfo, from the point of view of the current device's pool: *free = bytes
 * free in it, *total = its size. Either pointer may be NULL (not both). Initializes
 * lazily. */
MEMWEAVE_API memweave_status memweaveMemGetInfo(size_t* free_bytes, size_t* total_bytes);

/* Fills *stats with the numbers of the current device's pool (and its pinned host pool).
 * Initializes lazily. */
MEMWEAVE_API memweave_status memweaveGetStats(memweave_stats* stats);

/* Sets the current device's pool's peak to its current use. */
MEMWEAVE_API memweave_status memweaveResetPeak(void);

/* Starts writing every heap allocation and free to `path` (replay with `memweave replay`):
 * of every device's pool, those made so far and those made while the trace runs, device
 * 0's to `path` and device N's to `path` with ".device<N>" appended (one heap a file; a
 * pool made after a release, ".reset<K>" appended too, as memweave_config.trace_path's);
 * a running trace is stopped (flushed and closed) first, so `path` may be the file it
 * writes. MEMWEAVE_ERROR_INVALID_VALUE when a file cannot be opened (the message says why;
 * no trace then runs). */
MEMWEAVE_API memweave_status memweaveTraceStart(const char* path);

/* Flushes and closes the trace; success when none runs. */
MEMWEAVE_API memweave_status memweaveTraceStop(void);

/* As cudaHostAlloc: `bytes` of pinned host memory from the current device's pinned host
 * pool (one per device, each made on the device's first call with
 * memweave_config.host_pool_bytes: what a device's reset frees, as cudaHostAlloc's memory
 * belongs to the context current when it was made). Exhausted:
 * MEMWEAVE_ERROR_MEMORY_ALLOCATION. The pool needs jemalloc loadable at run time: when it
 * is not, MEMWEAVE_ERROR_INITIALIZATION_ERROR and the message says what to do. */
MEMWEAVE_API memweave_status memweaveHostMalloc(void** ptr, size_t bytes);

/* As cudaFreeHost, whichever device is current. NULL is a no-op; a pointer not live in a
 * host pool returns MEMWEAVE_ERROR_INVALID_DEVICE_POINTER and changes nothing. */
MEMWEAVE_API memweave_status memweaveHostFree(void* ptr);

/* A static, human-readable name of a return code ("invalid device pointer"). */
MEMWEAVE_API const char* memweaveGetErrorString(memweave_status status);

/* The message of the last failing call on this thread ("" when none has failed yet).
 * Successful calls leave it as it is; the text stays valid until the next failing call on
 * this thread. Once the thread's storage is destroyed (a call from a global destructor at
 * exit), failures keep only their code and this says "". */
MEMWEAVE_API const char* memweaveGetLastErrorMessage(void);

/* "0.1.0". */
MEMWEAVE_API const char* memweaveGetVersion(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MEMWEAVE_MEMWEAVE_H_ */
