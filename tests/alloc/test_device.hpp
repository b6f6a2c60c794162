// A test double of memweave::device for the heap's tests and benchmarks: device memory is
// aligned host memory (or, for huge arenas, reserved address space that must not be
// touched), the capacity is enforced, and streams and events are not supported. The heap
// only needs allocate/deallocate/memory().
#pragma once

#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "memweave/core/error.hpp"
#include "memweave/device/device.hpp"

namespace memweave::test {

class test_device final : public device {
 public:
  enum class backing {
    host,          ///< aligned host memory: tests may write into what the heap hands out
    address_only,  ///< PROT_NONE reservations: arenas of any size, never to be touched
  };

  explicit test_device(std::size_t capacity, backing b = backing::host)
      : capacity_(capacity), backing_(b) {}

  ~test_device() override {
    for (const auto& [p, bytes] : regions_) release(p, bytes);
  }

  device_kind kind() const noexcept override { return device_kind::host; }
  std::string name() const override { return "test device"; }

  void* allocate(std::size_t bytes) override {
    std::lock_guard lk(mu_);
    if (refuse_next_ > 0) {
      --refuse_next_;
      throw out_of_memory("test device: refusing this allocation as told", bytes, capacity_ - used_,
                          capacity_ - used_);
    }
    if (bytes == 0 || bytes > capacity_ - used_) {
      throw out_of_memory("test device: cannot allocate " + std::to_string(bytes) + " bytes, " +
                              std::to_string(capacity_ - used_) + " free",
                          bytes, capacity_ - used_, capacity_ - used_);
    }
    void* p = nullptr;
    if (backing_ == backing::host) {
      p = std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
    } else {
      p = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) p = nullptr;
    }
    if (p == nullptr) {
      throw out_of_memory("test device: the host refused " + std::to_string(bytes) + " bytes",
                          bytes, 0, 0);
    }
    regions_[p] = bytes;
    used_ += bytes;
    ++allocations_;
    return p;
  }

  void deallocate(void* p, std::size_t bytes) noexcept override {
    std::lock_guard lk(mu_);
    auto it = regions_.find(p);
    if (it == regions_.end() || it->second != bytes) {
      ++bad_deallocations_;
      return;
    }
    release(p, bytes);
    used_ -= bytes;
    regions_.erase(it);
  }

  void* allocate_pinned(std::size_t) override { throw unsupported("pinned memory"); }
  void deallocate_pinned(void*, std::size_t) noexcept override {}
  memory_info memory() const override {
    std::lock_guard lk(mu_);
    return {capacity_ - used_, capacity_};
  }
  stream& get_stream(stream_role) override { throw unsupported("streams"); }
  std::unique_ptr<event> make_event(const event_options&) override { throw unsupported("events"); }
  void synchronize() override {}
  bool touches_memory() const noexcept override { return backing_ == backing::host; }

  /// Bytes handed out and not given back.
  std::size_t used() const {
    std::lock_guard lk(mu_);
    return used_;
  }
  /// Regions handed out and not given back.
  std::size_t live_regions() const {
    std::lock_guard lk(mu_);
    return regions_.size();
  }
  /// Successful allocate() calls so far.
  std::size_t allocations() const {
    std::lock_guard lk(mu_);
    return allocations_;
  }
  /// deallocate() calls with an unknown pointer or a size other than allocated.
  std::size_t bad_deallocations() const {
    std::lock_guard lk(mu_);
    return bad_deallocations_;
  }
  /// The next `n` allocate() calls throw out_of_memory.
  void refuse_next(int n) {
    std::lock_guard lk(mu_);
    refuse_next_ = n;
  }

  static constexpr std::size_t alignment = 4096;

 private:
  static device_error unsupported(const char* what) {
    return device_error(std::string("test device: ") + what + " are not supported");
  }
  void release(void* p, std::size_t bytes) noexcept {
    if (backing_ == backing::host) {
      std::free(p);
    } else {
      ::munmap(p, bytes);
    }
  }

  const std::size_t capacity_;
  const backing backing_;
  mutable std::mutex mu_;  // guards everything below
  std::map<void*, std::size_t> regions_;
  std::size_t used_ = 0;
  std::size_t allocations_ = 0;
  std::size_t bad_deallocations_ = 0;
  int refuse_next_ = 0;
};

}  // namespace memweave::test
