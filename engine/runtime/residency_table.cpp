// The transitions check nothing at run time (they are on the step loop's path); the
// executor's end-of-iteration leak checks catch a tensor left in the wrong state.
#include "engine/runtime/residency_table.hpp"

#include <algorithm>

namespace memweave {

residency_table::residency_table(const tensor_table& table)
    : table_(table),
      state_(table.size(), residency::absent),
      aside_(table.size(), nullptr),
      copied_(table.size(), false) {}

void residency_table::count_in(tensor_id t) noexcept {
  bytes_live_ += table_[t].bytes;
  ++tensors_live_;
}

void residency_table::count_out(tensor_id t) noexcept {
  bytes_live_ -= table_[t].bytes;
  --tensors_live_;
}

void residency_table::set(tensor_id t, residency to) noexcept {
  on_host_ -= state_[t] == residency::on_host;
  on_host_ += to == residency::on_host;
  state_[t] = to;
}

void residency_table::persistent_allocated(tensor_id t) noexcept {
  count_in(t);
}

void residency_table::allocated(tensor_id t) noexcept {
  set(t, residency::resident);
  count_in(t);
}

void residency_table::left_device(tensor_id t, residency to) noexcept {
  set(t, to);
  count_out(t);
}

void residency_table::offload_started(tensor_id t, void* ptr) noexcept {
  aside_[t] = ptr;
  set(t, residency::offloading);
}

void residency_table::offload_landed(tensor_id t) noexcept {
  aside_[t] = nullptr;
  set(t, residency::on_host);
  count_out(t);
}

void residency_table::prefetch_started(tensor_id t, void* ptr) noexcept {
  aside_[t] = ptr;
  set(t, residency::prefetching);
  count_in(t);
}

void residency_table::back_in_cache(tensor_id t) noexcept {
  aside_[t] = nullptr;
  set(t, residency::resident);
}

void residency_table::staged(tensor_id t) noexcept {
  if (state_[t] == residency::resident) count_out(t);
  set(t, residency::staged);
}

void residency_table::freed(tensor_id t) noexcept {
  switch (state_[t]) {
    case residency::resident:
    case residency::offloading:
    case residency::prefetching:
      count_out(t);
      break;
    case residency::on_host:
    case residency::staged:
    case residency::dropped:
    case residency::absent:
      break;
  }
  aside_[t] = nullptr;
  set(t, residency::absent);
}

void residency_table::unborn(tensor_id t, residency before) noexcept {
  set(t, before);
}

void residency_table::forget_dropped() noexcept {
  for (auto& s : state_) {
    if (s == residency::dropped) s = residency::absent;
  }
}

void residency_table::note_peak(std::size_t heap_bytes_in_use) noexcept {
  step_peak_live_ = std::max(step_peak_live_, bytes_live_);
  step_peak_heap_ = std::max(step_peak_heap_, heap_bytes_in_use);
}

}  // namespace memweave
