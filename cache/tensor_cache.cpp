// The tensor cache (SuperNeurons §3.3.2, Algorithm 2).
//
// Shape. One slot per key in a vector indexed by key (keys are dense tensor ids), so
// finding a tensor is an index, and two intrusive doubly linked lists threaded through the
// slots by 32-bit indices: lru_ holds the unlocked resident tensors, most recently used at
// the head, and locked_ the locked ones. Nothing is allocated per operation (the vector
// grows only when a larger key first appears). Because locked tensors are not in lru_, its
// tail is always an eviction candidate, except for tensors skipped at the tail: those
// whose callback refused during the same allocate() call (marked with that call's serial
// number, so no list of them is kept) and those being evicted by another call.
//
// Invariants (check_invariants() verifies them): a slot is absent, resident or evicting;
// absent slots are in no list and hold nothing; a resident or evicting slot with locks == 0
// is in lru_, one with locks > 0 (never evicting) in locked_; bytes_resident_ and
// resident_count_ sum the resident and evicting slots; each holds a live heap allocation.
//
// Thread safety. mu_ guards every member below it: the slots, both lists, the counters and
// the statistics. The heap is called with mu_ held (lock order: mu_, then the heap's own
// mutex; the heap never calls back). The eviction and name callbacks are called with mu_
// released. A victim is marked evicting first: it keeps its LRU place, no other eviction
// picks it, and lock, check, forget and bringing it back are refused. release() of it
// detaches it at once (the key is absent and may be brought back) while the evicting call
// keeps its memory: after re-locking, that call finds the slot's generation changed and
// frees the memory itself. It re-reads all other state too, since any call may have run
// meanwhile. No reference into slots_ is kept across an unlock (the vector may grow).
#include "memweave/cache/tensor_cache.hpp"

#include <algorithm>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "memweave/core/log.hpp"
#include "memweave/core/units.hpp"

namespace memweave {

namespace {

constexpr tensor_key nil = std::numeric_limits<tensor_key>::max();
// How many locked tensors an out-of-memory message names (then "and N more").
constexpr std::size_t max_named_in_message = 16;

enum class slot_state : std::uint8_t { absent, resident, evicting };

struct slot {
  void* ptr = nullptr;               // the device memory (resident, evicting)
  std::size_t bytes = 0;             // as given to allocate/insert
  std::size_t held = 0;              // bytes of its heap allocation (whole blocks)
  std::uint64_t refused_serial = 0;  // allocate() call whose callback refused this tensor
  tensor_key prev = nil;             // neighbours in lru_ or locked_
  tensor_key next = nil;
  std::uint32_t locks = 0;       // lock count
  std::uint32_t generation = 0;  // +1 whenever a tensor leaves the slot (survives resets)
  slot_state state = slot_state::absent;
};

// An intrusive list over the slots, head = front.
struct key_list {
  tensor_key head = nil;
  tensor_key tail = nil;
  std::size_t size = 0;
  std::size_t held_bytes = 0;  // sum of the members' heap allocations
};

}  // namespace

class tensor_cache_impl {
 public:
  tensor_cache_impl(device_heap& heap, tensor_cache::eviction_callback evict,
                    tensor_cache::name_callback name)
      : heap_(heap), evict_(std::move(evict)), name_(std::move(name)) {}

  ~tensor_cache_impl() {
    std::size_t evicting = 0;
    for (slot& s : slots_) {
      if (s.state == slot_state::absent) continue;
      if (s.state == slot_state::evicting) ++evicting;
      heap_.deallocate(s.ptr);
    }
    if (evicting != 0) {
      log(log_level::error, "tensor cache destroyed while " + std::to_string(evicting) +
                                " eviction callbacks were running; their memory was freed");
    }
  }

