// The transfer engine: offloads on the device-to-host stream, prefetches on the
// host-to-device stream, one watcher thread handling offload completions.
//
// Invariants:
// - Offloads complete in the order they were enqueued (one in-order device-to-host stream),
//   and queue_ holds them in that order: the watcher blocks on the front one's event (no
//   polling; offload events are made with event_options::blocking_sync, so on cuda the
//   watcher sleeps rather than spins), so "the first offload to complete" is always
//   queue_.front().
// - A host buffer is given back only when no copy can still read or write it: an offload's
//   buffer after its event completed (the watcher); a buffer a prefetch may read after that
//   prefetch's event completed (deferred_ keeps it until then, re-checked without blocking
//   on every call, and waited for in the destructor). A new offload into an existing host
//   copy first makes the device-to-host stream wait for the key's last prefetch.
// - A compressed (fp16) key's host copy is half its device bytes: entry::bytes and the
//   records' host_bytes are host sizes, entry::device_bytes and the records' bytes device
//   sizes (the verify scratch buffers hold device bytes). Its checksums are of the fp16
//   bytes: at offload from the device data encoded on the host (fp16_checksum), against the
//   host copy as it landed; at prefetch from the device data re-encoded, which is exact
//   (fp16 -> fp32 -> fp16 is the identity, NaN payloads included).
// - A key's host copy is valid (prefetchable) only once its offload landed and passed
//   verification; on_offloaded(key) is called only then, so the caller never frees a device
//   copy whose host copy is not known good.
// - Work enqueued on streams captures only shared records and the shared failure box, never
//   the engine: make_ready's check on the compute stream may run after the engine is gone.
//
// Locks (order: mu_ before failure_box::mu; stream-internal locks are taken while holding
// mu_, never the reverse):
// - impl::mu_ guards entries_, queue_, deferred_, the fault counters, counters_, the callback,
//   stopping_, and offload_record::processed. It is never held while blocking on an event
//   (but in the destructor, when no other thread is left) or while running the callback,
//   and stream work never takes it (on `cuda` a host function blocked on it could stall a
//   stream that a thread holding it is enqueueing to).
// - failure_box::mu guards the failures found off the calling threads (by the watcher, or
//   by verification work on the host-to-device stream).
#include "memweave/swap/transfer_engine.hpp"
#include "memweave/device/stream_timeline.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "memweave/core/config.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/log.hpp"
#include "memweave/core/units.hpp"
#include "memweave/device/stream_timeline.hpp"
#include "memweave/swap/fp16.hpp"

namespace memweave {
namespace {

using clock_type = std::chrono::steady_clock;

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

void flip_byte(void* p, std::size_t bytes) noexcept {
  static_cast<unsigned char*>(p)[bytes / 2] ^= 0x5a;
}

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// The checksum of `count` fp32 values as fp16 bytes: what verify mode compares for a
// compressed copy (the link and the host copy carry only those bytes).
std::uint64_t fp16_checksum(const void* fp32, std::size_t count) {
  std::vector<std::uint16_t> half(count);
  (void)fp16_encode(half.data(), static_cast<const float*>(fp32), count);
  return transfer_checksum(half.data(), half.size() * sizeof(std::uint16_t));
}

// The verify checksum of `bytes` device bytes: of their fp16 encoding when compressed.
std::uint64_t device_checksum(const void* data, std::size_t bytes, bool compressed) {
  return compressed ? fp16_checksum(data, bytes / 4) : transfer_checksum(data, bytes);
}

// Whether an event is complete; a failed event counts as complete (nothing more will run
// before it).
bool done_or_failed(event& e) noexcept {
  try {
    return e.query();
  } catch (...) {
    return true;
  }
}

void synchronize_quietly(event& e) noexcept {
  try {
    e.synchronize();
  } catch (...) {
    // The failure was reported (or is pending) elsewhere; here we only wait.
  }
}

// Failures found off the calling threads, thrown by the next call into the engine. Shared
// with stream work, which may outlive the engine.
struct failure_box {
  struct item {
    std::uint64_t id = 0;  // the transfer's id
    std::string label;     // "tensor 7 ('conv1', 4.00 MiB)"
    std::string message;   // the full message
  };
  std::mutex mu;                                    // guards items
  std::vector<item> items;                          // not yet thrown, oldest first
  std::atomic<std::uint64_t> prefetch_failures{0};  // prefetch failures ever found

