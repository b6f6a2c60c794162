// The executor's tensors by name: reading and writing the persistent ones (wherever the
// policy keeps them between iterations: the device, or host memory under utp/all), the
// parameter gradients and activations of the last iteration through watched copies, and
// the error that says when a tensor that no longer exists died.
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "engine/runtime/executor_staging.hpp"
#include "engine/runtime/executor_transfers.hpp"
#include "engine/runtime/residency_table.hpp"
#include "memweave/core/error.hpp"
#include "memweave/engine/executor.hpp"
#include "memweave/swap/fp16.hpp"

namespace memweave {

std::vector<std::string> executor::persistent_names() const {
  std::vector<std::string> out;
  out.reserve(plan_.persistent.size());
  for (tensor_id t : plan_.persistent) out.push_back(table_[t].name);
  return out;
}

const tensor_info& executor::find_tensor(std::string_view name) const {
  const tensor_id t = table_.find(name);
  if (t == invalid_tensor) {
    throw invalid_argument("no tensor named '" + std::string(name) + "' in network '" +
                           net_.name() +
                           "': expected a table name such as '<layer>.weight', "
                           "'<layer>.weight.momentum', '<layer>.running_mean' or '<layer>.y' "
                           "(executor::persistent_names() lists the persistent ones)");
  }
  return table_[t];
}

std::vector<float> executor::read(std::string_view name) const {
  const tensor_info& info = find_tensor(name);
  MEMWEAVE_EXPECTS(
      discarded_.empty() || !discarded_[info.id],
      "tensor '" + info.name + "': an executor made with evaluation_only keeps no momenta");
  if (info.persistent) return read_tensor(info.id);
  MEMWEAVE_EXPECTS(dev_.touches_memory(), "the " + std::string(to_string(dev_.kind())) +
                                              " device holds no values to read");
  if (watched_[info.id].empty() || captured_in_[info.id] == 0) throw_not_alive(info.id);
  return watched_[info.id];
}

void executor::throw_not_alive(tensor_id t) const {
  const tensor_info& info = table_[t];
  std::string when = "it lives within an iteration only";
  if (free_step_[t] < route_.step_count()) {
    const route_step rs = route_.at(free_step_[t]);
    when = "policy " + options_.policy.name + " frees it after step " +
           std::to_string(free_step_[t] + 1) + " (" + net_[rs.layer].name + " " +
           to_string(rs.direction) + ") of each iteration";
  }
  if (droppable_[t]) when += ", and may drop it earlier to rebuild it";
  std::string state =
      watched_[t].empty() ? "not watched" : "watched, but no iteration has run since watch()";
  throw invalid_argument("tensor '" + info.name + "' (" + to_string(info.role) +
                         ") no longer exists: " + when + "; it is " + state +
                         " (executor::watch(\"" + info.name +
                         "\") before run_iteration keeps a copy of its last value)");
}

std::vector<float> executor::parameter_gradient(std::string_view parameter) const {
  const tensor_info& p = find_tensor(parameter);
  const tensor_id g = p.role == tensor_role::parameter
                          ? table_.find(std::string(parameter) + ".grad")
                          : invalid_tensor;
  if (g == invalid_tensor) {
    throw invalid_argument("tensor '" + p.name + "' (" + to_string(p.role) +
                           ") is not a trained parameter: it has no gradient");
  }
  return read(table_[g].name);
}

void executor::watch(std::string_view name) {
  const tensor_info& info = find_tensor(name);
  MEMWEAVE_EXPECTS(!info.persistent, "tensor '" + info.name +
                                         "' is persistent: read() gives its value at any "
                                         "time, there is nothing to watch");
  MEMWEAVE_EXPECTS(info.role != tensor_role::workspace,
                   "tensor '" + info.name + "' is a workspace: it holds no value to watch");
  if (!watched_[info.id].empty() || info.bytes == 0) return;
  // The last step of an iteration that writes it holds its final value (a gradient is
  // complete after its last accumulation).
  std::size_t last = route_.step_count();
  for (std::size_t s = 0; s < route_.step_count(); ++s) {
    for (const auto& a : table_.accesses(s)) {
      if (a.tensor == info.id && a.mode != access_mode::read) last = s;
    }
  }
  MEMWEAVE_EXPECTS(last < route_.step_count(),
                   "tensor '" + info.name + "' is written by no step: nothing to watch");
  watched_[info.id].assign(info.bytes / sizeof(float), 0.0f);
  captured_in_[info.id] = 0;
  capture_after_[last].push_back(info.id);
}

void executor::watch_gradients() {
  for (const tensor_info& t : table_.tensors()) {
    if (t.role == tensor_role::parameter_gradient) watch(t.name);
  }
}

// After step `step`'s kernel: copy out what it wrote last. Stream order makes the copy read
// the kernel's result, and it is enqueued before the step frees anything.
void executor::capture_watched(std::size_t step) {
  if (!dev_.touches_memory()) return;
  stream& compute = dev_.get_stream(stream_role::compute);
  for (tensor_id t : capture_after_[step]) {
    void* p = device_ptr(t);
    if (p == nullptr) continue;  // not resident (cannot happen for a tensor the step wrote)
    if (residency_->state(t) == residency::staged && staging_->fp16[t]) {
      // Held as fp16 in host memory: expanded there, after the step that wrote it.
      compute.launch([to = watched_[t].data(), from = static_cast<const std::uint16_t*>(p),
                      n = watched_[t].size()] { fp16_decode(to, from, n); });
    } else if (residency_->state(t) == residency::staged) {
      // In host staging memory: a host function, which runs after the step's copies out on
      // the stream. A host-to-host cudaMemcpyAsync is synchronous with the host and need not
      // wait for the work queued before it.
      compute.launch([to = watched_[t].data(), from = static_cast<const float*>(p),
                      n = watched_[t].size()] { std::memcpy(to, from, n * sizeof(float)); });
    } else {
      compute.copy_async(watched_[t].data(), p, table_[t].bytes, copy_kind::device_to_host);
    }
    captured_in_[t] = iterations_run_;
  }
}

void executor::write(std::string_view name, std::span<const float> values) {
  const tensor_info& info = find_tensor(name);
  MEMWEAVE_EXPECTS(info.persistent, "tensor '" + info.name + "' is a " + to_string(info.role) +
                                        " tensor: only persistent tensors (parameters, momenta, "
                                        "running statistics) can be written");
  const std::size_t count = info.bytes / sizeof(float);
  MEMWEAVE_EXPECTS(values.size() == count, "tensor '" + info.name + "' holds " +
                                               std::to_string(count) + " values " +
                                               to_string(info.shape) + ", but " +
                                               std::to_string(values.size()) + " were given");
  MEMWEAVE_EXPECTS(dev_.touches_memory(), "the " + std::string(to_string(dev_.kind())) +
                                              " device holds no values to write");
  if (!discarded_.empty() && discarded_[info.id]) return;  // a momentum, not kept
  write_persistent(info.id, values.data());
  dev_.get_stream(stream_role::compute).synchronize();  // `values` may go now
}

void executor::write_persistent(tensor_id t, const float* values) {
  if (residency_->state(t) == residency::staged) {
    // In host staging memory (cut by channel groups): after the steps that read it.
    dev_.get_stream(stream_role::compute).synchronize();
    std::memcpy(staging_->buffer[t].get(), values, table_[t].bytes);
    return;
  }
  if (cache_persistent()) {
    // utp/all: its host copy (if any) is stale from now on; evicted, it comes back to the
    // device to be written (perhaps evicting others: the placement is restored at the end
    // of the next iteration, as after any eviction).
    const bool evicted = residency_->state(t) == residency::on_host;
    forget_host(t);
    if (evicted) {
      allocate_persistent(t);
      persistent_moved_ = true;
    }
  }
  // An offload of it must wait for this copy, not for the step that last wrote it.
  last_write_[t] = route_.step_count();
  dev_.get_stream(stream_role::compute)
      .copy_async(device_ptr(t), values, table_[t].bytes, copy_kind::host_to_device);
}

}  // namespace memweave
