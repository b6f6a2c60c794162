// What data parallelism needs without MPI: the one-rank communicator, a rank's slice of the
// global batch, and the gradient buckets' place in the tensor table (no mpirun here).
#include <gtest/gtest.h>

#include <vector>

#include "memweave/comm/communicator.hpp"
#include "memweave/engine/data_parallel_model.hpp"
#include "memweave/engine/data_source.hpp"
#include "memweave/engine/liveness.hpp"
#include "memweave/engine/network_builder.hpp"
#include "memweave/engine/tensor_table.hpp"
#include "memweave/engine/zoo.hpp"

namespace memweave {
namespace {

TEST(single_communicator_test, one_rank_scales_in_place_and_gathers_itself) {
  const auto comm = make_single_communicator();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  device_options d;
  d.kind = "host";
  auto dev = make_device(d);
  std::vector<float> g{1.0f, 2.0f, 4.0f};
  stream& s = dev->get_stream(stream_role::compute);
  auto r = comm->start_allreduce({std::span<float>(g)}, 0.5f, s);
  r->wait_on(s);
  s.synchronize();
  EXPECT_EQ(g, (std::vector<float>{0.5f, 1.0f, 2.0f}));
  const double v[] = {3.0, 4.0};
  EXPECT_EQ(comm->allgather(v), (std::vector<double>{3.0, 4.0}));
}

TEST(batch_slice_test, a_slice_is_those_positions_of_the_global_batch) {
  const shape4 image{1, 3, 4, 4};
  const std::int64_t per = image.per_image();
  auto whole = make_synthetic_source(image, 5, 3);
  std::vector<float> all(7 * per), all_labels(7);
  whole->fill(2, 7, all.data(), all_labels.data());
  auto slice = make_batch_slice(*whole, 7, 3);
  std::vector<float> part(4 * per), part_labels(4);
  slice->fill(2, 4, part.data(), part_labels.data());
  EXPECT_TRUE(std::equal(part.begin(), part.end(), all.begin() + 3 * per));
  EXPECT_TRUE(std::equal(part_labels.begin(), part_labels.end(), all_labels.begin() + 3));
  EXPECT_THROW(slice->fill(2, 5, part.data(), part_labels.data()), invalid_argument);
}

TEST(gradient_bucket_test, a_buckets_gradients_live_until_its_update_step) {
  zoo_options z;
  z.batch = 2;
  z.image_side = 32;
  z.classes = 5;
  z.width_scale = 0.0625;
  const network net = make_network("resnet:1,1,1,1", z);
  const route r(net);
  const auto buckets = make_gradient_buckets(net, r, 4096);
  ASSERT_GT(buckets.size(), 2u);
  std::size_t layers = 0;
  for (const layer& l : net.layers()) layers += l.parameter_count() > 0 ? 1 : 0;
  std::size_t bucketed = 0;
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    bucketed += buckets[k].layers.size();
    EXPECT_LT(buckets[k].close_step, buckets[k].update_step);
    if (k + 1 < buckets.size()) {
      EXPECT_GE(buckets[k].bytes, 4096u);
    }
  }
  EXPECT_EQ(bucketed, layers);
  EXPECT_EQ(buckets.back().update_step, r.step_count() - 1);

  const tensor_table plain(net, r);
  const tensor_table deferred(net, r, buckets);
  const liveness lp(plain), ld(deferred);
  for (const gradient_bucket& b : buckets) {
    for (layer_id l : b.layers) {
      for (tensor_id g : deferred.of(l).param_grads) {
        EXPECT_EQ(ld.last_use(g), b.update_step) << deferred[g].name;
        EXPECT_LT(lp.last_use(g), b.update_step) << plain[g].name;
      }
    }
  }
  // The deferred gradients cost memory: the liveness peak grows.
  EXPECT_GT(ld.plan(memory_policy::liveness).peak_bytes,
            lp.plan(memory_policy::liveness).peak_bytes);
}

}  // namespace
}  // namespace memweave

namespace memweave {
namespace {

TEST(data_parallel_model_test, the_ring_moves_two_n_minus_one_over_n_of_the_gradients) {
  zoo_options z;
  z.batch = 4;
  z.image_side = 32;
  z.classes = 10;
  z.width_scale = 0.25;
  const network net = make_network("resnet:1,1,1,1", z);
  const cost_model m;
  const data_parallel_estimate one = estimate_data_parallel(net, m, 1, 12.5e9, 1 << 20);
  EXPECT_EQ(one.allreduce_s, 0.0);
  EXPECT_EQ(one.exposed_s, 0.0);
  EXPECT_GT(one.compute_s, 0.0);
  const data_parallel_estimate two = estimate_data_parallel(net, m, 2, 12.5e9, 1 << 20, 0);
  const data_parallel_estimate eight = estimate_data_parallel(net, m, 8, 12.5e9, 1 << 20, 0);
  EXPECT_GT(two.gradient_bytes, 0u);
  EXPECT_DOUBLE_EQ(two.allreduce_s, static_cast<double>(two.gradient_bytes) / 12.5e9);
  EXPECT_DOUBLE_EQ(eight.allreduce_s,
                   2 * 7.0 / 8 * static_cast<double>(two.gradient_bytes) / 12.5e9);
  // Some is hidden behind backward, never more than all of it.
  EXPECT_LE(eight.exposed_s, eight.allreduce_s);
  EXPECT_GT(eight.exposed_s, 0.0);
  EXPECT_THROW(estimate_data_parallel(net, m, 0, 12.5e9, 1 << 20), invalid_argument);
}

}  // namespace
}  // namespace memweave