  void push(std::uint64_t id, const std::string& label, const std::string& message) noexcept {
    try {
      std::lock_guard lock(mu);
      items.push_back({id, label, message});
    } catch (...) {
      log(log_level::error, "transfer_engine: failure lost (out of memory): " + message);
    }
  }
  std::vector<item> take() {
    std::lock_guard lock(mu);
    return std::exchange(items, {});
  }
  // Removes the item of transfer `id` (thrown by its caller directly).
  void forget(std::uint64_t id) {
    std::lock_guard lock(mu);
    std::erase_if(items, [id](const item& i) { return i.id == id; });
  }
};

// One offload in flight, shared with the work it enqueued on the device-to-host stream.
struct offload_record {
  std::uint64_t id = 0;
  std::uint32_t key = 0;
  std::size_t bytes = 0;       // device bytes (and the scratch's)
  std::size_t host_bytes = 0;  // of the host copy: bytes, or bytes / 2 when compressed
  bool compressed = false;
  std::atomic<double> max_error{0.0};  // compressed: written by the encode's stream work
  const void* device = nullptr;
  void* host = nullptr;
  void* scratch = nullptr;  // verify by copy-back: a second copy of the device bytes
  std::atomic<std::uint64_t> device_sum{0};  // checksum of the device bytes (stream work)
  std::string injected;                      // non-empty: an injected copy failure
  bool corrupt_host_after = false;           // fault: flip a byte once it landed good
  bool processed = false;                    // guarded by impl::mu_: handled by the watcher
};

// One prefetch, shared with its verification (host-to-device stream) and make_ready's
// check (compute stream).
struct prefetch_record {
  std::uint64_t id = 0;
  std::uint32_t key = 0;
  std::size_t bytes = 0;           // device bytes
  bool compressed = false;         // expanded from fp16: checked on its fp16 encoding
  std::string label;               // for messages built on stream threads
  std::uint64_t expected_sum = 0;  // checksum of the device bytes at the offload
  std::atomic<bool> failed{false};
  std::string message;  // written once, before `failed` is set (release)

  void fail(std::string m) noexcept {
    message = std::move(m);
    failed.store(true, std::memory_order_release);
  }
};

// A key's state.
struct entry {
  std::size_t bytes = 0;                        // of the host copy
  std::size_t device_bytes = 0;                 // of the tensor (and of prefetch_scratch)
  bool compressed = false;                      // the host copy holds fp16
  void* host = nullptr;                         // host buffer, or null
  void* prefetch_scratch = nullptr;             // verify by copy-back: reused by every prefetch
  bool host_valid = false;                      // the host copy landed and passed verification
  bool dropped = false;                         // drop_host while an offload was in flight
  std::uint64_t checksum = 0;                   // of the device bytes at the last good offload
  std::unique_ptr<event> offload_done;          // recorded by each offload
  std::unique_ptr<event> prefetch_done;         // recorded by each prefetch
  bool prefetch_recorded = false;               // prefetch_done may still guard reads of `host`
  std::shared_ptr<offload_record> offloading;   // the offload in flight, or null
  std::shared_ptr<prefetch_record> prefetched;  // the last prefetch since the last offload
};

// Host buffers waiting for a prefetch that may still read them.
struct deferred_free {
  std::vector<std::pair<void*, std::size_t>> buffers;
  std::unique_ptr<event> after;
};

}  // namespace

transfer_options transfer_options::from_environment() {
  transfer_options o;
  o.verify = option_bool("MEMWEAVE_VERIFY_TRANSFERS");
  return o;
}

struct transfer_engine::impl {
  impl(device& d, host_memory& h, transfer_options o)
      : dev_(d),
        host_(h),
        options_(std::move(o)),
        d2h_(d.get_stream(stream_role::device_to_host)),
        h2d_(d.get_stream(stream_role::host_to_device)),
        moves_data_(d.touches_memory()),
        verifying_(options_.verify && moves_data_),
        copy_back_(verifying_ && (options_.verify_by_copy_back || d.kind() == device_kind::cuda)),
        device_addressable_(d.kind() == device_kind::host),
        codec_(make_codec(d, options_)),
        watcher_([this] { watch(); }) {}

  static std::unique_ptr<fp16_codec> make_codec(device& d, const transfer_options& o) {
    if (o.fp16_codec_factory) return o.fp16_codec_factory(d);
    if (d.kind() == device_kind::cuda) return nullptr;
    return make_host_fp16_codec(d);
  }

  device& dev_;
  host_memory& host_;
  const transfer_options options_;
  stream& d2h_;
  stream& h2d_;
  const bool moves_data_;          // false on `null`: nothing is copied or checked
  const bool verifying_;           // options.verify, where data moves
  const bool copy_back_;           // verify from a scratch copy of the device bytes
  const bool device_addressable_;  // the host may read and write device memory (`host`)
  const std::shared_ptr<failure_box> box_ = std::make_shared<failure_box>();

  mutable std::mutex mu_;            // see the file comment
  std::condition_variable work_cv_;  // watcher: queue non-empty, or stopping
  std::condition_variable done_cv_;  // waiters: an offload was handled
  std::unordered_map<std::uint32_t, entry> entries_;
  std::deque<std::shared_ptr<offload_record>> queue_;  // offloads in flight, oldest first
  std::vector<deferred_free> deferred_;
  transfer_faults faults_;
  std::size_t held_elsewhere_ = 0;  // set_host_held_elsewhere (under mu_)
  bool faults_set_ = false;         // make_ready adds its compute-stream check
  std::uint64_t copies_seen_ = 0;   // payload copies since set_faults
  std::uint64_t allocations_seen_ = 0;
  std::uint64_t offloads_seen_ = 0;
  transfer_stats counters_;                   // the period's counters
  std::uint64_t prefetch_failures_base_ = 0;  // box_->prefetch_failures at reset_stats
  std::size_t host_bytes_ = 0;                // host memory held (all buffers)
  offloaded_callback on_offloaded_;
  stream_timeline* timeline_ = nullptr;  // copies are recorded here when set
  std::uint64_t next_id_ = 1;
  bool stopping_ = false;
  // Compressed copies; null when the device has none (`cuda` without a codec given). Stream work
  // uses it until the last copy ran: it outlives the watcher (which waits for every offload) and
  // the destructor's waits for prefetches.
  const std::unique_ptr<fp16_codec> codec_;
  std::thread watcher_;  // last: starts once everything above is built

