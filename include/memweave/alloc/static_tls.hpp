// Making a program able to load jemalloc (the pinned host pool's allocator) at run time.
//
// Debian's libjemalloc uses initial-exec TLS (about 2.6 KB), more than glibc keeps spare for
// libraries loaded after start-up, so dlopen("libjemalloc.so.2") fails with "cannot allocate
// memory in static TLS block" unless the process started with a larger
// glibc.rtld.optional_static_tls (pinned_host_pool::static_tls_tunable). memweave loads
// jemalloc with dlopen(RTLD_LOCAL) so that it never replaces the host program's malloc; a
// program of ours calls this first thing in main (or from a constructor).
#pragma once

namespace memweave {

/// Whether GLIBC_TUNABLES already sets glibc.rtld.optional_static_tls.
bool static_tls_tunable_set() noexcept;

/// Re-executes /proc/self/exe with `argv` and the tunable added to GLIBC_TUNABLES, unless it
/// is already set or MEMWEAVE_NO_REEXEC is set. Returns only when nothing was done or exec
/// failed (then the pinned host pool reports the problem when it is created).
void reexec_with_static_tls(char** argv) noexcept;

}  // namespace memweave
