// The pinned host pool: one pinned region, a private jemalloc arena whose extent hooks carve
// it, and a table of live allocations.
//
// Invariants: the hooks hand out [begin_, cursor_) only, in increasing addresses, each
// piece aligned as asked; they never take memory back (dalloc opts out), so jemalloc keeps
// freed extents as "retained" and reuses, splits and merges them itself. Every pointer
// returned by allocate() is in live_ with its usable size until deallocate() removes it;
// in_use_ is the sum of those sizes.
//
// Thread safety: jemalloc's arena is thread-safe. The hooks' cursor_ is guarded by
// hooks_mutex_ (taken only inside jemalloc, when it needs fresh memory); live_ by
// live_mutex_. The two are never held together. Counters are atomics.
//
// jemalloc is opened once per process with dlopen(RTLD_NOW | RTLD_LOCAL) and never closed
// (its thread-exit destructors refer to its code); nothing here calls its malloc/free.
#include "memweave/alloc/pinned_host_pool.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "memweave/core/config.hpp"
#include "memweave/core/log.hpp"
#include "memweave/core/units.hpp"
#include "memweave/device/device.hpp"

// Only the types and flag macros of jemalloc's header are used; JEMALLOC_NO_RENAME keeps it
// from redeclaring malloc and friends under their plain names.
#define JEMALLOC_NO_RENAME
#include <jemalloc/jemalloc.h>

#ifndef MEMWEAVE_JEMALLOC_SONAME
#define MEMWEAVE_JEMALLOC_SONAME "libjemalloc.so.2"
#endif

namespace memweave {
namespace {

// The four jemalloc entry points the pool uses, resolved from the dlopen'ed library.
struct jemalloc_api {
  void* (*mallocx)(std::size_t, int) = nullptr;
  void (*dallocx)(void*, int) = nullptr;
  std::size_t (*sallocx)(const void*, int) = nullptr;
  int (*mallctl)(const char*, void*, std::size_t*, void*, std::size_t) = nullptr;
};

struct jemalloc_loader {
  std::once_flag once;
  jemalloc_api api;
  bool ok = false;
  std::string why;  // reason and fix when !ok
};

// Never destroyed: a pool that is a static object elsewhere may outlive this file's statics.
jemalloc_loader& loader() {
  static jemalloc_loader* l = new jemalloc_loader;
  return *l;
}

void load_jemalloc(jemalloc_loader& l) {
  void* handle = ::dlopen(MEMWEAVE_JEMALLOC_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = ::dlerror();
    const std::string text = err != nullptr ? err : "unknown dlopen error";
    l.why = "cannot load jemalloc (" + std::string(MEMWEAVE_JEMALLOC_SONAME) + "): " + text;
    if (text.find("static TLS") != std::string::npos) {
      l.why +=
          "; jemalloc needs more static TLS than glibc keeps for libraries loaded after "
          "start-up: start the process with GLIBC_TUNABLES=" +
          std::string(pinned_host_pool::static_tls_tunable);
    } else {
      l.why +=
          "; install jemalloc (Debian: libjemalloc2) or configure memweave with "
          "-DMEMWEAVE_JEMALLOC_SONAME=<its soname>";
    }
    return;
  }
  l.api.mallocx = reinterpret_cast<decltype(l.api.mallocx)>(::dlsym(handle, "mallocx"));
  l.api.dallocx = reinterpret_cast<decltype(l.api.dallocx)>(::dlsym(handle, "dallocx"));
  l.api.sallocx = reinterpret_cast<decltype(l.api.sallocx)>(::dlsym(handle, "sallocx"));
  l.api.mallctl = reinterpret_cast<decltype(l.api.mallctl)>(::dlsym(handle, "mallctl"));
  if (!l.api.mallocx || !l.api.dallocx || !l.api.sallocx || !l.api.mallctl) {
    l.why = std::string(MEMWEAVE_JEMALLOC_SONAME) +
            " lacks mallocx/dallocx/sallocx/mallctl (built with a symbol prefix?); point "
            "-DMEMWEAVE_JEMALLOC_SONAME at an unprefixed jemalloc 5";
    return;  // the handle stays open: closing jemalloc is never safe once loaded
  }
  l.ok = true;
}

const jemalloc_api* jemalloc(std::string* why) noexcept {
  jemalloc_loader& l = loader();
  try {
    std::call_once(l.once, [&] { load_jemalloc(l); });
  } catch (...) {
    if (why != nullptr) *why = "cannot load jemalloc: out of memory";
    return nullptr;
  }
  if (!l.ok) {
    if (why != nullptr) {
      try {
        *why = l.why;
      } catch (...) {  // no memory for the text: the nullptr still says it failed
      }
    }
    return nullptr;
  }
  return &l.api;
}

std::uintptr_t align_up(std::uintptr_t v, std::size_t alignment) {
  return (v + (alignment - 1)) & ~static_cast<std::uintptr_t>(alignment - 1);
}

bool is_power_of_two(std::size_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

constexpr std::size_t k_min_alignment = alignof(std::max_align_t);

}  // namespace

struct pinned_host_pool::impl {
  // jemalloc passes the registered hooks pointer back to every hook; keeping it first in a
  // standard-layout struct lets a hook find its pool.
  struct hooks_block {
    extent_hooks_t hooks;
    impl* owner;
  };

