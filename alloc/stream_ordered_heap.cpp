// Stream-ordered frees over a device heap (see stream_ordered_heap.hpp for the contract).
//
// Invariants: a pending block is a live allocation of the heap that its owner has freed;
// it is in exactly one stream's size map and in by_ptr_ (which holds its iterator there),
// until it is either handed again to an allocation on the same stream or returned to the
// heap once its event is complete (or has been waited for). Nothing else touches a
// pending block. Each stream also lists its frees in order (`order`, with a sequence
// number per free so that entries of blocks taken back by the stream are recognised as
// stale): events recorded on one in-order stream complete in that order, so reclaim()
// stops at a stream's first incomplete free and costs O(blocks returned + streams), not
// O(pending). The no_reuse_stream key gathers frees of different streams, so its frees
// are all queried.
//
// Thread safety: mu_ guards the lists. Event queries run with mu_ held (they do not
// block); waiting (drain) happens with mu_ released, on blocks already taken out of the
// lists, so a concurrent allocation never waits behind another thread's drain, unless it
// would fail: blocks out of the lists but not yet back in the heap (in_transit_) are
// memory on its way, and an allocation that found nothing pending waits for them before it
// fails (it failed for memory that another thread's drain was about to give back). The
// heap is called with or without mu_ held, never the other way round (lock order: mu_,
// then the heap's own mutex).
#include "memweave/alloc/stream_ordered_heap.hpp"

