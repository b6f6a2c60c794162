/* A plain CUDA program (C, linked against the SHARED cudart, no memweave at link time) for
 * memweave_preload_test: it allocates, writes, reads and frees device memory through the
 * CUDA runtime API and prints what it got as key=value lines. Run with
 * LD_PRELOAD=libmemweave_preload.so and MEMWEAVE_DEVICE=host, its "device" memory is the
 * pool's (host-addressable); it reads the pool's numbers through memweaveGetStats, found
 * with dlsym(RTLD_DEFAULT) since it is not linked with memweave. It also calls the
 * runtime's own functions (looked up in the loaded libcudart itself) to show what the
 * runtime answers. It exits 0 whatever the answers were: the test judges them. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memweave/memweave.h"
#include "memweave/memweave_torch.h" /* compiled as C: both public headers are C */

typedef memweave_status (*get_stats_fn)(memweave_stats*);
typedef int (*owns_fn)(const void*);
typedef cudaError_t (*free_fn)(void*);
typedef cudaError_t (*malloc_fn)(void**, size_t);

/* The loaded libcudart, found by name among the loaded objects (RTLD_NEXT from the
 * executable would find the preloaded interposer first). */
static int find_cudart(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  if (info->dlpi_name != NULL && strstr(info->dlpi_name, "libcudart.so") != NULL) {
    *(void**)data = dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD);
    return 1;
  }
  return 0;
}

static void* runtime_symbol(const char* name) {
  static void* cudart = NULL;
  if (cudart == NULL) dl_iterate_phdr(find_cudart, &cudart);
  return cudart != NULL ? dlsym(cudart, name) : NULL;
}

static void print_stats(const char* when) {
  get_stats_fn get_stats = (get_stats_fn)dlsym(RTLD_DEFAULT, "memweaveGetStats");
  if (get_stats == NULL) {
    printf("%s_stats_found=0\n", when);
    return;
  }
  memweave_stats s;
  memset(&s, 0, sizeof s);
  const memweave_status rc = get_stats(&s);
  printf("%s_stats_found=1\n%s_stats_rc=%d\n", when, when, rc);
  printf("%s_live=%zu\n%s_allocations=%llu\n%s_frees=%llu\n%s_invalid_frees=%llu\n", when,
         s.live_allocations, when, (unsigned long long)s.allocations, when,
         (unsigned long long)s.frees, when, (unsigned long long)s.invalid_frees);
  printf("%s_bytes_in_use=%zu\n%s_bytes_reserved=%zu\n", when, s.bytes_in_use, when,
         s.bytes_reserved);
}

int main(void) {
  const size_t bytes = 3u << 20; /* 3 MiB */
  void* p = NULL;
  const cudaError_t malloc_rc = cudaMalloc(&p, bytes);
  printf("malloc_rc=%d\nmalloc_ptr_null=%d\n", (int)malloc_rc, p == NULL);

  owns_fn owns = (owns_fn)dlsym(RTLD_DEFAULT, "memweaveOwns");
  printf("owns=%d\n", owns != NULL && p != NULL ? owns(p) : -1);

  size_t free_bytes = 0, total_bytes = 0;
  const cudaError_t info_rc = cudaMemGetInfo(&free_bytes, &total_bytes);
  printf("meminfo_rc=%d\nmeminfo_free=%zu\nmeminfo_total=%zu\n", (int)info_rc, free_bytes,
         total_bytes);

  int memory_ok = 0;
  if (malloc_rc == cudaSuccess && p != NULL) {
    unsigned char* b = (unsigned char*)p;
    for (size_t i = 0; i < bytes; ++i) b[i] = (unsigned char)(i * 7u + 1u);
    memory_ok = 1;
    for (size_t i = 0; i < bytes; ++i) {
      if (b[i] != (unsigned char)(i * 7u + 1u)) {
        memory_ok = 0;
        break;
      }
    }
  }
  printf("memory_ok=%d\n", memory_ok);
  print_stats("live");

  /* A pointer the pool never handed out must reach the runtime, not the pool. */
  void* foreign = malloc(256);
  const cudaError_t foreign_rc = cudaFree(foreign);
  free_fn real_free = (free_fn)runtime_symbol("cudaFree");
  const int real_foreign_rc = real_free != NULL ? (int)real_free(foreign) : -1;
  printf("foreign_free_rc=%d\nreal_foreign_free_rc=%d\n", (int)foreign_rc, real_foreign_rc);
  free(foreign);

  /* What the runtime itself says to an allocation (without a GPU: an error). */
  malloc_fn real_malloc = (malloc_fn)runtime_symbol("cudaMalloc");
  void* q = NULL;
  const int real_malloc_rc = real_malloc != NULL ? (int)real_malloc(&q, 1024) : -1;
  printf("real_malloc_rc=%d\n", real_malloc_rc);
  if (real_malloc_rc == 0 && real_free != NULL) real_free(q);
  print_stats("after_foreign");

  const cudaError_t free_rc = cudaFree(p);
  printf("free_rc=%d\n", (int)free_rc);
  const cudaError_t double_free_rc = cudaFree(p);
  printf("double_free_rc=%d\n", (int)double_free_rc);
  print_stats("end");
  return 0;
}