  // ---- helpers (the _locked ones need mu_ held) ----------------------------------------------

  // A tensor's copy (`enqueue` puts it on `s`), inside a timeline span when a timeline is
  // set; `bytes` are the link bytes.
  void traced(stream& s, const char* category, std::uint32_t key, std::size_t bytes,
              const std::function<void()>& enqueue) {
    if (timeline_ == nullptr) {
      enqueue();
      return;
    }
    std::string name = options_.name_fn ? options_.name_fn(key) : "";
    if (name.empty()) name = "tensor " + std::to_string(key);
    timeline_->span(s, std::move(name), category, bytes, -1, enqueue);
  }

  std::string label(std::uint32_t key, std::size_t bytes) const {
    std::string name;
    if (options_.name_fn) {
      try {
        name = options_.name_fn(key);
      } catch (...) {
        name.clear();
      }
    }
    std::string out = "tensor " + std::to_string(key) + " (";
    if (!name.empty()) out += "'" + name + "', ";
    return out + format_bytes(bytes) + ")";
  }

  void* allocate_locked(std::size_t bytes) noexcept {
    ++allocations_seen_;
    if (faults_.fail_host_allocation != 0 && faults_.fail_host_allocation == allocations_seen_) {
      return nullptr;
    }
    // What is held outside counts against the same capacity.
    const std::size_t cap = host_.capacity();
    if (held_elsewhere_ > cap || host_.bytes_in_use() + bytes > cap - held_elsewhere_) {
      return nullptr;
    }
    void* p = host_.allocate(bytes);
    if (p != nullptr) host_bytes_ += bytes;
    return p;
  }

  void free_locked(void* p, std::size_t bytes) noexcept {
    if (p == nullptr) return;
    host_.deallocate(p, bytes);
    host_bytes_ -= bytes;
  }

  [[noreturn]] void throw_host_oom(std::unique_lock<std::mutex>& lock, const char* what,
                                   std::uint32_t key, std::size_t bytes, const char* purpose) {
    ++counters_.host_allocation_failures;
    const std::size_t cap = host_.capacity();
    const std::size_t used = host_.bytes_in_use() + held_elsewhere_;
    const std::size_t free_bytes = cap > used ? cap - used : 0;
    const std::string elsewhere =
        held_elsewhere_ == 0 ? std::string()
                             : " (" + format_bytes(held_elsewhere_) + " of it staged tensors)";
    lock.unlock();
    throw host_out_of_memory(
        std::string("transfer_engine: cannot ") + what + " " + label(key, bytes) +
            ": no host memory for " + purpose + " (" + format_bytes(bytes) +
            " asked; the host memory has " + format_bytes(free_bytes) + " free of " +
            format_bytes(cap) + ", " + format_bytes(used) + " in use" + elsewhere +
            "; free memory split in pieces smaller than asked counts as free). "
            "The tensor stays where it is (nothing was enqueued). Raise the "
            "host pool (" +
            options_.pool_knob +
            "), or drop host "
            "copies no longer needed",
        bytes, free_bytes, free_bytes);
  }

  // Gives back `en`'s host buffers, at once when no prefetch may still read them, else
  // once its event completes (the event moves to deferred; a later prefetch makes a new
  // one).
  // An offload whose copy landed good (after its event: the stream work has stored its
  // checksum and, compressed, its largest error): the host copy is valid.
  void landed_locked(entry& en, const offload_record& rec) {
    en.host_valid = true;
    en.checksum = rec.device_sum.load(std::memory_order_acquire);
    ++counters_.offloads_completed;
    if (rec.compressed) {
      counters_.max_compression_error =
          std::max(counters_.max_compression_error, rec.max_error.load(std::memory_order_relaxed));
    }
  }

  void release_buffers_locked(entry& en) {
    deferred_free d;
    if (en.host != nullptr) d.buffers.emplace_back(en.host, en.bytes);
    if (en.prefetch_scratch != nullptr) {
      d.buffers.emplace_back(en.prefetch_scratch, en.device_bytes);
    }
    en.host = nullptr;
    en.prefetch_scratch = nullptr;
    en.host_valid = false;
    en.prefetched.reset();
    if (d.buffers.empty()) return;
    if (en.prefetch_recorded && !done_or_failed(*en.prefetch_done)) {
      d.after = std::move(en.prefetch_done);
      en.prefetch_recorded = false;
      deferred_.push_back(std::move(d));
      return;
    }
    for (auto& [p, n] : d.buffers) free_locked(p, n);
  }

  // Frees deferred buffers whose prefetch is done; never blocks.
  void sweep_locked() {
    if (deferred_.empty()) return;
    std::erase_if(deferred_, [this](deferred_free& d) {
      if (!done_or_failed(*d.after)) return false;
      for (auto& [p, n] : d.buffers) free_locked(p, n);
      return true;
    });
  }

  // Throws the failures found off the calling threads, all in one device_error.
  void throw_failures() {
    std::vector<failure_box::item> items = box_->take();
    if (items.empty()) return;
    std::string message = items.front().message;
    if (items.size() > 1) {
      message += " [" + std::to_string(items.size() - 1) + " more failed transfer" +
                 (items.size() > 2 ? "s" : "") + ":";
      for (std::size_t i = 1; i < items.size(); ++i) message += " " + items[i].label + ";";
      message += " each such tensor stays where it was: see has_host_copy()]";
    }
    throw device_error(message);
  }

