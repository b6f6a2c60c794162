// The evaluation pass: the forward steps of the step loop in inference mode (BN on running
// statistics, no dropout, no update), under forward-only liveness, with the loss layer's
// probabilities and the labels copied out after each batch to count correct predictions.
#include <algorithm>
#include <limits>
#include <string>

#include "engine/runtime/executor_checks.hpp"
#include "engine/runtime/executor_transfers.hpp"
#include "engine/runtime/kernel_launcher.hpp"
#include "memweave/core/error.hpp"
#include "memweave/device/stream_timeline.hpp"
#include "memweave/engine/executor.hpp"

namespace memweave {

evaluation_result executor::evaluate(data_source* data, std::int64_t first_batch,
                                     std::int64_t batches, const std::function<bool()>& stop) {
  MEMWEAVE_EXPECTS(batches >= 1,
                   "evaluate: batches = " + std::to_string(batches) + ": expected at least 1");
  MEMWEAVE_EXPECTS(first_batch >= 0, "evaluate: first_batch = " + std::to_string(first_batch) +
                                         ": expected at least 0");
  // first_batch + b numbers each batch: it must not overflow.
  MEMWEAVE_EXPECTS(first_batch <= std::numeric_limits<std::int64_t>::max() - batches,
                   "evaluate: first_batch = " + std::to_string(first_batch) +
                       " and batches = " + std::to_string(batches) + " number batches past 2^63");
  const bool touches = dev_.touches_memory();
  MEMWEAVE_EXPECTS(!touches || data != nullptr,
                   "evaluate needs a data source on a device that computes");
  if (data != nullptr) check_data_source(*data, net_, "evaluate");
  const settled_batches settled(*launcher_);
  const std::size_t layers = route_.layer_count();
  if (eval_free_after_.empty()) {
    // Each tensor a forward step touches dies after the last forward step touching it
    // (persistent tensors and workspaces, which the step loop does not free, aside).
    eval_free_after_.assign(layers, {});
    std::vector<bool> touched(table_.size(), false);
    for (std::size_t s = 0; s < layers; ++s) {
      for (const auto& a : table_.accesses(s)) touched[a.tensor] = true;
    }
    for (tensor_id t = 0; t < table_.size(); ++t) {
      if (!touched[t] || table_[t].persistent || table_[t].role == tensor_role::workspace) continue;
      eval_free_after_[last_forward_use_[t]].push_back(t);
    }
  }
  const shape4 images = net_[net_.data_layer()].output_shape;
  eval_probabilities_.assign(static_cast<std::size_t>(images.n * net_.classes()), 0.0f);
  eval_labels_.assign(static_cast<std::size_t>(images.n), 0.0f);
  struct evaluating {
    bool& flag;
    explicit evaluating(bool& f) : flag(f) { flag = true; }
    ~evaluating() { flag = false; }
  } mode(evaluating_);
  evaluation_result r;
  double loss_sum = 0;
  stream& compute = dev_.get_stream(stream_role::compute);
  const double sim_start = compute.simulated_time_s();
  for (std::int64_t b = 0; b < batches; ++b) {
    if (b > 0 && stop && stop()) break;  // at least one batch: a result to report
    const std::unique_ptr<launch_scope> scope = launcher_->enter_iteration();
    begin_iteration();
    // A timeline holds the last batch, as it holds the last training iteration.
    if (recording() != nullptr) recording()->clear();
    if (transfers_) transfers_->engine.set_timeline(recording());
    run_steps(layers, data, first_batch + b);
    finish_iteration();  // synchronizes: the copies out have landed
    loss_sum += loss_;
    r.images += images.n;
    ++r.batches;
    if (!touches) continue;
    const std::size_t classes = static_cast<std::size_t>(net_.classes());
    for (std::size_t i = 0; i < eval_labels_.size(); ++i) {
      const float* p = eval_probabilities_.data() + i * classes;
      const auto predicted = static_cast<std::size_t>(std::max_element(p, p + classes) - p);
      if (predicted == static_cast<std::size_t>(eval_labels_[i])) ++r.correct;
    }
  }
  simulated_s_ = (compute.simulated_time_s() - sim_start) / static_cast<double>(r.batches);
  r.loss = loss_sum / static_cast<double>(r.batches);
  r.accuracy = static_cast<double>(r.correct) / static_cast<double>(r.images);
  return r;
}

// After the loss layer's forward kernel: its probabilities and the labels, to the host
// (stream order: after the kernel, before the step frees them).
void executor::copy_out_predictions(const layer& loss) {
  if (!dev_.touches_memory()) return;
  stream& compute = dev_.get_stream(stream_role::compute);
  const tensor_id y = table_.of(loss.id).output;
  compute.copy_async(eval_probabilities_.data(), device_ptr(y), table_[y].bytes,
                     copy_kind::device_to_host);
  compute.copy_async(eval_labels_.data(), device_ptr(table_.labels()),
                     table_[table_.labels()].bytes, copy_kind::device_to_host);
}

}  // namespace memweave
