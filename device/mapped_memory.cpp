// Regions are whole anonymous mappings (one per allocate), so unmapping one can never
// disturb another, and the addresses are real and unique even when nothing is behind them
// (PROT_NONE). Accounting counts requested bytes; pages are committed by the kernel only
// when touched. One mutex guards the region table; mmap/munmap run outside it.
#include "device/mapped_memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "memweave/core/error.hpp"
#include "memweave/core/log.hpp"
#include "memweave/core/units.hpp"

namespace memweave::detail {
namespace {

std::size_t page_round(std::size_t bytes) {
  static const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

}  // namespace

mapped_memory::mapped_memory(std::string what, int prot, std::size_t capacity,
                             std::string capacity_hint)
    : what_(std::move(what)),
      prot_(prot),
      capacity_(capacity),
      capacity_hint_(std::move(capacity_hint)) {}

mapped_memory::~mapped_memory() {
  for (const auto& [p, bytes] : regions_) ::munmap(p, page_round(bytes));
  if (!regions_.empty()) {
    log(log_level::warn, what_ + ": " + std::to_string(regions_.size()) + " region(s) of " +
                             format_bytes(allocated_) +
                             " were never deallocated; unmapped with the device");
  }
}

void* mapped_memory::allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  {
    // Reserve the bytes first so that concurrent callers cannot both pass the check.
    std::lock_guard lock(mu_);
    const std::size_t free = capacity_ - allocated_;
    if (bytes > free) {
      throw out_of_memory(what_ + ": cannot allocate " + format_bytes(bytes) + ": " +
                              format_bytes(free) + " of " + format_bytes(capacity_) +
                              " free; free memory first or " + capacity_hint_,
                          bytes, free, free);
    }
    allocated_ += bytes;
  }
  void* p =
      ::mmap(nullptr, page_round(bytes), prot_, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    std::size_t free = 0;
    {
      std::lock_guard lock(mu_);
      allocated_ -= bytes;
      free = capacity_ - allocated_;
    }
    throw out_of_memory(what_ + ": mmap of " + format_bytes(bytes) +
                            " failed: " + std::strerror(err) +
                            "; the process is out of address space or memory (check ulimit -v)",
                        bytes, free, free);
  }
  try {
    std::lock_guard lock(mu_);
    regions_.emplace(p, bytes);
  } catch (...) {  // the table could not grow: undo, report as out of memory
    ::munmap(p, page_round(bytes));
    std::lock_guard lock(mu_);
    allocated_ -= bytes;
    throw out_of_memory(
        what_ + ": no memory for the region table while allocating " + format_bytes(bytes), bytes,
        capacity_ - allocated_, capacity_ - allocated_);
  }
  return p;
}

void mapped_memory::deallocate(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  std::size_t mapped = 0;
  {
    std::lock_guard lock(mu_);
    auto it = regions_.find(p);
    if (it == regions_.end()) {
      mapped = 0;
    } else {
      mapped = it->second;
      allocated_ -= mapped;
      regions_.erase(it);
    }
  }
  if (mapped == 0) {
    log(log_level::error, what_ + ": deallocate of a pointer this device did not allocate (" +
                              std::to_string(bytes) + " bytes); ignored");
    return;
  }
  if (mapped != bytes && bytes != 0) {
    log(log_level::warn, what_ + ": deallocate with " + std::to_string(bytes) +
                             " bytes of a region allocated with " + std::to_string(mapped) +
                             "; the allocated size is used");
  }
  ::munmap(p, page_round(mapped));
}

std::size_t mapped_memory::allocated() const {
  std::lock_guard lock(mu_);
  return allocated_;
}

}  // namespace memweave::detail