  void reject_on_watcher(const char* what) const {
    if (std::this_thread::get_id() == watcher_.get_id()) {
      throw invalid_argument(std::string("transfer_engine::") + what +
                             " called from on_offloaded (the watcher thread) would wait for "
                             "itself forever; wait from the executor's thread instead");
    }
  }

  // Blocks until `rec` was handled; counts the wait. Needs `lock` held. `rec` is taken by
  // value: the watcher pops it from queue_ while this waits.
  double wait_for_locked(std::unique_lock<std::mutex>& lock, std::shared_ptr<offload_record> rec) {
    if (rec->processed) return 0.0;
    const auto t0 = clock_type::now();
    done_cv_.wait(lock, [&] { return rec->processed; });
    const double waited = seconds_since(t0);
    ++counters_.waits;
    counters_.wait_seconds += waited;
    return waited;
  }

  // Enqueues a prefetch of `key` into `device_ptr`; returns its record. Needs `lock` held;
  // unlocks it before throwing.
  std::shared_ptr<prefetch_record> enqueue_prefetch(std::unique_lock<std::mutex>& lock,
                                                    std::uint32_t key, void* device_ptr,
                                                    event* writable, bool on_demand) {
    const char* what = on_demand ? "fetch_now" : "prefetch";
    auto it = entries_.find(key);
    if (it == entries_.end() || it->second.dropped || !it->second.host_valid) {
      const bool in_flight = it != entries_.end() && !it->second.dropped && it->second.offloading;
      const std::size_t bytes = it != entries_.end() ? it->second.bytes : 0;
      lock.unlock();
      if (in_flight) {
        throw invalid_argument(std::string("transfer_engine::") + what + " of " +
                               label(key, bytes) +
                               ": its offload has not completed, so its device copy is still "
                               "resident (on_offloaded was not called); use that copy, or "
                               "wait_offloaded(key) first");
      }
      throw invalid_argument(std::string("transfer_engine::") + what + " of tensor " +
                             std::to_string(key) +
                             ": it has no host copy (never offloaded, dropped, or its offload "
                             "failed); offload it first");
    }
    entry& en = it->second;
    if (device_ptr == nullptr) {
      lock.unlock();
      throw invalid_argument(std::string("transfer_engine::") + what + " of " +
                             label(key, en.device_bytes) +
                             " into a null device pointer; pass memory of at least its bytes");
    }
    if (copy_back_ && en.prefetch_scratch == nullptr) {
      en.prefetch_scratch = allocate_locked(en.device_bytes);
      if (en.prefetch_scratch == nullptr) {
        throw_host_oom(lock, what, key, en.device_bytes, "the verify scratch copy");
      }
    }
    if (!en.prefetch_done) en.prefetch_done = dev_.create_event();

    auto rec = std::make_shared<prefetch_record>();
    rec->id = next_id_++;
    rec->key = key;
    rec->bytes = en.device_bytes;
    rec->compressed = en.compressed;
    rec->expected_sum = en.checksum;
    const bool checked = verifying_ || faults_set_;
    if (checked) rec->label = label(key, en.device_bytes);
    const std::uint64_t n = ++copies_seen_;
    const bool inject_fail = faults_.fail_copy != 0 && faults_.fail_copy == n;
    const bool inject_corrupt =
        faults_.corrupt_copy != 0 && faults_.corrupt_copy == n && device_addressable_;

    bool enqueued_any = false;
    try {
      if (writable != nullptr) h2d_.wait(*writable);
      enqueued_any = true;
      if (inject_fail) {
        std::string msg =
            std::string("transfer_engine: ") + what + " of " + rec->label +
            " failed: injected copy fault (transfer_faults::fail_copy = " + std::to_string(n) +
            "); its host copy is kept";
        auto fail = [rec, box = box_, msg]() {
          rec->fail(msg);
          box->prefetch_failures.fetch_add(1, std::memory_order_relaxed);
          box->push(rec->id, rec->label, msg);
        };
        if (moves_data_) {
          h2d_.launch([fail, msg] {
            fail();
            throw device_error(msg);
          });
        } else {
          fail();  // `null` runs no work: the fault shows at once
        }
      } else if (en.compressed) {
        traced(h2d_, "prefetch", key, en.bytes,
               [&] { codec_->decode(h2d_, device_ptr, en.host, en.device_bytes / 4); });
      } else {
        traced(h2d_, "prefetch", key, en.bytes,
               [&] { h2d_.copy_async(device_ptr, en.host, en.bytes, copy_kind::host_to_device); });
      }
      if (inject_corrupt) {
        h2d_.launch([device_ptr, b = en.device_bytes] { flip_byte(device_ptr, b); });
      }
      if (verifying_ && !inject_fail) {
        const void* src = device_ptr;
        if (copy_back_) {
          h2d_.copy_async(en.prefetch_scratch, device_ptr, en.device_bytes,
                          copy_kind::device_to_host);
          src = en.prefetch_scratch;
        }
        h2d_.launch([rec, box = box_, src] {
          const std::uint64_t sum = device_checksum(src, rec->bytes, rec->compressed);
          if (sum == rec->expected_sum) return;
          std::string msg = "transfer_engine: prefetch of " + rec->label +
                            " delivered corrupt data (verify mode): checksum at offload " +
                            hex(rec->expected_sum) + ", of the device bytes after the prefetch " +
                            hex(sum) +
                            "; the host copy or the link corrupted it (check host memory)";
          rec->fail(msg);
          box->prefetch_failures.fetch_add(1, std::memory_order_relaxed);
          box->push(rec->id, rec->label, msg);
        });
      }
      h2d_.record(*en.prefetch_done);
    } catch (...) {
      if (enqueued_any) {
        // Some work was enqueued without the event after it: wait for the stream so that
        // no copy still reads the host buffer when it is freed later.
        lock.unlock();
        try {
          h2d_.synchronize();
        } catch (...) {
        }
        lock.lock();
      }
      throw;
    }
    en.prefetch_recorded = true;
    en.prefetched = rec;
    ++counters_.prefetches;
    counters_.bytes_prefetched += en.bytes;
    if (on_demand) ++counters_.on_demand_fetches;
    return rec;
  }

