/* An outside C program of the installed memweave's C API: a heap on the null device. */
#include <stdio.h>

#include "memweave/memweave.h"

int main(void) {
  memweave_config config = MEMWEAVE_CONFIG_INIT;
  config.device = "null";
  config.pool_bytes = (size_t)64 << 20;
  if (memweaveInit(&config) != MEMWEAVE_SUCCESS) {
    fprintf(stderr, "memweaveInit: %s\n", memweaveGetLastErrorMessage());
    return 1;
  }
  void* p = NULL;
  const int ok = memweaveMalloc(&p, 1 << 20) == MEMWEAVE_SUCCESS && memweaveOwns(p) &&
                 memweaveFree(p) == MEMWEAVE_SUCCESS;
  printf("memweave %s C API: %s\n", memweaveGetVersion(), ok ? "ok" : "failed");
  return memweaveFinalize() == MEMWEAVE_SUCCESS && ok ? 0 : 1;
}
