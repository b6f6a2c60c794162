// Stream-ordered frees over a device heap (see stream_ordered_heap.hpp for the contract).
//
// Invariants: a pending block is a live allocation of the heap that its owner has freed;
// it is in exactly one stream's list (by rounded size) and in by_ptr_, until it is either
// handed again to an allocation on the same stream or returned to the heap once its event
// is complete (or has been waited for). Nothing else touches a pending block.
//
// Thread safety: mu_ guards the lists. Event queries run with mu_ held (they do not
// block); waiting (drain) happens with mu_ released, on blocks already taken out of the
// lists, so a concurrent allocation never waits behind another thread's drain. The heap
// is called with or without mu_ held, never the other way round (lock order: mu_, then the
// heap's own mutex).
#include "memweave/alloc/stream_ordered_heap.hpp"

#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "memweave/core/log.hpp"
#include "memweave/core/units.hpp"

namespace memweave {

class stream_ordered_heap_impl {
 public:
  explicit stream_ordered_heap_impl(device_heap& heap) : heap_(heap) {}

  struct pending_block {
    void* p = nullptr;
    std::size_t bytes = 0;  // rounded
    std::uintptr_t stream = 0;
    std::unique_ptr<event> done;  // nullptr: complete
  };

  device_heap& heap_;
  mutable std::mutex mu_;  // guards by_stream_, by_ptr_, pending_bytes_
  // Per stream: pending blocks by rounded size (several of one size are kept in free order).
  std::unordered_map<std::uintptr_t, std::multimap<std::size_t, pending_block>> by_stream_;
  std::unordered_map<const void*, std::uintptr_t> by_ptr_;  // pending block -> its stream
  std::size_t pending_bytes_ = 0;

  // Takes a block of [need, limit] bytes pending on `stream`, or nullptr. mu_ held.
  void* take_locked(std::uintptr_t stream, std::size_t need, std::size_t limit) {
    if (stream == stream_ordered_heap::no_reuse_stream) return nullptr;
    auto s = by_stream_.find(stream);
    if (s == by_stream_.end()) return nullptr;
    auto it = s->second.lower_bound(need);
    if (it == s->second.end() || it->first > limit) return nullptr;
    void* p = it->second.p;
    pending_bytes_ -= it->first;
    by_ptr_.erase(p);
    s->second.erase(it);  // the event (if any) is destroyed: the stream's order suffices
    if (s->second.empty()) by_stream_.erase(s);
    return p;
  }

  // Removes the blocks whose event is complete (all of them when `all`) from the lists.
  // mu_ held.
  std::vector<pending_block> extract_locked(bool all) {
    std::vector<pending_block> out;
    for (auto s = by_stream_.begin(); s != by_stream_.end();) {
      for (auto it = s->second.begin(); it != s->second.end();) {
        bool complete = all || it->second.done == nullptr;
        if (!complete) {
          try {
            complete = it->second.done->query();
          } catch (const std::exception& e) {
            // A failed stream: the work will never use the block again; release it.
            log(log_level::error, std::string("stream_ordered_heap: the event of a pending "
                                              "free reports a failure; releasing the block: ") +
                                      e.what());
            complete = true;
          }
        }
        if (complete) {
          pending_bytes_ -= it->first;
          by_ptr_.erase(it->second.p);
          out.push_back(std::move(it->second));
          it = s->second.erase(it);
        } else {
          ++it;
        }
      }
      s = s->second.empty() ? by_stream_.erase(s) : std::next(s);
    }
    return out;
  }

  std::size_t release(std::vector<pending_block>& blocks, bool wait) noexcept {
    std::size_t bytes = 0;
    for (pending_block& b : blocks) {
      if (wait && b.done != nullptr) {
        try {
          b.done->synchronize();
        } catch (const std::exception& e) {
          log(log_level::error, std::string("stream_ordered_heap: waiting for a pending free: ") +
                                    e.what() + "; releasing the block");
        }
      }
      b.done.reset();
      if (heap_.deallocate(b.p) == status::success) bytes += b.bytes;
    }
    return bytes;
  }

  std::size_t reclaim() noexcept {
    std::vector<pending_block> ready;
    try {
      std::lock_guard lock(mu_);
      if (by_ptr_.empty()) return 0;
      ready = extract_locked(false);
    } catch (...) {
      return 0;  // no memory for the list: nothing was taken out
    }
    return release(ready, false);
  }