  bool check(tensor_key key) {
    std::unique_lock lk(mu_);
    if (key >= slots_.size() || slots_[key].state == slot_state::absent) {
      ++stats_.misses;
      return false;
    }
    slot& s = slots_[key];
    if (s.state == slot_state::evicting) {
      fail(lk, "check", key,
           "is being evicted (its eviction callback is running); check a tensor from the "
           "thread that drives the cache, not from an eviction callback");
    }
    if (s.locks == 0 && lru_.head != key) {
      unlink(lru_, key);
      push_front(lru_, key);
    }
    ++stats_.hits;
    return true;
  }

  void* allocate(tensor_key key, std::size_t bytes) {
    std::unique_lock lk(mu_);
    if (bytes == 0) fail(lk, "allocate", key, "asked for 0 bytes; a tensor has at least one");
    require_absent(lk, "allocate", key);
    if (void* p = heap_.try_allocate(bytes)) {
      ++stats_.allocations;
      return admit_allocated(key, p, bytes, heap_.round_up(bytes));
    }
    // Evict only when evicting every unlocked tensor could make room: moving data out for
    // an allocation that fails anyway only costs transfers. (Fragmentation can still defeat
    // it; that is found by trying.)
    const std::size_t need = heap_.round_up(bytes);  // 0: larger than any address space
    const heap_stats hs = heap_.stats();
    if (need == 0 || need > hs.bytes_reserved || hs.free_bytes + lru_.held_bytes < need) {
      throw_out_of_memory(lk, key, bytes, need, /*evicting_could_help=*/false);
    }
    const std::uint64_t serial = ++serial_;
    for (;;) {
      const tensor_key victim = evict_ ? next_victim(serial) : nil;
      if (victim == nil) throw_out_of_memory(lk, key, bytes, need, true);
      (void)evict_one(lk, victim, serial);
      if (slots_[key].state != slot_state::absent) {
        fail(lk, "allocate", key,
             "became resident (inserted by another thread) while this call evicted tensors to "
             "make room for it; bring each tensor back once");
      }
      // largest_free_run first: a failed try_allocate would count a heap failure (and try
      // to grow the heap) after every single eviction.
      if (heap_.largest_free_run() >= need) {
        if (void* p = heap_.try_allocate(bytes)) {
          ++stats_.allocations;
          return admit_allocated(key, p, bytes, need);
        }
      }
    }
  }

  void insert(tensor_key key, void* ptr, std::size_t bytes) {
    std::unique_lock lk(mu_);
    if (bytes == 0) fail(lk, "insert", key, "was given 0 bytes; a tensor has at least one");
    if (ptr == nullptr) fail(lk, "insert", key, "was given a null pointer");
    require_absent(lk, "insert", key);
    const std::size_t have = heap_.allocation_size(ptr);
    if (have < bytes) {
      fail(lk, "insert", key,
           "was given a pointer that is not the start of a live allocation of at least " +
               std::to_string(bytes) + " bytes of this cache's heap (" +
               (have == 0 ? std::string("no allocation starts there")
                          : "its allocation has " + std::to_string(have) + " bytes") +
               "); insert only memory taken from the cache's heap");
    }
    // Memory is one tensor's: two keys on one allocation were freed twice, and the heap then
    // handed a resident tensor's memory to a third.
    if (const auto it = by_ptr_.find(ptr); it != by_ptr_.end()) {
      const tensor_key other = it->second;
      lk.unlock();  // names are called unlocked
      throw std::logic_error("tensor_cache::insert: " + label(key) + " was given memory that " +
                             label(other) +
                             " holds already; insert memory no resident tensor holds");
    }
    by_ptr_.emplace(ptr, key);  // bad_alloc: nothing admitted yet
    admit(key, ptr, bytes, have);
  }

  void release(tensor_key key) {
    std::unique_lock lk(mu_);
    slot* s = find(key);
    if (s == nullptr) {
      fail(lk, "release", key,
           "is not resident (released twice, evicted, forgotten, or never allocated or "
           "inserted)");
    }
    if (s->state == slot_state::evicting) {
      // Detach it now; the evicting call frees the memory when its callback returns.
      unlink(lru_, key);
      drop(key, /*free_memory=*/false);
      return;
    }
    if (s->locks != 0) {
      fail(lk, "release", key,
           "is locked (" + std::to_string(s->locks) +
               " locks); unlock it after its kernel, "
               "then release it");
    }
    unlink(lru_, key);
    drop(key, /*free_memory=*/true);
  }

