// The ring allreduce model of `plan --ranks` (data_parallel_model.hpp).
#include "memweave/engine/data_parallel_model.hpp"

#include <algorithm>
#include <vector>

#include "engine/runtime/model_time.hpp"
#include "memweave/core/error.hpp"
#include "memweave/engine/layer_memory.hpp"
#include "memweave/engine/route.hpp"
#include "memweave/engine/tensor_table.hpp"

namespace memweave {

data_parallel_estimate estimate_data_parallel(const network& net, const cost_model& model,
                                              int ranks, double network_bytes_per_s,
                                              std::size_t bucket_bytes, double latency_s) {
  MEMWEAVE_EXPECTS(ranks >= 1, "ranks must be at least 1, got " + std::to_string(ranks));
  MEMWEAVE_EXPECTS(network_bytes_per_s > 0, "the network bandwidth must be positive");
  const route r(net);
  std::vector<gradient_bucket> buckets = make_gradient_buckets(net, r, bucket_bytes);
  const tensor_table table(net, r, buckets);
  const layer_memory memory(table);
  // When each step ends, the steps run back to back at the model's times.
  std::vector<double> end(r.step_count());
  double t = 0;
  for (std::size_t s = 0; s < r.step_count(); ++s) {
    const route_step st = r.at(s);
    if (table.has_work(s))
      t += model_seconds(model, net, memory, net[st.layer], st.direction == pass::forward);
    end[s] = t;
  }
  data_parallel_estimate e;
  e.ranks = ranks;
  e.compute_s = t;
  e.buckets = buckets.size();
  if (ranks == 1) return e;
  const double n = ranks;
  double ring_free = 0;
  for (const gradient_bucket& b : buckets) {
    e.gradient_bytes += b.bytes;
    const double ring = 2 * (n - 1) / n * static_cast<double>(b.bytes) / network_bytes_per_s +
                        2 * (n - 1) * latency_s;
    e.allreduce_s += ring;
    ring_free = std::max(ring_free, end[b.close_step]) + ring;
  }
  e.exposed_s = std::max(0.0, ring_free - t);
  return e;
}

}  // namespace memweave
