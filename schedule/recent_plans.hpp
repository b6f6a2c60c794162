// The last plans made in this process, given again for the same problem and options.
//
// Planning is a pure function of its problem and options, and one run plans the same problem
// many times: the executor's weighing runs each candidate on the null device (every run
// planning at three workspace shares and several link charges and margins), trials repeat a
// configuration an earlier one had, a fallback plans a variant another fallback planned
// already, and the run itself plans the one kept (ResNet-152 at batch 32 under 1.5 GiB: 178
// plans, 94 of them distinct; 2026-11-30). Entries are matched on the whole problem and
// options, compared in full (never by a hash alone, so an answer is always the one planning
// would give); entries with equal problems share one copy of it. Least recently used goes
// first, past `capacity` entries (the repeats of one weighing were at most 42 plans apart) or
// `max_bytes` of them, each counted with its whole problem whether shared or not (a deep
// network's problems take megabytes: a search over depths plans many). Thread-safe.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "memweave/schedule/memory_schedule.hpp"

namespace memweave {

namespace recent_plans_detail {

template <class T>
std::size_t bytes_of(const std::vector<T>& v) {
  return v.size() * sizeof(T);
}

inline std::size_t bytes_of(const schedule_problem& p) {
  std::size_t n = sizeof p + bytes_of(p.step_seconds) + bytes_of(p.step_extra_bytes) +
                  bytes_of(p.step_options) + bytes_of(p.timing_options) + bytes_of(p.tensors);
  for (const auto& o : p.step_options) n += bytes_of(o);
  for (const auto& o : p.timing_options) n += bytes_of(o);
  for (const schedule_tensor& t : p.tensors) n += bytes_of(t.uses) + bytes_of(t.rebuild_touches);
  return n;
}

inline std::size_t bytes_of(const memory_schedule& s) {
  std::size_t n = sizeof s + bytes_of(s.steps) + bytes_of(s.gaps) + bytes_of(s.bytes_per_step) +
                  bytes_of(s.step_choice);
  for (const scheduled_step& st : s.steps) {
    n += bytes_of(st.release) + bytes_of(st.drop) + bytes_of(st.offload) + bytes_of(st.prefetch) +
         bytes_of(st.rebuild) + bytes_of(st.whole) + bytes_of(st.hold);
  }
  return n;
}

inline std::size_t bytes_of(const schedule_bound& b) {
  return sizeof b;
}

// Whole problems compared, the scalars and sizes first: the problems one run plans differ
// mostly there (budgets), and a problem's vectors take a walk over megabytes.
inline bool same_problem(const schedule_problem& a, const schedule_problem& b) {
  return a.budget_bytes == b.budget_bytes && a.link_bytes_per_s == b.link_bytes_per_s &&
         a.device_bytes_per_s == b.device_bytes_per_s && a.copy_latency_s == b.copy_latency_s &&
         a.tensors.size() == b.tensors.size() && a.step_seconds.size() == b.step_seconds.size() &&
         a == b;
}

}  // namespace recent_plans_detail

template <class Options, class Result>
class recent_plans {
 public:
  recent_plans(std::size_t capacity, std::size_t max_bytes)
      : capacity_(capacity), max_bytes_(max_bytes) {}

  std::optional<Result> find(const schedule_problem& problem, const Options& options) {
    const std::scoped_lock lock(mutex_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->options == options && recent_plans_detail::same_problem(*it->problem, problem)) {
        entries_.splice(entries_.begin(), entries_, it);  // now the most recently used
        return entries_.front().result;
      }
    }
    return std::nullopt;
  }

  // Keeping is optional: memory short for the copy keeps nothing (never fails a plan made).
  void insert(const schedule_problem& problem, const Options& options,
              const Result& result) noexcept {
    try {
      insert_or_throw(problem, options, result);
    } catch (...) {  // bad_alloc, or the lock's system_error
    }
  }

 private:
  void insert_or_throw(const schedule_problem& problem, const Options& options,
                       const Result& result) {
    using recent_plans_detail::bytes_of;
    const std::size_t bytes = bytes_of(problem) + bytes_of(result);
    if (bytes > max_bytes_) return;  // would leave room for nothing else
    const std::scoped_lock lock(mutex_);
    std::shared_ptr<const schedule_problem> shared;
    for (const entry& e : entries_) {
      // Equal problems share one copy: once found, the others are that same pointer.
      if (shared ? e.problem == shared : recent_plans_detail::same_problem(*e.problem, problem)) {
        if (e.options == options) return;  // another thread planned it meanwhile
        shared = e.problem;
      }
    }
    if (!shared) shared = std::make_shared<const schedule_problem>(problem);
    entries_.push_front(entry{std::move(shared), options, result, bytes});
    bytes_ += bytes;
    while (entries_.size() > capacity_ || bytes_ > max_bytes_) {
      bytes_ -= entries_.back().bytes;
      entries_.pop_back();
    }
  }

  struct entry {
    std::shared_ptr<const schedule_problem> problem;
    Options options;
    Result result;
    std::size_t bytes;  // the result's and the whole problem's, shared or not
  };
  std::mutex mutex_;
  std::list<entry> entries_;  // most recently used first
  std::size_t bytes_ = 0;     // the entries' `bytes`
  std::size_t capacity_, max_bytes_;
};

}  // namespace memweave
