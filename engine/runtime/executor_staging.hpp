// TSPLIT's micro-tensors in the executor: a split step under a policy that moves tensors
// (utp, all) keeps the whole values of its batch-shaped tensors (activations, their
// gradients, the dropout mask, the labels) in host memory, and holds on the device only
// the running micro-batch's slices, in one buffer sized for the largest micro-batch. So a
// step needs its micro-step's working set, not l_i: budgets below max(l_i) run. The slices of
// the last micro-batch a step ran of what the next (split) step reads stay on the device in
// buffers of their own, and that step starts with them (micro_batch_left, slice_buffer).
//
// A staged tensor (residency::staged) stays in host memory across consecutive split steps;
// a step that runs whole brings it back like a tensor evicted to host memory (one copy in),
// and a split step takes a resident one out (one copy out, its device memory given back).
// The copies run on the compute stream, in order with the kernels, so a staged value is
// always the one the previous step left; host buffers given up while the stream may still
// use them are kept until the iteration's end. Staged bytes count against the host pool's
// capacity (MEMWEAVE_HOST_POOL_BYTES, --host-pool) together with the swapped tensors' host
// copies, on every device, so that `plan` finds host memory running out where `train` would.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include "engine/layers/split_step.hpp"
#include "memweave/alloc/pinned_host_pool.hpp"
#include "memweave/engine/executor.hpp"
#include "memweave/swap/fp16_codec.hpp"

namespace memweave {

/// Whether route step `s` is staged: planned in more than one micro-batch, under a policy
/// that moves tensors to host memory (not a tiled segment, which splits itself). A staged
/// DATA step writes the batch into host memory, where the split steps after it read it. An
/// evaluation stages its split forward steps alike.
bool staged_split_step(const executor_options& options, const network& net, const route& r,
                       std::size_t s) noexcept;

/// The micro-batches (split_parts) and output-channel groups (channel_parts) route step `s`
/// runs in: 1 where the options say nothing, and groups 1 but for CONV (groups 1) and FC.
int batch_parts_of(const executor_options& options, std::size_t s) noexcept;
int channel_groups_of(const executor_options& options, const network& net, const route& r,
                      std::size_t s) noexcept;

/// Whether layer `l`'s first input has a gradient (BN's split backward then runs a second
/// pass over the micro-batches, layers::split_passes).
bool first_input_has_grad(const tensor_table& table, const layer& l) noexcept;

/// Whether `t` is one of a staged step's micro-tensors (one slice per image of `batch`; a
/// step in channel groups also stages what channel_cut names, persistent ones too).
bool staged_slice(const tensor_info& t, std::int64_t batch) noexcept;

// A staged tensor's whole value in host memory: plain memory, or on a backend that copies
// slices with cudaMemcpyAsync (kernel_launcher::pins_staging) page-locked memory from the
// transfers' pinned pool, which then counts it (not staging::held). Plain memory's bytes
// are counted in `*plain_live` until freed.
struct staging_free {
  pinned_host_pool* pool = nullptr;
  std::size_t* plain_live = nullptr;
  std::size_t bytes = 0;
  void operator()(float* p) const noexcept {
    if (pool != nullptr) {
      (void)pool->deallocate(p);
    } else {
      delete[] p;
      if (plain_live != nullptr) *plain_live -= bytes;
    }
  }
};
using staging_buffer = std::unique_ptr<float[], staging_free>;

struct executor::staging {
  // Bytes of plain staging memory allocated and not yet freed, retired buffers' included:
  // within the host pool beside what it holds (new_staging checks). Declared before the
  // buffers, whose deleters count it down.
  std::size_t plain_live = 0;
  std::vector<bool> step;              // per route step: staged
  std::vector<staging_buffer> buffer;  // per tensor: its whole value (host)
  // Per tensor: its whole value held as fp16 (executor_options::split_compress), `buffer`
  // then holding bytes / 2; its copies to and from the device convert on the way (`codec`
  // for the whole tensor's, the kernel for its slices).
  std::vector<bool> fp16;
  std::unique_ptr<fp16_codec> codec;  // made at the first whole copy of an fp16 one
  // The largest relative error of a value rounded to fp16 on its way out this iteration:
  // written by work on the compute stream (`stream_error`, a codec's result folded in after
  // it) and by this thread (`host_error`: a host copy converted here), read after the stream
  // is synchronized.
  std::atomic<double> codec_error{0.0};
  double stream_error = 0.0;
  double host_error = 0.0;
  std::uint64_t bytes_fp16 = 0;  // this iteration: of bytes_staged, those that crossed as fp16
  std::vector<bool> holds;       // per tensor: counted in `held`
  std::size_t held = 0;  // bytes staged now: with the swapped tensors', within the host pool
  std::vector<staging_buffer> retired;  // buffers the stream may still read
  // Of `retired`, plain memory's bytes: no longer staged, still allocated until the stream is
  // done with them, so counted in the host pool beside `held` until released.
  std::size_t retired_held = 0;
  // What staging holds of the host pool: told to the transfer engine, checked by new_staging.
  std::size_t counted() const noexcept { return held + retired_held; }
  // The running staged step's: what goes to the device whole, the micro-tensors, and the
  // buffer holding their slices.
  std::vector<tensor_access> whole;
  std::vector<layers::staged_tensor> tensors;
  std::vector<tensor_id> ids;  // tensors[i]'s tensor
  void* micro = nullptr;
  std::size_t micro_bytes = 0;
  // A micro-tensor's buffer of its own, outside `micro`: a slice handed over by the staged
  // step before, or one this step hands to the next. The step after a staged one, staged too
  // in as many micro-batches, finds the slices of the last micro-batch this one ran of what
  // it reads still on the device and starts there (a micro-tensor resident while its
  // siblings are in host memory): one slice of each fewer over the link.
  struct slice_buffer {
    tensor_id tensor = invalid_tensor;
    void* ptr = nullptr;
    std::size_t bytes = 0;
    bool hand_on = false;  // kept for the next step at this one's end
    /// Handed on without being written back: the next step is the tensor's last reader
    /// (staged_tensor::keeps_last).
    bool keeps_last = false;
    /// Its slice is not in the tensor's value in host memory (handed over as keeps_last):
    /// written back there should the step it was handed to not take it.
    bool unwritten = false;
    std::int64_t micro_batch = -1;  // the micro-batch whose slice it holds
    int parts = 0;                  // of that many
  };
  /// Gives `b`'s device memory back to `heap`, off the workspace bytes `residency` counts
  /// (stream order: kernels enqueued later run after the copies that read it).
  static void give_back(const slice_buffer& b, device_heap& heap,
                        residency_table& residency) noexcept;
  std::vector<slice_buffer> own;     // the running staged step's
  std::int64_t leaves = -1;          // the micro-batch whose slices it leaves; -1: none
  std::vector<slice_buffer> handed;  // held between a staged step and the next
  std::uint64_t bytes_staged = 0;    // this iteration: bytes copied between device and staging
  std::uint64_t bytes_handed = 0;    // this iteration: bytes not copied, handed over
};

}  // namespace memweave