  device& dev_;
  const jemalloc_api& je_;
  std::size_t capacity_ = 0;
  char* region_ = nullptr;
  std::uintptr_t begin_ = 0;
  std::uintptr_t end_ = 0;
  unsigned arena_ = 0;
  bool arena_made_ = false;
  int flags_ = 0;  // MALLOCX_ARENA(arena_) | MALLOCX_TCACHE_NONE
  hooks_block hooks_{};

  std::mutex hooks_mutex_;  // guards cursor_
  std::uintptr_t cursor_ = 0;

  mutable std::mutex live_mutex_;  // guards live_
  std::unordered_map<const void*, std::size_t> live_;

  std::atomic<std::size_t> in_use_{0};
  std::atomic<std::size_t> peak_{0};
  std::atomic<std::uint64_t> allocations_{0};
  std::atomic<std::uint64_t> frees_{0};
  std::atomic<std::uint64_t> failures_{0};
  std::atomic<std::uint64_t> invalid_frees_{0};

  impl(device& d, const jemalloc_api& api) : dev_(d), je_(api) {}

  static impl& of(extent_hooks_t* h) { return *reinterpret_cast<hooks_block*>(h)->owner; }

  bool inside(std::uintptr_t a, std::size_t size) const {
    return a >= begin_ && a <= end_ && size <= end_ - a;
  }

  // Fresh memory for jemalloc: the next `size` bytes of the region at `alignment`, or at
  // exactly `new_addr` when jemalloc asks to extend in place (possible only at the cursor).
  void* carve(void* new_addr, std::size_t size, std::size_t alignment, bool* zero,
              bool* commit) noexcept {
    if (alignment == 0 || !is_power_of_two(alignment)) alignment = alignof(std::max_align_t);
    std::uintptr_t at = 0;
    {
      std::lock_guard<std::mutex> lock(hooks_mutex_);
      at = new_addr != nullptr ? reinterpret_cast<std::uintptr_t>(new_addr)
                               : align_up(cursor_, alignment);
      if (new_addr != nullptr && (at != cursor_ || at % alignment != 0)) return nullptr;
      if (at < cursor_ || !inside(at, size)) return nullptr;
      cursor_ = at + size;
    }
    // The region's contents are unknown (cudaHostAlloc does not clear), so clear when asked;
    // jemalloc asks for its own metadata and for MALLOCX_ZERO allocations.
    if (*zero) std::memset(reinterpret_cast<void*>(at), 0, size);
    *commit = true;
    return reinterpret_cast<void*>(at);
  }

