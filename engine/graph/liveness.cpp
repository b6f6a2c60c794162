// Liveness analysis and memory plans. One pass over the access lists gives each tensor's
// first and last use; born_at/dies_after are bucketed by step (counting sort, tensor id order
// inside a step). Invariant checked at construction: a transient tensor's first access
// writes it. Immutable afterwards; plan() only reads. Thread-safe for const use as long as
// the table is not being resized concurrently.
#include "memweave/engine/liveness.hpp"

#include <stdexcept>

namespace memweave {
namespace {
constexpr std::size_t unused = static_cast<std::size_t>(-1);
}  // namespace

const char* to_string(memory_policy p) noexcept {
  return p == memory_policy::baseline ? "baseline" : "liveness";
}

liveness::liveness(const tensor_table& table)
    : table_(&table),
      steps_(table.step_count()),
      first_(table.size(), unused),
      last_(table.size(), unused) {
  for (std::size_t s = 0; s < steps_; ++s)
    for (const tensor_access& a : table.accesses(s)) {
      if (first_[a.tensor] == unused) {
        const tensor_info& t = table[a.tensor];
        if (!t.persistent && a.mode != access_mode::write)
          throw std::logic_error("liveness: tensor '" + t.name + "' is first touched at step " +
                                 std::to_string(s) + " by a " + to_string(a.mode) +
                                 ", not a write (a bug in the tensor table)");
        first_[a.tensor] = s;
      }
      last_[a.tensor] = s;
    }
  std::vector<std::size_t> born_count(steps_ + 1, 0), dies_count(steps_ + 1, 0);
  for (const tensor_info& t : table.tensors()) {
    if (t.host_resident) continue;  // never on the device: no life there
    if (first_[t.id] == unused)
      throw std::logic_error("liveness: tensor '" + t.name +
                             "' is touched by no step (a bug in the tensor table)");
    if (t.persistent) continue;
    ++born_count[first_[t.id] + 1];
    ++dies_count[last_[t.id] + 1];
  }
  for (std::size_t s = 0; s < steps_; ++s) {
    born_count[s + 1] += born_count[s];
    dies_count[s + 1] += dies_count[s];
  }
  born_offsets_ = born_count;
  dies_offsets_ = dies_count;
  born_.resize(born_count[steps_]);
  dies_.resize(dies_count[steps_]);
  for (const tensor_info& t : table.tensors()) {
    if (t.persistent || t.host_resident) continue;
    born_[born_count[first_[t.id]]++] = t.id;
    dies_[dies_count[last_[t.id]]++] = t.id;
  }
}

std::span<const tensor_id> liveness::born_at(std::size_t s) const noexcept {
  return {born_.data() + born_offsets_[s], born_.data() + born_offsets_[s + 1]};
}

std::span<const tensor_id> liveness::dies_after(std::size_t s) const noexcept {
  return {dies_.data() + dies_offsets_[s], dies_.data() + dies_offsets_[s + 1]};
}

std::vector<tensor_id> liveness::in_set(std::size_t s) const {
  std::vector<tensor_id> r;
  for (const tensor_info& t : table_->tensors())
    if (!t.persistent && first_[t.id] < s && s <= last_[t.id]) r.push_back(t.id);
  return r;
}

std::vector<tensor_id> liveness::out_set(std::size_t s) const {
  std::vector<tensor_id> r;
  for (const tensor_info& t : table_->tensors())
    if (!t.persistent && first_[t.id] <= s && s < last_[t.id]) r.push_back(t.id);
  return r;
}

memory_plan liveness::plan(memory_policy policy) const {
  const tensor_table& table = *table_;
  memory_plan p;
  p.policy = policy;
  p.steps.resize(steps_);
  for (const tensor_info& t : table.tensors())
    if (t.persistent && t.bytes > 0) {
      p.persistent.push_back(t.id);
      p.persistent_bytes += t.bytes;
    }
  if (steps_ == 0) return p;

  auto planned = [&](tensor_id id) {
    const tensor_info& t = table[id];
    return !t.persistent && t.bytes > 0;
  };
  if (policy == memory_policy::baseline) {
    for (const tensor_info& t : table.tensors())
      if (planned(t.id)) {
        p.steps.front().allocate.push_back(t.id);
        p.steps.back().free.push_back(t.id);
      }
  } else {
    for (std::size_t s = 0; s < steps_; ++s)
      for (const tensor_access& a : table.accesses(s)) {
        if (!planned(a.tensor)) continue;
        if (first_[a.tensor] == s) p.steps[s].allocate.push_back(a.tensor);
        if (last_[a.tensor] == s) p.steps[s].free.push_back(a.tensor);
      }
  }

  std::size_t bytes = 0, count = 0;
  for (std::size_t s = 0; s < steps_; ++s) {
    step_plan& sp = p.steps[s];
    for (tensor_id t : sp.allocate) bytes += table[t].bytes;
    count += sp.allocate.size();
    sp.transient_bytes_live = bytes;
    sp.transient_tensors_live = count;
    sp.bytes_live = bytes + p.persistent_bytes;
    sp.tensors_live = count + p.persistent.size();
    if (sp.bytes_live > p.peak_bytes) {
      p.peak_bytes = sp.bytes_live;
      p.peak_step = s;
    }
    if (sp.tensors_live > p.peak_tensors) p.peak_tensors = sp.tensors_live;
    for (tensor_id t : sp.free) bytes -= table[t].bytes;
    count -= sp.free.size();
  }
  return p;
}

}  // namespace memweave