  void* forget(tensor_key key) {
    std::unique_lock lk(mu_);
    slot* s = find(key);
    if (s == nullptr) {
      fail(lk, "forget", key,
           "is not resident (released, evicted, forgotten, or never allocated or inserted)");
    }
    if (s->state == slot_state::evicting) {
      fail(lk, "forget", key,
           "is being evicted (its eviction callback is running); the callback decides where "
           "its data goes");
    }
    if (s->locks != 0) {
      fail(lk, "forget", key,
           "is locked (" + std::to_string(s->locks) +
               " locks); unlock it after its kernel, "
               "then forget it");
    }
    void* const p = s->ptr;
    unlink(lru_, key);
    drop(key, /*free_memory=*/false);
    return p;
  }

  bool evict(tensor_key key) {
    std::unique_lock lk(mu_);
    slot* s = find(key);
    if (s == nullptr) {
      fail(lk, "evict", key,
           "is not resident (released, evicted, forgotten, or never allocated or inserted)");
    }
    if (s->state == slot_state::evicting) {
      fail(lk, "evict", key, "is being evicted already (its eviction callback is running)");
    }
    if (s->locks != 0) {
      fail(lk, "evict", key,
           "is locked (" + std::to_string(s->locks) + " locks); unlock it before evicting it");
    }
    if (!evict_) {
      fail(lk, "evict", key, "cannot be evicted: this cache has no eviction callback");
    }
    return evict_one(lk, key, 0);
  }

  void lock(tensor_key key) {
    std::unique_lock lk(mu_);
    slot* s = find(key);
    if (s == nullptr) {
      fail(lk, "lock", key,
           "is not resident; check() it and bring it back (allocate or insert) before locking");
    }
    if (s->state == slot_state::evicting) {
      fail(lk, "lock", key,
           "is being evicted (its eviction callback is running); lock tensors from the thread "
           "that drives the cache, not from an eviction callback");
    }
    if (s->locks == std::numeric_limits<std::uint32_t>::max()) {
      fail(lk, "lock", key, "has 2^32-1 locks already; every lock needs its unlock");
    }
    if (s->locks++ == 0) {
      unlink(lru_, key);
      push_back(locked_, key);
    }
  }

  void unlock(tensor_key key) {
    std::unique_lock lk(mu_);
    slot* s = find(key);
    if (s == nullptr) fail(lk, "unlock", key, "is not resident");
    if (s->locks == 0) {
      fail(lk, "unlock", key, "is not locked (more unlock() calls than lock() calls)");
    }
    if (--s->locks == 0) {
      unlink(locked_, key);
      push_front(lru_, key);
    }
  }

  void* ptr(tensor_key key) const {
    std::lock_guard lk(mu_);
    const slot* s = find(key);
    return s == nullptr ? nullptr : s->ptr;
  }
  bool resident(tensor_key key) const {
    std::lock_guard lk(mu_);
    return find(key) != nullptr;
  }
  bool locked(tensor_key key) const {
    std::lock_guard lk(mu_);
    const slot* s = find(key);
    return s != nullptr && s->locks != 0;
  }
  std::size_t bytes_resident() const {
    std::lock_guard lk(mu_);
    return bytes_resident_;
  }
  std::size_t resident_count() const {
    std::lock_guard lk(mu_);
    return resident_count_;
  }
  tensor_cache_stats stats() const {
    std::lock_guard lk(mu_);
    return stats_;
  }
  void reset_stats() {
    std::lock_guard lk(mu_);
    stats_ = {};
  }

  std::vector<tensor_key> lru_order() const {
    std::lock_guard lk(mu_);
    std::vector<tensor_key> keys;
    keys.reserve(lru_.size);
    for (tensor_key k = lru_.head; k != nil; k = slots_[k].next) keys.push_back(k);
    return keys;
  }

