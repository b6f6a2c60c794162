// The re-exec for jemalloc's static TLS. Runs before anything else in the process, so it
// only reads the environment and calls execv.
#include "memweave/alloc/static_tls.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "memweave/alloc/pinned_host_pool.hpp"

namespace memweave {

bool static_tls_tunable_set() noexcept {
  const char* t = std::getenv("GLIBC_TUNABLES");
  return t != nullptr && std::strstr(t, "glibc.rtld.optional_static_tls=") != nullptr;
}

void reexec_with_static_tls(char** argv) noexcept {
  if (static_tls_tunable_set() || std::getenv("MEMWEAVE_NO_REEXEC") != nullptr) return;
  const char* old = std::getenv("GLIBC_TUNABLES");
  std::string value = pinned_host_pool::static_tls_tunable;
  if (old != nullptr && *old != '\0') value = std::string(old) + ":" + value;
  if (::setenv("GLIBC_TUNABLES", value.c_str(), 1) != 0) return;
  ::execv("/proc/self/exe", argv);
}

}  // namespace memweave
