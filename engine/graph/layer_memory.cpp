// Per-layer memory l_i^f, l_i^b, l_i and the paper's closed forms, summed over the tensor
// table's access lists (each tensor appears at most once per step, so a sum over a step's
// accesses is a sum over distinct tensors). Immutable after construction.
#include "memweave/engine/layer_memory.hpp"

namespace memweave {

layer_memory::layer_memory(const tensor_table& table) : rows_(table.net().size()) {
  const route& r = table.steps();
  const std::size_t steps = table.step_count();
  constexpr std::size_t unused = static_cast<std::size_t>(-1);
  std::vector<std::size_t> first(table.size(), unused);
  std::vector<std::size_t> step_bytes(steps, 0), step_new(steps, 0);
  for (std::size_t s = 0; s < steps; ++s)
    for (const tensor_access& a : table.accesses(s)) {
      const tensor_info& t = table[a.tensor];
      step_bytes[s] += t.bytes;
      if (first[a.tensor] == unused) {
        first[a.tensor] = s;
        if (!t.persistent) step_new[s] += t.bytes;
      }
    }
  for (layer_id id = 0; id < rows_.size(); ++id) {
    layer_memory_row& row = rows_[id];
    const std::size_t f = r.forward_step(id), b = r.backward_step(id);
    row.layer = id;
    row.forward_bytes = step_bytes[f];
    row.backward_bytes = step_bytes[b];
    row.bytes = row.forward_bytes > row.backward_bytes ? row.forward_bytes : row.backward_bytes;
    row.forward_new_bytes = step_new[f];
    row.backward_new_bytes = step_new[b];
    sum_f_ += row.forward_bytes;
    sum_b_ += row.backward_bytes;
    sum_new_f_ += row.forward_new_bytes;
    sum_new_b_ += row.backward_new_bytes;
  }
  for (layer_id id : r.order())
    if (peak_layer_ == invalid_layer || rows_[id].bytes > max_bytes_) {
      max_bytes_ = rows_[id].bytes;
      peak_layer_ = id;
    }
  if (!r.order().empty()) {
    last_b_ = rows_[r.order().back()].backward_bytes;
    last_new_b_ = rows_[r.order().back()].backward_new_bytes;
  }
}

}  // namespace memweave