  // --- extent hooks (C callbacks; must not throw) ---
  static void* hook_alloc(extent_hooks_t* h, void* new_addr, std::size_t size,
                          std::size_t alignment, bool* zero, bool* commit, unsigned) {
    return of(h).carve(new_addr, size, alignment, zero, commit);
  }
  // true = "not deallocated": jemalloc keeps the extent (retained) and reuses it.
  static bool hook_dalloc(extent_hooks_t*, void*, std::size_t, bool, unsigned) { return true; }
  // The region is given back as a whole after the arena is destroyed.
  static void hook_destroy(extent_hooks_t*, void*, std::size_t, bool, unsigned) {}
  // Pinned memory is always committed.
  static bool hook_commit(extent_hooks_t*, void*, std::size_t, std::size_t, std::size_t, unsigned) {
    return false;
  }
  // The region is one contiguous mapping: any piece may be split, and any two adjacent
  // pieces inside it merged.
  static bool hook_split(extent_hooks_t*, void*, std::size_t, std::size_t, std::size_t, bool,
                         unsigned) {
    return false;
  }
  static bool hook_merge(extent_hooks_t* h, void* a, std::size_t size_a, void* b,
                         std::size_t size_b, bool, unsigned) {
    const impl& self = of(h);
    const auto pa = reinterpret_cast<std::uintptr_t>(a);
    const auto pb = reinterpret_cast<std::uintptr_t>(b);
    return !(self.inside(pa, size_a) && self.inside(pb, size_b) && pa + size_a == pb);
  }

  // Makes the arena. jemalloc 5.3's experimental.arenas_create_ext keeps jemalloc's own
  // metadata out of the region (metadata_use_hooks = false), leaving the region for data;
  // its config struct is internal, so a size mismatch (another version) fails cleanly with
  // EINVAL and the plain arenas.create is used instead (metadata then lives in the region).
  bool create_arena() noexcept {
    struct arena_config {  // jemalloc 5.3: arena_config_t
      extent_hooks_t* extent_hooks;
      bool metadata_use_hooks;
    };
    arena_config config{&hooks_.hooks, false};
    std::size_t ind_size = sizeof(arena_);
    if (je_.mallctl("experimental.arenas_create_ext", &arena_, &ind_size, &config,
                    sizeof(config)) != 0) {
      extent_hooks_t* hooks_ptr = &hooks_.hooks;
      ind_size = sizeof(arena_);
      if (je_.mallctl("arenas.create", &arena_, &ind_size, &hooks_ptr, sizeof(hooks_ptr)) != 0) {
        return false;
      }
    }
    arena_made_ = true;
    flags_ = static_cast<int>(MALLOCX_ARENA(arena_)) | MALLOCX_TCACHE_NONE;
    // Decay 0: a freed extent goes straight to jemalloc's "retained" set (our dalloc and
    // purge hooks opt out, so nothing leaves the region), where it is coalesced with free
    // neighbours at once; with the default delay, small freed extents would stay apart.
    const std::string prefix = "arena." + std::to_string(arena_) + ".";
    ssize_t zero_ms = 0;
    (void)je_.mallctl((prefix + "dirty_decay_ms").c_str(), nullptr, nullptr, &zero_ms,
                      sizeof(zero_ms));
    (void)je_.mallctl((prefix + "muzzy_decay_ms").c_str(), nullptr, nullptr, &zero_ms,
                      sizeof(zero_ms));
    return true;
  }

  // jemalloc never merges extents that came from different hook calls, and left alone it
  // grows by small steps (2 MiB, 2.5 MiB, ...), so the largest block it could ever form would
  // be a fraction of the region. Handing it the region in a few large pieces first (the
  // largest allocations that fit, then freed) lets later allocations use almost all of it
  // as one block.
  void prime() noexcept {
    constexpr std::size_t k_min_piece = std::size_t{1} << 20;
    void* pieces[64];
    int n = 0;
    std::size_t want = capacity_;
    while (n < 64 && want >= k_min_piece) {
      void* p = je_.mallocx(want, flags_);
      if (p != nullptr) {
        pieces[n++] = p;
        std::lock_guard<std::mutex> lock(hooks_mutex_);
        want = end_ - cursor_;
      } else {
        want -= want / 8;  // size classes are 4 per doubling: a few steps find the next fit
      }
    }
    for (int i = 0; i < n; ++i) je_.dallocx(pieces[i], flags_);
  }