#include <condition_variable>
#include <deque>
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
    std::uint64_t seq = 0;        // the free's number
    std::unique_ptr<event> done;  // nullptr: complete
  };
  using size_map = std::multimap<std::size_t, pending_block>;
  struct stream_list {
    size_map by_size;  // pending blocks by rounded size (equal sizes in free order)
    std::deque<std::pair<std::uint64_t, void*>> order;  // frees in order; may hold stale
  };
  struct locator {
    std::uintptr_t stream = 0;
    std::uint64_t seq = 0;
    size_map::iterator it;
  };

  device_heap& heap_;
  mutable std::mutex mu_;  // guards every member below
  std::unordered_map<std::uintptr_t, stream_list> by_stream_;
  std::unordered_map<const void*, locator> by_ptr_;  // pending block -> where it is
  std::size_t pending_bytes_ = 0;
  std::uint64_t next_seq_ = 1;
  std::size_t in_transit_ = 0;        // blocks extracted, not yet back in the heap
  std::condition_variable returned_;  // in_transit_ went down

  // Removes the pending block `it` of stream list `sl` (mu_ held); returns it.
  pending_block remove_locked(stream_list& sl, size_map::iterator it) {
    pending_block b = std::move(it->second);
    pending_bytes_ -= b.bytes;
    by_ptr_.erase(b.p);
    sl.by_size.erase(it);
    return b;
  }

  // Takes a block of [need, limit] bytes pending on `stream`, or nullptr. mu_ held.
  void* take_locked(std::uintptr_t stream, std::size_t need, std::size_t limit) {
    if (stream == stream_ordered_heap::no_reuse_stream) return nullptr;
    auto s = by_stream_.find(stream);
    if (s == by_stream_.end()) return nullptr;
    auto it = s->second.by_size.lower_bound(need);
    if (it == s->second.by_size.end() || it->first > limit) return nullptr;
    // The event (if any) is destroyed: the stream's own order makes the reuse safe. Its
    // `order` entry turns stale.
    void* p = remove_locked(s->second, it).p;
    if (s->second.by_size.empty()) by_stream_.erase(s);
    return p;
  }

  // Whether `b`'s event is complete (a failed one counts: that work is over). mu_ held.
  static bool complete(const pending_block& b) {
    if (b.done == nullptr) return true;
    try {
      return b.done->query();
    } catch (const std::exception& e) {
      log(log_level::error, std::string("stream_ordered_heap: the event of a pending free "
                                        "reports a failure; releasing the block: ") +
                                e.what());
      return true;
    }
  }

  // Removes the blocks whose event is complete (all of them when `all`). mu_ held.
  std::vector<pending_block> extract_locked(bool all) {
    std::vector<pending_block> out;
    for (auto s = by_stream_.begin(); s != by_stream_.end();) {
      stream_list& sl = s->second;
      if (all) {
        for (auto it = sl.by_size.begin(); it != sl.by_size.end();) {
          auto next = std::next(it);
          out.push_back(remove_locked(sl, it));
          it = next;
        }
        sl.order.clear();
      } else if (s->first == stream_ordered_heap::no_reuse_stream) {
        for (auto it = sl.by_size.begin(); it != sl.by_size.end();) {
          auto next = std::next(it);
          if (complete(it->second)) out.push_back(remove_locked(sl, it));
          it = next;
        }
      } else {
        while (!sl.order.empty()) {
          const auto [seq, p] = sl.order.front();
          auto found = by_ptr_.find(p);
          if (found == by_ptr_.end() || found->second.seq != seq) {
            sl.order.pop_front();  // stale: taken back by the stream
            continue;
          }
          if (!complete(found->second.it->second)) break;  // the later ones are not either
          out.push_back(remove_locked(sl, found->second.it));
          sl.order.pop_front();
        }
      }
      if (sl.by_size.empty()) {
        s = by_stream_.erase(s);
      } else {
        ++s;
      }
    }
    return out;
  }

  // Gives `blocks` (extracted, counted in in_transit_) back to the heap, after waiting for
  // their events when `wait`; the bytes returned.
  std::size_t release(std::vector<pending_block>& blocks, bool wait) noexcept {
    std::size_t bytes = 0;
    for (pending_block& b : blocks) {
      if (wait && b.done != nullptr) {
        try {
          b.done->synchronize();
        } catch (const wait_refused& e) {
          // Not known to be done: the block is kept out of use for good (leaked) rather than
          // handed to someone while the freeing stream may still use it.
          log(log_level::error, std::string("stream_ordered_heap: waiting for a pending free: ") +
                                    e.what() + "; the block (" + std::to_string(b.bytes) +
                                    " bytes) is kept out of use");
          b.done.reset();
          continue;
        } catch (const std::exception& e) {
          log(log_level::error, std::string("stream_ordered_heap: waiting for a pending free: ") +
                                    e.what() + "; releasing the block");
        }
      }
      b.done.reset();
      if (heap_.deallocate(b.p) == status::success) bytes += b.bytes;
    }
    if (!blocks.empty()) {
      std::lock_guard lock(mu_);
      in_transit_ -= blocks.size();
    }
    returned_.notify_all();
    return bytes;
  }

  // Waits until no block is on its way back to the heap; whether any was. Never throws.
  bool wait_for_transit() noexcept {
    std::unique_lock lock(mu_);
    if (in_transit_ == 0) return false;
    returned_.wait(lock, [&] { return in_transit_ == 0; });
    return true;
  }

  std::size_t reclaim() noexcept {
    std::vector<pending_block> ready;
    try {
      std::lock_guard lock(mu_);
      if (by_ptr_.empty()) return 0;
      ready = extract_locked(false);
      in_transit_ += ready.size();
    } catch (...) {
      return 0;  // no memory for the list: nothing was taken out
    }
    return release(ready, false);
  }

  // The blocks pending on `stream` are kept for their events alone (no_reuse_stream). mu_
  // held. Node handles move without allocating; only a missing no_reuse list may throw, and
  // then nothing has moved.
  std::size_t retire_locked(std::uintptr_t stream) {
    if (stream == stream_ordered_heap::no_reuse_stream) return 0;
    auto s = by_stream_.find(stream);
    if (s == by_stream_.end()) return 0;
    std::size_t moved = 0;
    stream_list& keep = by_stream_[stream_ordered_heap::no_reuse_stream];
    s = by_stream_.find(stream);  // the insertion above may have rehashed
    size_map& from = s->second.by_size;
    while (!from.empty()) {
      auto node = from.extract(from.begin());
      node.mapped().stream = stream_ordered_heap::no_reuse_stream;
      const void* p = node.mapped().p;
      const auto it = keep.by_size.insert(std::move(node));
      locator& loc = by_ptr_.at(p);
      loc.stream = stream_ordered_heap::no_reuse_stream;
      loc.it = it;
      ++moved;
    }
    by_stream_.erase(s);
    return moved;
  }

  std::size_t drain() noexcept {
    std::vector<pending_block> all;
    try {
      std::lock_guard lock(mu_);
      if (by_ptr_.empty()) return 0;
      all = extract_locked(true);
      in_transit_ += all.size();
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
  // Nothing was pending, nor on its way back from another thread's reclaim or drain: the
  // first failure stands.
  if (m.drain() == 0 && !m.wait_for_transit()) return nullptr;
  return m.heap_.try_allocate(bytes);
}

status stream_ordered_heap::deallocate(void* p, std::uintptr_t stream, std::unique_ptr<event> done,
                                       std::string* why) noexcept {
  using impl = stream_ordered_heap_impl;
  impl& m = *impl_;
  if (p == nullptr) return status::success;
  impl::pending_block b{p, 0, stream, 0, std::move(done)};
  try {
    std::lock_guard lock(m.mu_);
    b.bytes = m.heap_.allocation_size(p);
    const bool pending = m.by_ptr_.count(p) != 0;
    if (b.bytes == 0 || pending) {
      if (why != nullptr) {
        // The same texts as the C API's checks before it (a free racing another free of
        // the same block ends here): the block and the heap are left as they were.
        *why = pending ? "freed already (its stream-ordered free is still pending); nothing "
                         "changed"
               : m.heap_.owns(p)
                   ? "inside the pool but not the start of a live allocation (freed already, "
                     "or an interior pointer); nothing changed"
                   : "not an allocation of the memweave pool; nothing changed";
      }
      return status::invalid_device_pointer;
    }
    if (b.done != nullptr) {
      // Each container step either succeeds or leaves `b` and the others as they were
      // (node allocation fails before anything is moved); a failure is undone below.
      b.seq = m.next_seq_++;
      auto [loc, inserted] = m.by_ptr_.emplace(p, impl::locator{stream, b.seq, {}});
      try {
        impl::stream_list& sl = m.by_stream_[stream];
        sl.order.emplace_back(b.seq, p);
        const std::size_t bytes = b.bytes;
        loc->second.it = sl.by_size.emplace(bytes, std::move(b));
      } catch (...) {
        m.by_ptr_.erase(loc);
        throw;
      }
      m.pending_bytes_ += loc->second.it->second.bytes;
      return status::success;
    }
    // Complete already: straight back to the heap for every stream (below, without mu_).
  } catch (...) {
    // No host memory for the bookkeeping: wait for the event and free at once (correct,
    // only slower).
    if (b.done != nullptr) {
      try {
        b.done->synchronize();
      } catch (const wait_refused&) {
        return status::success;  // may still be in use: kept out of use (see release)
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

std::size_t stream_ordered_heap::settle() noexcept {
  const std::size_t bytes = impl_->drain();
  (void)impl_->wait_for_transit();
  return bytes;
}

bool stream_ordered_heap::is_pending(const void* p) const noexcept {
  std::lock_guard lock(impl_->mu_);
  return impl_->by_ptr_.count(p) != 0;
}

std::size_t stream_ordered_heap::retire_stream(std::uintptr_t stream) noexcept {
  stream_ordered_heap_impl& m = *impl_;
  try {
    std::lock_guard lock(m.mu_);
    return m.retire_locked(stream);
  } catch (...) {
  }
  // No host memory for the list: every pending block waits for its event now (correct, only
  // slower), so that none stays keyed by the handle; none is left to concern.
  m.drain();
  return 0;
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