  std::size_t drain() noexcept {
    std::vector<pending_block> all;
    try {
      std::lock_guard lock(mu_);
      if (by_ptr_.empty()) return 0;
      all = extract_locked(true);
    } catch (...) {
      return 0;
    }
    return release(all, true);
  }
};

stream_ordered_heap::stream_ordered_heap(device_heap& heap)
    : impl_(std::make_unique<stream_ordered_heap_impl>(heap)) {}

stream_ordered_heap::~stream_ordered_heap() {
  impl_->drain();
}

void* stream_ordered_heap::try_allocate(std::size_t bytes, std::uintptr_t stream,
                                        bool wait) noexcept {
  if (bytes == 0) return nullptr;
  stream_ordered_heap_impl& m = *impl_;
  const std::size_t need = m.heap_.round_up(bytes);
  if (need == 0) return m.heap_.try_allocate(bytes);  // too large: the heap counts the failure
  {
    std::lock_guard lock(m.mu_);
    if (void* p = m.take_locked(stream, need, need > SIZE_MAX / 2 ? SIZE_MAX : 2 * need)) {
      return p;
    }
  }
  m.reclaim();
  if (void* p = m.heap_.try_allocate(bytes)) return p;
  {
    std::lock_guard lock(m.mu_);
    if (void* p = m.take_locked(stream, need, SIZE_MAX)) return p;
  }
  if (!wait) return nullptr;
  if (m.drain() == 0) return nullptr;  // nothing was pending: the first failure stands
  return m.heap_.try_allocate(bytes);
}

status stream_ordered_heap::deallocate(void* p, std::uintptr_t stream, std::unique_ptr<event> done,
                                       std::string* why) noexcept {
  stream_ordered_heap_impl& m = *impl_;
  if (p == nullptr) return status::success;
  try {
    std::lock_guard lock(m.mu_);
    const std::size_t bytes = m.heap_.allocation_size(p);
    const bool pending = m.by_ptr_.count(p) != 0;
    if (bytes == 0 || pending) {
      if (why != nullptr) {
        *why = pending ? "freed already (its stream-ordered free is still pending)"
               : m.heap_.owns(p)
                   ? "inside the pool but not the start of a live allocation (freed already, "
                     "or an interior pointer)"
                   : "not an allocation of the memweave pool";
      }
      return status::invalid_device_pointer;
    }
    if (done == nullptr) {
      // Complete already: straight back to the heap for every stream (below, without mu_).
    } else {
      stream_ordered_heap_impl::pending_block b{p, bytes, stream, std::move(done)};
      m.by_stream_[stream].emplace(bytes, std::move(b));
      m.by_ptr_.emplace(p, stream);
      m.pending_bytes_ += bytes;
      return status::success;
    }
  } catch (...) {
    // No host memory for the bookkeeping: wait for the event and free at once (correct,
    // only slower).
    if (done != nullptr) {
      try {
        done->synchronize();
      } catch (...) {
      }
    }
  }
  return m.heap_.deallocate(p);
}

std::size_t stream_ordered_heap::reclaim() noexcept {
  return impl_->reclaim();
}

std::size_t stream_ordered_heap::drain() noexcept {
  return impl_->drain();
}

bool stream_ordered_heap::is_pending(const void* p) const noexcept {
  std::lock_guard lock(impl_->mu_);
  return impl_->by_ptr_.count(p) != 0;
}

pending_stats stream_ordered_heap::pending() const noexcept {
  std::lock_guard lock(impl_->mu_);
  return {impl_->by_ptr_.size(), impl_->pending_bytes_, impl_->by_stream_.size()};
}

std::string stream_ordered_heap::describe_failure(std::size_t bytes) const {
  std::string m = impl_->heap_.describe_failure(bytes);
  const pending_stats p = pending();
  if (p.blocks != 0) {
    m += " (" + format_bytes(p.bytes) + " in " + std::to_string(p.blocks) +
         " stream-ordered frees are still pending: their streams have not reached the free.)";
  }
  return m;
}

device_heap& stream_ordered_heap::heap() const noexcept {
  return impl_->heap_;
}

}  // namespace memweave
