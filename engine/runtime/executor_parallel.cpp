// Data parallelism in the step loop (executor.hpp, executor_options::comm). The tensor table
// defers each layer's solver update to its gradient bucket (tensor_table.hpp), so the memory
// plan, the budget checks and the schedule already keep a bucket's gradients from their
// backward steps to its update step. Here: at a bucket's close step, after the kernel that
// completes it, its reduction is started (ordered after that kernel on the compute stream)
// and its gradients are locked in the tensor cache, so that nothing moves or evicts them
// while the communicator writes into them; at its update step, after that step's own
// kernel, the compute stream waits for the reduction, the bucket's updates are enqueued and
// the locks go. Every rank runs the same buckets in the same order.
#include <span>
#include <vector>

#include "engine/runtime/executor_transfers.hpp"
#include "engine/runtime/kernel_launcher.hpp"
#include "engine/runtime/residency_table.hpp"
#include "memweave/comm/communicator.hpp"
#include "memweave/engine/executor.hpp"

namespace memweave {

int executor::ranks() const noexcept {
  return options_.comm != nullptr ? options_.comm->size() : std::max(1, options_.ranks);
}

// Every rank starts from rank 0's parameters (they agree already when the seeds do; this
// makes it so whatever each rank initialized).
void executor::broadcast_parameters() {
  communicator* comm = options_.comm;
  if (comm == nullptr || comm->size() <= 1 || !dev_.touches_memory()) return;
  for (tensor_id t : plan_.persistent) {
    const std::size_t count = table_[t].bytes / sizeof(float);
    if (void* p = device_ptr(t)) {
      comm->broadcast({static_cast<float*>(p), count}, 0);
    } else {
      // Evicted to host memory while the budget could not hold every parameter (utp/all).
      void* h = const_cast<void*>(transfers_->engine.host_copy(t));
      comm->broadcast_host({static_cast<std::byte*>(h), table_[t].bytes}, 0);
    }
  }
}

void executor::reduce_buckets(std::size_t step) {
  const auto buckets = table_.buckets();
  stream& compute = dev_.get_stream(stream_role::compute);
  communicator* comm = options_.comm;
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    const gradient_bucket& b = buckets[k];
    if (b.update_step != step) continue;
    if (reductions_[k]) reductions_[k]->wait_on(compute);
    launcher_->launch_updates(b.layers);
    if (k < bucket_released_.size() && bucket_released_[k]) continue;  // unlocked by a repack
    for (layer_id l : b.layers)
      for (tensor_id g : table_.of(l).param_grads) cache_->unlock(g);
  }
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    const gradient_bucket& b = buckets[k];
    if (b.close_step != step) continue;
    std::vector<std::span<float>> grads;
    for (layer_id l : b.layers) {
      for (tensor_id g : table_.of(l).param_grads) {
        cache_->lock(g);
        grads.emplace_back(static_cast<float*>(device_ptr(g)), table_[g].bytes / sizeof(float));
      }
    }
    if (comm == nullptr || !dev_.touches_memory()) continue;  // plan: memory only
    // The loss is a mean over this rank's images: scaled by its share of the global batch,
    // the sum over ranks is the gradient of the mean over the global batch.
    const std::int64_t global =
        options_.global_batch > 0 ? options_.global_batch : net_.batch() * comm->size();
    const float scale =
        static_cast<float>(static_cast<double>(net_.batch()) / static_cast<double>(global));
    reductions_[k] = comm->start_allreduce(std::move(grads), scale, compute);
  }
}

// A repack (the step's tensors cannot be placed: what holds the arena is scattered over it)
// cannot move locked tensors, and the gradients of the buckets reduced but not yet updated
// stay locked from their close step to their update step: VGG16's scattered over the arena
// at its last step left no run for fc6's momentum, so a data-parallel run failed at budgets
// between ones that ran. Here the compute stream waits for those reductions (the
// communicator is done with the gradients after that), and their locks go: the repack moves
// them like any tensor, and the update step brings them back. The same on null (no
// reductions there), so `plan` and `train` decide alike.
void executor::release_bucket_locks(std::size_t step) {
  const auto buckets = table_.buckets();
  std::vector<std::size_t> held;
  for (std::size_t k = 0; k < buckets.size() && k < bucket_released_.size(); ++k) {
    const gradient_bucket& b = buckets[k];
    // Locked after the close step's kernel, unlocked after the update step's: held now
    // (before step `step`'s kernel) where closed before it and updated at or after it.
    if (bucket_released_[k] || b.close_step >= step || b.update_step < step) continue;
    held.push_back(k);
  }
  if (held.empty()) return;
  // The communicator writes the gradients from its own thread, outside every stream: the
  // reductions must be over before any stream may reuse the memory a move frees.
  stream& compute = dev_.get_stream(stream_role::compute);
  for (std::size_t k : held) {
    if (reductions_[k]) reductions_[k]->wait_on(compute);
  }
  compute.synchronize();
  for (std::size_t k : held) {
    for (layer_id l : buckets[k].layers) {
      for (tensor_id g : table_.of(l).param_grads) {
        // The reduction wrote the device copy: a host copy taken before it is stale (an
        // eviction would keep it and drop the sums).
        forget_host(g);
        cache_->unlock(g);
      }
    }
    bucket_released_[k] = true;
  }
}

// After the iteration's final synchronize: the reductions' times, and the loss of the
// global batch (each rank's mean weighted by its share, summed in rank order).
double executor::finish_reductions(double local_loss) {
  reduce_s_ = reduce_wait_s_ = 0;
  reduce_bytes_ = 0;
  for (const gradient_bucket& b : table_.buckets()) reduce_bytes_ += b.bytes;
  for (const auto& r : reductions_) {
    if (!r) continue;
    reduce_s_ += r->reduce_seconds();
    reduce_wait_s_ += r->waited_seconds();
  }
  communicator* comm = options_.comm;
  if (comm == nullptr || comm->size() <= 1 || !dev_.touches_memory()) return local_loss;
  const double mine[2] = {local_loss, static_cast<double>(net_.batch())};
  const std::vector<double> all = comm->allgather(mine);
  double loss = 0, images = 0;
  for (std::size_t r = 0; r < all.size(); r += 2) images += all[r + 1];
  for (std::size_t r = 0; r < all.size(); r += 2) loss += all[r] * all[r + 1] / images;
  return loss;
}

}  // namespace memweave
