// `plan --ranks`: what data parallelism adds to an iteration on N devices, modelled. The
// gradient buckets are the executor's (tensor_table.hpp); each is reduced by a ring
// allreduce, 2(N-1)/N of its bytes over the network plus 2(N-1) message latencies, one
// bucket at a time, starting when backward (the cost model's step times) has completed it.
// What runs past the end of backward is the exposed communication.
#pragma once

#include <cstddef>

#include "memweave/engine/cost_model.hpp"
#include "memweave/engine/network.hpp"

namespace memweave {

struct data_parallel_estimate {
  int ranks = 1;
  std::size_t gradient_bytes = 0;  ///< reduced per iteration
  std::size_t buckets = 0;
  double compute_s = 0.0;    ///< forward + backward in the model
  double allreduce_s = 0.0;  ///< the rings back to back
  double exposed_s = 0.0;    ///< of which after the end of backward (not hidden)
};

/// The estimate for `net` (one rank's share of the batch) on `ranks` devices linked at
/// `network_bytes_per_s` (> 0) with `latency_s` per ring message.
data_parallel_estimate estimate_data_parallel(const network& net, const cost_model& model,
                                              int ranks, double network_bytes_per_s,
                                              std::size_t bucket_bytes, double latency_s = 5e-6);

}  // namespace memweave
