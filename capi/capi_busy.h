/* The one private symbol libmemweave.so exports for libmemweave_preload.so. */
#ifndef MEMWEAVE_CAPI_CAPI_BUSY_H_
#define MEMWEAVE_CAPI_CAPI_BUSY_H_

#ifdef __cplusplus
extern "C" {
#endif

/* Non-zero while the calling thread is inside a memweave call (memweave::capi::busy_scope):
 * CUDA runtime calls made then come from memweave itself and must reach the real runtime.
 * Not part of the public API. */
__attribute__((visibility("default"))) int memweave_internal_busy(void);

#ifdef __cplusplus
}
#endif

#endif /* MEMWEAVE_CAPI_CAPI_BUSY_H_ */