  // ---- the watcher thread ---------------------------------------------------------------

  void watch() noexcept {
    std::unique_lock lock(mu_);
    for (;;) {
      work_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and every offload handled
      std::shared_ptr<offload_record> rec = queue_.front();
      event& done = *entries_.at(rec->key).offload_done;  // kept while the offload is in flight
      lock.unlock();

      std::string cause;
      try {
        done.synchronize();  // blocks until the copy landed (or its stream failed)
      } catch (const std::exception& e) {
        cause = e.what();
      }
      if (!rec->injected.empty()) cause = rec->injected;
      std::string error;
      if (!cause.empty()) {
        error = "transfer_engine: offload of " + label(rec->key, rec->bytes) + " failed: " + cause +
                ". The tensor is still on the device (on_offloaded was not called) and its "
                "host copy was discarded; a failed device-to-host stream stays failed, so "
                "recreate the device before offloading again";
      } else if (verifying_) {
        const std::uint64_t host_sum = transfer_checksum(rec->host, rec->host_bytes);
        const std::uint64_t device_sum = rec->device_sum.load(std::memory_order_acquire);
        if (host_sum != device_sum) {
          error = "transfer_engine: offload of " + label(rec->key, rec->bytes) +
                  " was corrupted in transit (verify mode): checksum of the device bytes " +
                  hex(device_sum) + ", of the host copy " + hex(host_sum) +
                  ". The tensor is still on the device (on_offloaded was not called) and "
                  "its host copy was discarded; check the host memory and the link";
        }
      }
      if (error.empty() && rec->corrupt_host_after) flip_byte(rec->host, rec->host_bytes);

      lock.lock();
      entry& en = entries_.at(rec->key);
      en.offloading.reset();
      free_locked(rec->scratch, rec->bytes);
      bool notify = false;
      if (en.dropped) {
        release_buffers_locked(en);
        entries_.erase(rec->key);
      } else if (error.empty()) {
        landed_locked(en, *rec);
        notify = static_cast<bool>(on_offloaded_) && !stopping_;
      } else {
        ++counters_.failed_offloads;
        release_buffers_locked(en);
        box_->push(rec->id, label(rec->key, rec->bytes), error);
      }
      if (notify) {
        offloaded_callback callback = on_offloaded_;
        lock.unlock();
        try {
          callback(rec->key);
        } catch (const std::exception& e) {
          box_->push(rec->id, label(rec->key, rec->bytes),
                     "transfer_engine: on_offloaded(" + std::to_string(rec->key) +
                         ") threw: " + e.what() + "; the host copy is kept");
        } catch (...) {
          box_->push(rec->id, label(rec->key, rec->bytes),
                     "transfer_engine: on_offloaded(" + std::to_string(rec->key) +
                         ") threw an exception not derived from std::exception");
        }
        lock.lock();
      }
      queue_.pop_front();
      rec->processed = true;
      done_cv_.notify_all();
    }
  }
};

// ---- transfer_engine --------------------------------------------------------------------

transfer_engine::transfer_engine(device& dev, host_memory& host, transfer_options options)
    : impl_(std::make_unique<impl>(dev, host, std::move(options))) {}

transfer_engine::~transfer_engine() {
  impl& m = *impl_;
  {
    std::lock_guard lock(m.mu_);
    m.stopping_ = true;
  }
  m.work_cv_.notify_all();
  if (m.watcher_.joinable()) m.watcher_.join();  // handles every offload still in flight
  // No other thread uses the engine now (so blocking with mu held cannot stall anyone);
  // wait for prefetches that may still read host buffers, then free everything.
  std::lock_guard lock(m.mu_);
  for (auto& [key, en] : m.entries_) {
    if (en.prefetch_recorded) synchronize_quietly(*en.prefetch_done);
    en.prefetch_recorded = false;
    m.release_buffers_locked(en);
  }
  for (auto& d : m.deferred_) {
    synchronize_quietly(*d.after);
    for (auto& [p, n] : d.buffers) m.free_locked(p, n);
  }
  m.deferred_.clear();
}

void transfer_engine::set_on_offloaded(offloaded_callback callback) {
  std::lock_guard lock(impl_->mu_);
  impl_->on_offloaded_ = std::move(callback);
}

void transfer_engine::set_timeline(stream_timeline* timeline) {
  std::lock_guard lock(impl_->mu_);
  impl_->timeline_ = timeline;
}

void transfer_engine::set_host_held_elsewhere(std::size_t bytes) {
  std::lock_guard lock(impl_->mu_);
  impl_->held_elsewhere_ = bytes;
}

void transfer_engine::set_faults(const transfer_faults& faults) {
  std::lock_guard lock(impl_->mu_);
  impl_->faults_ = faults;
  impl_->faults_set_ = true;
  impl_->copies_seen_ = 0;
  impl_->allocations_seen_ = 0;
  impl_->offloads_seen_ = 0;
}

void transfer_engine::offload(std::uint32_t key, const void* device_ptr, std::size_t bytes,
                              event& ready, transfer_encoding encoding) {
  impl& m = *impl_;
  if (device_ptr == nullptr || bytes == 0) {
    throw invalid_argument("transfer_engine::offload of tensor " + std::to_string(key) +
                           " with device pointer " + (device_ptr == nullptr ? "null" : "non-null") +
                           " and " + std::to_string(bytes) +
                           " bytes; pass the tensor's device memory and its size (> 0)");
  }
  const bool compress = encoding == transfer_encoding::fp16;
  if (compress && m.codec_ == nullptr) {
    throw invalid_argument("transfer_engine::offload of " + m.label(key, bytes) +
                           " compressed to fp16 (MEMWEAVE_SCHEDULE_COMPRESS=fp16): this engine "
                           "has no fp16 codec for its device (a cuda engine needs one given, "
                           "transfer_options::fp16_codec_factory, as the executor gives "
                           "cuda's); unset MEMWEAVE_SCHEDULE_COMPRESS or set it to none");
  }
  if (compress && bytes % 4 != 0) {
    throw invalid_argument("transfer_engine::offload of " + m.label(key, bytes) +
                           " compressed to fp16: its size is not a whole number of fp32 "
                           "values (a multiple of 4 bytes); offload it uncompressed");
  }
  const std::size_t host_bytes = compress ? bytes / 2 : bytes;
  m.throw_failures();
  std::unique_lock lock(m.mu_);
  m.sweep_locked();
  const bool existed = m.entries_.contains(key);
  entry& en = m.entries_[key];
  if (en.offloading) {
    lock.unlock();
    throw invalid_argument("transfer_engine::offload of " + m.label(key, bytes) +
                           ": an offload of this key is still in flight; wait_offloaded(key) "
                           "first (or do not offload a tensor twice)");
  }
  // The host buffer: reuse the old one when the size matches (its prefetches are waited
  // for on the stream below), else a new one.
  // (The verify scratch buffers hold device bytes: reused only when those match too.)
  const bool reuse = en.host != nullptr && en.bytes == host_bytes && en.device_bytes == bytes;
  void* target = reuse ? en.host : m.allocate_locked(host_bytes);
  if (target == nullptr) {
    if (!existed) m.entries_.erase(key);
    m.throw_host_oom(lock, "offload", key, host_bytes, "its host copy");
  }
  void* scratch = nullptr;
  if (m.copy_back_) {
    scratch = m.allocate_locked(bytes);
    if (scratch == nullptr) {
      if (!reuse) m.free_locked(target, host_bytes);
      if (!existed) m.entries_.erase(key);
      m.throw_host_oom(lock, "offload", key, bytes, "the verify scratch copy");
    }
  }
  // The watcher sleeps on this event (blocking sync) rather than spin a core for the
  // whole copy; the compute stream's waits on it are unaffected.
  if (!en.offload_done) en.offload_done = m.dev_.create_event(event_options{.blocking_sync = true});

  auto rec = std::make_shared<offload_record>();
  rec->id = m.next_id_++;
  rec->key = key;
  rec->bytes = bytes;
  rec->host_bytes = host_bytes;
  rec->compressed = compress;
  rec->device = device_ptr;
  rec->host = target;
  rec->scratch = scratch;
  const std::uint64_t n = ++m.copies_seen_;
  const bool inject_fail = m.faults_.fail_copy != 0 && m.faults_.fail_copy == n;
  const bool inject_corrupt =
      m.faults_.corrupt_copy != 0 && m.faults_.corrupt_copy == n && m.moves_data_;
  const std::uint64_t nth_offload = ++m.offloads_seen_;
  rec->corrupt_host_after = m.faults_.corrupt_host_copy != 0 &&
                            m.faults_.corrupt_host_copy == nth_offload && m.moves_data_;
  if (inject_fail) {
    rec->injected = "injected copy fault (transfer_faults::fail_copy = " + std::to_string(n) + ")";
  }

  bool enqueued_any = false;
  try {
    m.d2h_.wait(ready);  // first: throws for an event of another device, with nothing enqueued
    enqueued_any = true;
    // A prefetch may still read the old host copy (overwritten below) or write the device
    // memory (read below).
    if (en.prefetch_recorded) m.d2h_.wait(*en.prefetch_done);
    if (m.verifying_ && !m.copy_back_) {
      m.d2h_.launch([rec] {
        rec->device_sum.store(device_checksum(rec->device, rec->bytes, rec->compressed),
                              std::memory_order_release);
      });
    }
    if (inject_fail) {
      if (m.moves_data_) {
        m.d2h_.launch([msg = rec->injected] { throw device_error(msg); });
      }
    } else if (compress) {
      m.traced(m.d2h_, "offload", key, host_bytes,
               [&] { m.codec_->encode(m.d2h_, target, device_ptr, bytes / 4, rec->max_error); });
    } else {
      m.traced(m.d2h_, "offload", key, bytes,
               [&] { m.d2h_.copy_async(target, device_ptr, bytes, copy_kind::device_to_host); });
    }
    if (inject_corrupt) m.d2h_.launch([target, host_bytes] { flip_byte(target, host_bytes); });
    if (m.copy_back_) {
      m.d2h_.copy_async(scratch, device_ptr, bytes, copy_kind::device_to_host);
      m.d2h_.launch([rec] {
        rec->device_sum.store(device_checksum(rec->scratch, rec->bytes, rec->compressed),
                              std::memory_order_release);
      });
    }
    m.d2h_.record(*en.offload_done);
  } catch (...) {
    if (enqueued_any) {
      // Work was enqueued with no event after it: let the stream finish before the buffers
      // go back.
      lock.unlock();
      try {
        m.d2h_.synchronize();
      } catch (...) {
      }
      lock.lock();
    }
    m.free_locked(scratch, bytes);
    if (reuse) {
      m.release_buffers_locked(en);  // partly overwritten: no longer a valid host copy
    } else {
      m.free_locked(target, host_bytes);
    }
    if (!existed && en.host == nullptr) m.entries_.erase(key);
    throw;
  }

  // The old buffer, when a new one replaced it (a prefetch may still read it).
  if (!reuse && en.host != nullptr) m.release_buffers_locked(en);
  en.host = target;
  en.bytes = host_bytes;
  en.device_bytes = bytes;
  en.compressed = compress;
  en.host_valid = false;
  en.dropped = false;
  en.prefetched.reset();
  ++m.counters_.offloads;
  m.counters_.bytes_offloaded += host_bytes;
  if (compress) {
    ++m.counters_.compressed_offloads;
    m.counters_.bytes_compressed += bytes;
  }
  // On a device that runs no work (`null`) the copy has landed once it is enqueued (its event
  // never makes a thread wait) and there is nothing to verify: done here, as the watcher
  // would do it at once, without waking it and making a waiter wait for it (planning evicts
  // and waits thousands of times an iteration). An injected failure and on_offloaded, which
  // runs on the watcher, still go through it.
  if (!m.moves_data_ && rec->injected.empty() && !m.on_offloaded_) {
    m.landed_locked(en, *rec);
    rec->processed = true;
    return;
  }
  en.offloading = rec;
  m.queue_.push_back(rec);
  lock.unlock();
  m.work_cv_.notify_one();
}

double transfer_engine::wait_offloaded(std::uint32_t key, stream* compute) {
  impl& m = *impl_;
  m.reject_on_watcher("wait_offloaded");
  double waited = 0.0;
  {
    std::unique_lock lock(m.mu_);
    m.sweep_locked();
    auto it = m.entries_.find(key);
    if (it != m.entries_.end()) {
      if (compute != nullptr && it->second.offload_done) compute->wait(*it->second.offload_done);
      // Once its copy has landed the entry no longer names the record, while the watcher may
      // still be running on_offloaded for it: the record stays queued until that returns.
      std::shared_ptr<offload_record> rec = it->second.offloading;
      for (auto q = m.queue_.rbegin(); !rec && q != m.queue_.rend(); ++q) {
        if ((*q)->key == key) rec = *q;
      }
      if (rec) waited = m.wait_for_locked(lock, rec);
    }
  }
  m.throw_failures();
  return waited;
}

void transfer_engine::order_after_offload(std::uint32_t key, stream& s) {
  impl& m = *impl_;
  std::lock_guard lock(m.mu_);
  auto it = m.entries_.find(key);
  if (it != m.entries_.end() && it->second.offload_done) s.wait(*it->second.offload_done);
}

double transfer_engine::wait_any_offload(stream* compute) {
  impl& m = *impl_;
  m.reject_on_watcher("wait_any_offload");
  double waited = 0.0;
  {
    std::unique_lock lock(m.mu_);
    m.sweep_locked();
    if (!m.queue_.empty()) {
      auto rec = m.queue_.front();
      if (compute != nullptr) compute->wait(*m.entries_.at(rec->key).offload_done);
      waited = m.wait_for_locked(lock, rec);
    }
  }
  m.throw_failures();
  return waited;
}

double transfer_engine::wait_all_offloads() {
  impl& m = *impl_;
  m.reject_on_watcher("wait_all_offloads");
  double waited = 0.0;
  {
    std::unique_lock lock(m.mu_);
    m.sweep_locked();
    if (!m.queue_.empty()) waited = m.wait_for_locked(lock, m.queue_.back());
  }
  m.throw_failures();
  return waited;
}

std::size_t transfer_engine::pending_offloads() const {
  std::lock_guard lock(impl_->mu_);
  return impl_->queue_.size();
}

void transfer_engine::prefetch(std::uint32_t key, void* device_ptr, event* writable) {
  impl& m = *impl_;
  m.throw_failures();
  std::unique_lock lock(m.mu_);
  m.sweep_locked();
  (void)m.enqueue_prefetch(lock, key, device_ptr, writable, false);
}

void transfer_engine::make_ready(std::uint32_t key, stream& compute) {
  impl& m = *impl_;
  m.throw_failures();
  std::unique_lock lock(m.mu_);
  m.sweep_locked();
  auto it = m.entries_.find(key);
  if (it == m.entries_.end() || it->second.dropped || !it->second.prefetched) {
    lock.unlock();
    throw invalid_argument("transfer_engine::make_ready of tensor " + std::to_string(key) +
                           ": no prefetch of it was issued since its last offload; call "
                           "prefetch(key, device_ptr) earlier, or fetch_now");
  }
  entry& en = it->second;
  compute.wait(*en.prefetch_done);
  if (m.verifying_ || m.faults_set_) {
    // Fail the compute stream (sticky) before the kernel when this prefetch failed.
    compute.launch(
        [rec = en.prefetched] {
          if (rec->failed.load(std::memory_order_acquire)) throw device_error(rec->message);
        },
        0.0);
  }
}

double transfer_engine::fetch_now(std::uint32_t key, void* device_ptr, stream& compute,
                                  event* writable) {
  impl& m = *impl_;
  m.throw_failures();
  std::unique_lock lock(m.mu_);
  m.sweep_locked();
  auto rec = m.enqueue_prefetch(lock, key, device_ptr, writable, true);
  event& done = *m.entries_.at(key).prefetch_done;  // no call for this key races this one
  lock.unlock();

  const auto t0 = clock_type::now();
  std::string cause;
  try {
    done.synchronize();
  } catch (const std::exception& e) {
    cause = e.what();
  }
  const double waited = seconds_since(t0);

  lock.lock();
  ++m.counters_.waits;
  m.counters_.wait_seconds += waited;
  if (rec->failed.load(std::memory_order_acquire)) {
    m.box_->forget(rec->id);  // thrown here, not by the next call
    lock.unlock();
    throw device_error(rec->message);
  }
  if (!cause.empty()) {
    lock.unlock();
    throw device_error("transfer_engine: fetch_now of " + m.label(key, rec->bytes) +
                       " failed: " + cause + "; its host copy is kept");
  }
  compute.wait(done);  // complete already; on `null` the compute clock advances to it
  return waited;
}

bool transfer_engine::has_host_copy(std::uint32_t key) const {
  std::lock_guard lock(impl_->mu_);
  auto it = impl_->entries_.find(key);
  return it != impl_->entries_.end() && it->second.host_valid && !it->second.dropped;
}

const void* transfer_engine::host_copy(std::uint32_t key) const {
  std::lock_guard lock(impl_->mu_);
  auto it = impl_->entries_.find(key);
  if (it == impl_->entries_.end() || !it->second.host_valid || it->second.dropped) return nullptr;
  return it->second.host;
}

void transfer_engine::drop_host(std::uint32_t key) {
  impl& m = *impl_;
  std::lock_guard lock(m.mu_);
  m.sweep_locked();
  auto it = m.entries_.find(key);
  if (it == m.entries_.end()) return;
  entry& en = it->second;
  en.dropped = true;
  en.host_valid = false;
  en.prefetched.reset();
  if (en.offloading) return;  // the watcher frees the buffer when the copy lands
  m.release_buffers_locked(en);
  m.entries_.erase(it);
}

std::size_t transfer_engine::reclaim_host() {
  impl& m = *impl_;
  m.reject_on_watcher("reclaim_host");
  std::unique_lock lock(m.mu_);
  const std::size_t before = m.host_bytes_;
  m.sweep_locked();
  // A dropped key's offload in flight: the watcher frees its buffer once the copy lands, and
  // offloads land in order, so waiting for the newest such one waits for them all.
  std::shared_ptr<offload_record> newest_dropped;
  for (const std::shared_ptr<offload_record>& rec : m.queue_) {
    auto it = m.entries_.find(rec->key);
    if (it != m.entries_.end() && it->second.dropped && it->second.offloading == rec) {
      newest_dropped = rec;
    }
  }
  if (newest_dropped != nullptr) (void)m.wait_for_locked(lock, newest_dropped);
  if (!m.deferred_.empty()) {
    // The deferred buffers wait for prefetches, all on the one in-order host-to-device
    // stream: once it is idle every one of them is done. Not waited for under mu_ (stream
    // work never takes it, but the watcher and other callers do).
    lock.unlock();
    try {
      m.h2d_.synchronize();
    } catch (...) {
      // A failed copy is reported by throw_failures below; its event counts as complete.
    }
    lock.lock();
    m.sweep_locked();
  }
  const std::size_t freed = before > m.host_bytes_ ? before - m.host_bytes_ : 0;
  lock.unlock();
  m.throw_failures();
  return freed;
}

void transfer_engine::check() {
  {
    std::lock_guard lock(impl_->mu_);
    impl_->sweep_locked();
  }
  impl_->throw_failures();
}

transfer_stats transfer_engine::stats() const {
  const impl& m = *impl_;
  std::lock_guard lock(m.mu_);
  transfer_stats s = m.counters_;
  s.failed_prefetches =
      m.box_->prefetch_failures.load(std::memory_order_relaxed) - m.prefetch_failures_base_;
  s.pending_offloads = m.queue_.size();
  s.host_copies = 0;
  for (const auto& [key, en] : m.entries_) s.host_copies += en.host != nullptr ? 1 : 0;
  s.host_bytes = m.host_bytes_;
  return s;
}

void transfer_engine::reset_stats() {
  impl& m = *impl_;
  std::lock_guard lock(m.mu_);
  m.counters_ = transfer_stats{};
  m.prefetch_failures_base_ = m.box_->prefetch_failures.load(std::memory_order_relaxed);
}

device& transfer_engine::get_device() const noexcept {
  return impl_->dev_;
}

const transfer_options& transfer_engine::options() const noexcept {
  return impl_->options_;
}

}  // namespace memweave