  std::vector<tensor_key> lru_tail(std::size_t max) const {
    std::lock_guard lk(mu_);
    std::vector<tensor_key> keys;
    for (tensor_key k = lru_.tail; k != nil && keys.size() < max; k = slots_[k].prev) {
      if (slots_[k].state == slot_state::resident) keys.push_back(k);
    }
    return keys;
  }

  void check_invariants() const;

  device_heap& heap() const noexcept { return heap_; }

 private:
  // --- all below with mu_ held ---

  // The slot of a resident or evicting key, or nullptr.
  slot* find(tensor_key key) noexcept {
    if (key >= slots_.size() || slots_[key].state == slot_state::absent) return nullptr;
    return &slots_[key];
  }
  const slot* find(tensor_key key) const noexcept {
    return const_cast<tensor_cache_impl*>(this)->find(key);
  }

  // Throws unless `key` is a valid key that is not resident; makes its slot exist.
  void require_absent(std::unique_lock<std::mutex>& lk, const char* op, tensor_key key) {
    if (key >= tensor_cache::max_keys) {
      fail(lk, op, key,
           "is out of range: keys are below " + std::to_string(tensor_cache::max_keys) +
               " (dense tensor ids)");
    }
    if (key >= slots_.size()) {
      // Geometric growth so that keys appearing in increasing order cost amortised O(1).
      std::size_t n = std::max<std::size_t>(slots_.size() * 2, 64);
      while (n <= key) n *= 2;
      slots_.resize(std::min<std::size_t>(n, tensor_cache::max_keys));
    }
    const slot& s = slots_[key];
    if (s.state == slot_state::evicting) {
      fail(lk, op, key,
           "is being evicted (its eviction callback is running); wait until it is gone "
           "before bringing it back");
    }
    if (s.state == slot_state::resident) {
      fail(lk, op, key,
           "is resident already (" + std::to_string(s.bytes) + " bytes" +
               (s.locks != 0 ? ", locked" : "") + "); release or forget it first");
    }
  }

  // admit() for memory this cache took from the heap: registered by pointer first (given
  // back to the heap should that fail).
  void* admit_allocated(tensor_key key, void* p, std::size_t bytes, std::size_t held) {
    try {
      by_ptr_.emplace(p, key);
    } catch (...) {
      heap_.deallocate(p);
      throw;
    }
    return admit(key, p, bytes, held);
  }

  // Makes an absent key resident and unlocked at the LRU front.
  void* admit(tensor_key key, void* p, std::size_t bytes, std::size_t held) noexcept {
    slot& s = slots_[key];
    s.ptr = p;
    s.bytes = bytes;
    s.held = held;
    s.state = slot_state::resident;
    push_front(lru_, key);
    bytes_resident_ += bytes;
    ++resident_count_;
    return p;
  }

  // Forgets a key already unlinked from its list, freeing its memory if asked.
  void drop(tensor_key key, bool free_memory) noexcept {
    slot& s = slots_[key];
    by_ptr_.erase(s.ptr);
    if (free_memory) heap_.deallocate(s.ptr);
    bytes_resident_ -= s.bytes;
    --resident_count_;
    const std::uint32_t next_generation = s.generation + 1;
    s = slot{};
    s.generation = next_generation;
  }

  // The unlocked tensor nearest the LRU end that this allocate() call (serial) may evict.
  tensor_key next_victim(std::uint64_t serial) const noexcept {
    for (tensor_key k = lru_.tail; k != nil; k = slots_[k].prev) {
      const slot& s = slots_[k];
      if (s.state == slot_state::resident && s.refused_serial != serial) return k;
    }
    return nil;
  }

  // A victim as it was when its callback was called.
  struct eviction {
    tensor_key key;
    std::uint32_t generation;
    void* ptr;
    std::size_t bytes;
  };