  void note_allocation(std::size_t size) noexcept {
    allocations_.fetch_add(1, std::memory_order_relaxed);
    const std::size_t now = in_use_.fetch_add(size, std::memory_order_relaxed) + size;
    std::size_t p = peak_.load(std::memory_order_relaxed);
    while (now > p && !peak_.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
    }
  }
};

pinned_host_pool::pinned_host_pool(device& dev, std::size_t bytes) {
  if (bytes == 0) bytes = bytes_from_environment();
  if (bytes < min_bytes) {
    throw invalid_argument("pinned_host_pool: " + format_bytes(bytes) +
                           " is below the minimum of " + format_bytes(min_bytes) +
                           " (room for jemalloc's alignment and bookkeeping); ask for more "
                           "(MEMWEAVE_HOST_POOL_BYTES)");
  }
  std::string why;
  const jemalloc_api* je = jemalloc(&why);
  if (je == nullptr) throw device_error("pinned_host_pool: " + why);

  impl_ = std::make_unique<impl>(dev, *je);
  impl& s = *impl_;
  s.region_ = static_cast<char*>(dev.allocate_pinned(bytes));  // throws out_of_memory
  s.capacity_ = bytes;
  s.begin_ = reinterpret_cast<std::uintptr_t>(s.region_);
  s.end_ = s.begin_ + bytes;
  s.cursor_ = s.begin_;

  extent_hooks_t& h = s.hooks_.hooks;
  h.alloc = &impl::hook_alloc;
  h.dalloc = &impl::hook_dalloc;
  h.destroy = &impl::hook_destroy;
  h.commit = &impl::hook_commit;
  h.decommit = nullptr;  // nullptr = opt out: nothing is ever decommitted or purged
  h.purge_lazy = nullptr;
  h.purge_forced = nullptr;
  h.split = &impl::hook_split;
  h.merge = &impl::hook_merge;
  s.hooks_.owner = &s;

  if (!s.create_arena()) {
    dev.deallocate_pinned(s.region_, s.capacity_);
    throw device_error("pinned_host_pool: jemalloc could not create an arena over " +
                       format_bytes(bytes) +
                       " of pinned memory (mallctl arenas.create failed); check that " +
                       MEMWEAVE_JEMALLOC_SONAME + " is jemalloc 5");
  }
  s.prime();
}

pinned_host_pool::~pinned_host_pool() {
  impl& s = *impl_;
  std::size_t leaked = 0;
  {
    std::lock_guard<std::mutex> lock(s.live_mutex_);
    leaked = s.live_.size();
  }
  if (leaked != 0) {
    log(log_level::warn, "pinned_host_pool: destroyed with " + std::to_string(leaked) +
                             " live allocations (" + format_bytes(s.in_use_.load()) +
                             "); they are released with the pool");
  }
  if (s.arena_made_) {
    const std::string name = "arena." + std::to_string(s.arena_) + ".destroy";
    const int rc = s.je_.mallctl(name.c_str(), nullptr, nullptr, nullptr, 0);
    if (rc != 0) {
      // jemalloc may still refer to the region: leaking it is the only safe choice.
      log(log_level::error, "pinned_host_pool: jemalloc refused " + name + " (" +
                                std::to_string(rc) + "); the pinned region (" +
                                format_bytes(s.capacity_) + ") is leaked");
      return;
    }
  }
  s.dev_.deallocate_pinned(s.region_, s.capacity_);
}

void* pinned_host_pool::allocate(std::size_t bytes, std::size_t alignment) noexcept {
  impl& s = *impl_;
  if (bytes == 0 || (alignment != 0 && !is_power_of_two(alignment)) || bytes > s.capacity_) {
    s.failures_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  // Always pass an alignment: jemalloc aligns a small request only to its size class (8 for
  // 1..8 bytes), and callers of pinned memory expect at least max_align_t.
  const std::size_t align = alignment > k_min_alignment ? alignment : k_min_alignment;
  const int flags = s.flags_ | MALLOCX_ALIGN(align);
  void* p = s.je_.mallocx(bytes, flags);
  if (p == nullptr) {
    s.failures_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  const std::size_t size = s.je_.sallocx(p, 0);
  try {
    std::lock_guard<std::mutex> lock(s.live_mutex_);
    s.live_.emplace(p, size);
  } catch (...) {  // the table could not grow: undo, report as exhaustion
    s.je_.dallocx(p, s.flags_);
    s.failures_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  s.note_allocation(size);
  return p;
}

status pinned_host_pool::deallocate(void* p) noexcept {
  if (p == nullptr) return status::success;
  impl& s = *impl_;
  std::size_t size = 0;
  {
    std::lock_guard<std::mutex> lock(s.live_mutex_);
    auto it = s.live_.find(p);
    if (it != s.live_.end()) {
      size = it->second;
      s.live_.erase(it);
    }
  }
  if (size == 0) {
    s.invalid_frees_.fetch_add(1, std::memory_order_relaxed);
    if (log_enabled(log_level::warn)) {
      char text[64];
      std::snprintf(text, sizeof(text), "%p", p);
      log(log_level::warn, std::string("pinned_host_pool: free of ") + text +
                               (owns(p) ? ", inside the pool but not a live allocation "
                                          "(freed twice or interior)"
                                        : ", which the pool did not hand out") +
                               "; nothing changed");
    }
    return status::invalid_device_pointer;
  }
  s.je_.dallocx(p, s.flags_);
  s.in_use_.fetch_sub(size, std::memory_order_relaxed);
  s.frees_.fetch_add(1, std::memory_order_relaxed);
  return status::success;
}

bool pinned_host_pool::owns(const void* p) const noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  return a >= impl_->begin_ && a < impl_->end_;
}

std::size_t pinned_host_pool::allocation_size(const void* p) const noexcept {
  std::lock_guard<std::mutex> lock(impl_->live_mutex_);
  auto it = impl_->live_.find(p);
  return it == impl_->live_.end() ? 0 : it->second;
}

std::size_t pinned_host_pool::largest_allocation() const noexcept {
  impl& s = *impl_;
  const int flags = s.flags_ | MALLOCX_ALIGN(k_min_alignment);
  for (std::size_t want = s.capacity_; want > 0; want -= std::max<std::size_t>(want / 16, 1)) {
    if (void* p = s.je_.mallocx(want, flags)) {
      const std::size_t size = s.je_.sallocx(p, 0);
      s.je_.dallocx(p, s.flags_);
      return size;
    }
  }
  return 0;
}

std::size_t pinned_host_pool::capacity() const noexcept {
  return impl_->capacity_;
}

std::size_t pinned_host_pool::bytes_in_use() const noexcept {
  return impl_->in_use_.load(std::memory_order_relaxed);
}

std::size_t pinned_host_pool::peak_bytes_in_use() const noexcept {
  return impl_->peak_.load(std::memory_order_relaxed);
}

void pinned_host_pool::reset_peak() noexcept {
  impl_->peak_.store(impl_->in_use_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

pinned_host_stats pinned_host_pool::stats() const noexcept {
  const impl& s = *impl_;
  pinned_host_stats out;
  out.capacity = s.capacity_;
  out.bytes_in_use = s.in_use_.load(std::memory_order_relaxed);
  out.peak_bytes_in_use = s.peak_.load(std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(s.live_mutex_);
    out.live_allocations = s.live_.size();
  }
  out.allocations = s.allocations_.load(std::memory_order_relaxed);
  out.frees = s.frees_.load(std::memory_order_relaxed);
  out.failures = s.failures_.load(std::memory_order_relaxed);
  out.invalid_frees = s.invalid_frees_.load(std::memory_order_relaxed);
  return out;
}

device& pinned_host_pool::get_device() const noexcept {
  return impl_->dev_;
}

std::size_t pinned_host_pool::bytes_from_environment() {
  return option_bytes("MEMWEAVE_HOST_POOL_BYTES").value_or(std::size_t{4} << 30);
}

bool pinned_host_pool::runtime_available(std::string* why) noexcept {
  return jemalloc(why) != nullptr;
}

}  // namespace memweave