  // Ends an eviction: frees the victim when its callback said so, or its memory when it was
  // released meanwhile (the slot's generation moved on), else marks it refused for this
  // allocate() call (serial) and leaves it where it is.
  void settle(const eviction& e, bool freed, std::uint64_t serial) noexcept {
    if (freed) {
      ++stats_.evictions;
      stats_.bytes_evicted += e.bytes;
    }
    slot& v = slots_[e.key];
    if (v.generation != e.generation) {
      heap_.deallocate(e.ptr);
    } else if (freed) {
      unlink(lru_, e.key);
      drop(e.key, /*free_memory=*/true);
    } else {
      v.state = slot_state::resident;
      v.refused_serial = serial;
    }
  }

  // Runs the callback for `key` (resident, unlocked) with mu_ released and settles the
  // outcome (a refusal is marked with `serial`); returns the callback's answer. An
  // exception from the callback leaves the victim resident and propagates.
  bool evict_one(std::unique_lock<std::mutex>& lk, tensor_key key, std::uint64_t serial) {
    slot& v = slots_[key];
    v.state = slot_state::evicting;
    const eviction e{key, v.generation, v.ptr, v.bytes};
    lk.unlock();
    bool freed = false;
    try {
      freed = evict_(e.key, e.ptr, e.bytes);
    } catch (...) {
      lk.lock();
      settle(e, false, 0);
      throw;
    }
    lk.lock();
    settle(e, freed, serial);
    return freed;
  }

  [[noreturn]] void throw_out_of_memory(std::unique_lock<std::mutex>& lk, tensor_key key,
                                        std::size_t bytes, std::size_t need,
                                        bool evicting_could_help);
  // Unlocks and throws std::logic_error "tensor_cache::<op>: <tensor> <why>".
  [[noreturn]] void fail(std::unique_lock<std::mutex>& lk, const char* op, tensor_key key,
                         const std::string& why) const {
    lk.unlock();
    throw std::logic_error(std::string("tensor_cache::") + op + ": " + label(key) + " " + why);
  }
  // "conv1 output (tensor 7)" or "tensor 7"; called unlocked.
  std::string label(tensor_key key) const {
    const std::string id = "tensor " + std::to_string(key);
    if (!name_) return id;
    try {
      return name_(key) + " (" + id + ")";
    } catch (...) {
      return id;
    }
  }

  void push_front(key_list& l, tensor_key k) noexcept {
    slot& s = slots_[k];
    s.prev = nil;
    s.next = l.head;
    if (l.head != nil) {
      slots_[l.head].prev = k;
    } else {
      l.tail = k;
    }
    l.head = k;
    ++l.size;
    l.held_bytes += s.held;
  }
  void push_back(key_list& l, tensor_key k) noexcept {
    slot& s = slots_[k];
    s.next = nil;
    s.prev = l.tail;
    if (l.tail != nil) {
      slots_[l.tail].next = k;
    } else {
      l.head = k;
    }
    l.tail = k;
    ++l.size;
    l.held_bytes += s.held;
  }
  void unlink(key_list& l, tensor_key k) noexcept {
    slot& s = slots_[k];
    if (s.prev != nil) {
      slots_[s.prev].next = s.next;
    } else {
      l.head = s.next;
    }
    if (s.next != nil) {
      slots_[s.next].prev = s.prev;
    } else {
      l.tail = s.prev;
    }
    s.prev = s.next = nil;
    --l.size;
    l.held_bytes -= s.held;
  }

  device_heap& heap_;
  const tensor_cache::eviction_callback evict_;
  const tensor_cache::name_callback name_;

  mutable std::mutex mu_;  // guards everything below
  std::vector<slot> slots_;
  key_list lru_;     // unlocked resident (and evicting) tensors, most recently used first
  key_list locked_;  // locked tensors, in the order they were locked
  std::size_t bytes_resident_ = 0;
  std::size_t resident_count_ = 0;
  std::unordered_map<const void*, tensor_key> by_ptr_;  // each resident tensor's memory
  std::uint64_t serial_ = 0;                            // numbers allocate() calls that evict
  tensor_cache_stats stats_;
};

void tensor_cache_impl::throw_out_of_memory(std::unique_lock<std::mutex>& lk, tensor_key key,
                                            std::size_t bytes, std::size_t need,
                                            bool evicting_could_help) {
  ++stats_.failed_allocations;
  // Snapshot under the lock; names are made after it (the name callback is user code).
  struct held {
    tensor_key key;
    std::size_t bytes;
    std::uint32_t locks;
  };
  std::vector<held> named;
  std::size_t locked_bytes = 0;
  for (tensor_key k = locked_.head; k != nil; k = slots_[k].next) {
    const slot& s = slots_[k];
    locked_bytes += s.bytes;
    if (named.size() < max_named_in_message) named.push_back({k, s.bytes, s.locks});
  }
  const std::size_t locked_count = locked_.size;
  std::size_t refused = 0, refused_bytes = 0, evicting = 0, evicting_bytes = 0;
  for (tensor_key k = lru_.head; k != nil; k = slots_[k].next) {
    const slot& s = slots_[k];
    if (s.state == slot_state::evicting) {
      ++evicting;
      evicting_bytes += s.bytes;
    } else {
      ++refused;  // resident and unlocked but not taken: refused (or no callback)
      refused_bytes += s.bytes;
    }
  }
  const heap_stats hs = heap_.stats();
  const std::string heap_text = heap_.describe_failure(bytes);
  lk.unlock();

  std::string m = "tensor cache: cannot allocate " + format_bytes(bytes) + " for " + label(key);
  if (need == 0 || need > hs.bytes_reserved) {
    m += ": it is larger than the heap, so nothing was evicted. ";
  } else if (!evicting_could_help) {
    m += ": the heap cannot serve it and evicting every unlocked tensor would not free "
         "enough, so nothing was evicted. ";
  } else {
    m += ": the heap cannot serve it and no resident tensor can be evicted. ";
  }
  if (locked_count == 0) {
    m += "No tensor is locked";
  } else {
    m += std::to_string(locked_count) +
         (locked_count == 1 ? " locked tensor holds " : " locked tensors hold ") +
         format_bytes(locked_bytes) + ":";
    for (std::size_t i = 0; i < named.size(); ++i) {
      m += (i == 0 ? " " : ", ") + label(named[i].key) + " " + format_bytes(named[i].bytes);
      if (named[i].locks > 1) m += " (" + std::to_string(named[i].locks) + " locks)";
    }
    if (locked_count > named.size()) {
      m += " and " + std::to_string(locked_count - named.size()) + " more";
    }
  }
  if (refused != 0) {
    m += "; " + std::to_string(refused) + " unlocked " + (refused == 1 ? "tensor" : "tensors") +
         " of " + format_bytes(refused_bytes) +
         (!evicting_could_help ? " not evicted"
          : evict_             ? " refused by the eviction callback"
                               : " (the cache has no eviction callback)");
  }
  if (evicting != 0) {
    m += "; " + std::to_string(evicting) + " being evicted by other calls (" +
         format_bytes(evicting_bytes) + ")";
  }
  m += ". " + heap_text +
       " A step needs all its locked tensors at once: lower the batch size, or unlock tensors "
       "the running step does not use.";
  throw out_of_memory(m, bytes, hs.free_bytes, hs.largest_free_run);
}

void tensor_cache_impl::check_invariants() const {
  std::lock_guard lk(mu_);
  auto broken = [](const std::string& what) {
    throw std::logic_error("tensor_cache invariant broken: " + what);
  };
  auto walk = [&](const key_list& l, bool locked_list, const char* name) {
    std::size_t n = 0, held = 0;
    tensor_key prev = nil;
    for (tensor_key k = l.head; k != nil; k = slots_[k].next) {
      if (k >= slots_.size()) broken(std::string(name) + " links to key out of range");
      const slot& s = slots_[k];
      if (s.prev != prev) broken(std::string(name) + ": prev link of " + std::to_string(k));
      if (s.state == slot_state::absent) {
        broken(std::string(name) + " holds absent key " + std::to_string(k));
      }
      if ((s.locks != 0) != locked_list) {
        broken(std::string(name) + " holds key " + std::to_string(k) + " with " +
               std::to_string(s.locks) + " locks");
      }
      if (locked_list && s.state == slot_state::evicting) {
        broken("locked key " + std::to_string(k) + " is being evicted");
      }
      prev = k;
      held += s.held;
      if (++n > slots_.size()) broken(std::string(name) + " has a cycle");
    }
    if (prev != l.tail) broken(std::string(name) + ": tail");
    if (n != l.size) broken(std::string(name) + ": size");
    if (held != l.held_bytes) broken(std::string(name) + ": held bytes");
    return n;
  };
  const std::size_t in_lists = walk(lru_, false, "lru list") + walk(locked_, true, "locked list");
  std::size_t count = 0, bytes = 0;
  for (tensor_key k = 0; k < slots_.size(); ++k) {
    const slot& s = slots_[k];
    if (s.state == slot_state::absent) {
      if (s.ptr != nullptr || s.bytes != 0 || s.held != 0 || s.locks != 0 || s.prev != nil ||
          s.next != nil) {
        broken("absent key " + std::to_string(k) + " holds state");
      }
      continue;
    }
    ++count;
    bytes += s.bytes;
    if (s.bytes == 0 || s.held < s.bytes || heap_.allocation_size(s.ptr) != s.held) {
      broken("key " + std::to_string(k) + " is not a live heap allocation of its " +
             std::to_string(s.held) + " >= " + std::to_string(s.bytes) + " bytes");
    }
    // Each resident tensor's memory its own (by_ptr_ maps it back to this key alone).
    const auto it = by_ptr_.find(s.ptr);
    if (it == by_ptr_.end() || it->second != k) {
      broken("key " + std::to_string(k) + "'s memory is not registered as its own");
    }
  }
  if (by_ptr_.size() != count) broken("memory registered for keys no longer resident");
  if (count != in_lists) broken("resident keys not all in exactly one list");
  if (count != resident_count_) broken("resident_count");
  if (bytes != bytes_resident_) broken("bytes_resident");
}

tensor_cache::tensor_cache(device_heap& heap, eviction_callback evict, name_callback name)
    : impl_(std::make_unique<tensor_cache_impl>(heap, std::move(evict), std::move(name))) {}
tensor_cache::~tensor_cache() = default;

bool tensor_cache::check(tensor_key key) {
  return impl_->check(key);
}
void* tensor_cache::allocate(tensor_key key, std::size_t bytes) {
  return impl_->allocate(key, bytes);
}
void tensor_cache::insert(tensor_key key, void* ptr, std::size_t bytes) {
  impl_->insert(key, ptr, bytes);
}
void tensor_cache::release(tensor_key key) {
  impl_->release(key);
}
void* tensor_cache::forget(tensor_key key) {
  return impl_->forget(key);
}
void tensor_cache::lock(tensor_key key) {
  impl_->lock(key);
}
void tensor_cache::unlock(tensor_key key) {
  impl_->unlock(key);
}
void* tensor_cache::ptr(tensor_key key) const {
  return impl_->ptr(key);
}
bool tensor_cache::resident(tensor_key key) const {
  return impl_->resident(key);
}
bool tensor_cache::locked(tensor_key key) const {
  return impl_->locked(key);
}
std::size_t tensor_cache::bytes_resident() const {
  return impl_->bytes_resident();
}
std::size_t tensor_cache::resident_count() const {
  return impl_->resident_count();
}
tensor_cache_stats tensor_cache::stats() const {
  return impl_->stats();
}
void tensor_cache::reset_stats() {
  impl_->reset_stats();
}
std::vector<tensor_key> tensor_cache::lru_order() const {
  return impl_->lru_order();
}
bool tensor_cache::evict(tensor_key key) {
  return impl_->evict(key);
}

std::vector<tensor_key> tensor_cache::lru_tail(std::size_t max) const {
  return impl_->lru_tail(max);
}
void tensor_cache::check_invariants() const {
  impl_->check_invariants();
}
device_heap& tensor_cache::heap() const noexcept {
  return impl_->heap();
}

}  // namespace memweave
