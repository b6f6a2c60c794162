// Data-parallel training on the host backend, run by every rank under mpirun (tests/comm/
// CMakeLists.txt starts it with 2 and with 4 ranks). Every rank runs the same cases in the
// same order, so their collectives match.
//
// The network has no BN: BN normalizes with each rank's own batch statistics (as PyTorch DDP
// without SyncBatchNorm), so one process and N ranks would compute different functions. It
// has a DROPOUT: each rank draws the masks one process draws at its images' positions.
//
// Tolerance against one process (float32 summation order): a weight's gradient is a sum of
// m = B*H*W terms (m <= 6*8*8 = 384 here); one process and N ranks add them in different
// orders (each rank its slice, then the ring's fixed order), which changes the sum by at most
// gamma_m = m*eps/(1 - m*eps) ~ 4.6e-5 of the sum of the terms' magnitudes (eps = 2^-24).
// That difference reaches a weight through lr = 0.05 per iteration, plus momentum (factor
// < 1/(1-0.9) = 10 over the run), so after 3 iterations, with gradients' absolute sums below
// 1, each weight differs by less than 3 * 0.05 * 10 * 4.6e-5 = 7e-5: the bound used, 1e-4.
// The loss (a mean of B per-image losses, each ~ log(classes)) within 1e-4 relative likewise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>

#include "memweave/comm/communicator.hpp"
#include "memweave/device/device.hpp"
#include "memweave/engine/executor.hpp"
#include "memweave/engine/network_builder.hpp"
#include "support/static_tls_reexec.hpp"

MEMWEAVE_REEXEC_WITH_STATIC_TLS();

namespace memweave {
namespace {

communicator& world() {
  static const std::unique_ptr<communicator> comm = make_mpi_communicator();
  return *comm;
}

constexpr std::int64_t k_global_batch = 6;  // 4 ranks: shares of 1, 2, 1, 2 images
constexpr int k_iterations = 3;

network chain(std::int64_t batch) {
  network_builder b("chain");
  auto x = b.data({batch, 3, 8, 8}, 5);
  conv_params c;
  c.out_channels = 6;
  c.kernel_h = c.kernel_w = 3;
  c.pad_h = c.pad_w = 1;
  x = b.relu(b.conv(x, c));
  x = b.relu(b.conv(x, c));
  x = b.pool(x, pool_params{});
  x = b.dropout(b.relu(b.conv(x, c)));
  b.softmax_loss(b.fc(x, fc_params{5, true}));
  return std::move(b).build();
}

executor_options options(const std::string& policy, std::size_t budget, communicator* comm,
                         std::int64_t first = 0) {
  executor_options o;
  o.policy = executor_policy::parse(policy);
  o.budget_bytes = budget;
  o.threads = 1;
  o.conv_ws = conv_ws_options::parse("fixed:im2col_image", "test");
  o.host_pool_bytes = std::size_t{64} << 20;
  o.learning_rate = 0.05f;
  o.exact = true;
  o.comm = comm;
  o.global_batch = k_global_batch;
  o.first_sample = first;
  o.bucket_bytes = 2048;  // several buckets even in this small network
  return o;
}

struct result {
  std::vector<double> losses;
  std::vector<std::vector<float>> persistent;
  double reduce_s = 0;
  std::uint64_t moved = 0;  // bytes offloaded, evictions and replays: what the policy did
};

// Trains this rank's share of the global batch (the whole batch without a communicator).
result train(const std::string& policy, std::size_t budget, communicator* comm) {
  const int ranks = comm ? comm->size() : 1, rank = comm ? comm->rank() : 0;
  const std::int64_t first = rank * k_global_batch / ranks;
  const std::int64_t mine = (rank + 1) * k_global_batch / ranks - first;
  const network net = chain(mine);
  device_options d;
  d.kind = "host";
  d.capacity_bytes = std::size_t{256} << 20;
  auto dev = make_device(d);
  auto whole = make_synthetic_source(net[net.data_layer()].output_shape, net.classes(), 7);
  auto slice = make_batch_slice(*whole, k_global_batch, first);
  result r;
  try {
    executor ex(net, *dev, options(policy, budget, comm, first));
    for (int i = 0; i < k_iterations; ++i) r.losses.push_back(ex.run_iteration(slice.get(), i));
    r.persistent = ex.read_persistent();
    const policy_report rep = ex.report();
    r.reduce_s = rep.allreduce_seconds;
    r.moved = rep.bytes_offloaded + rep.evictions + rep.recomputations;
  } catch (const std::exception& e) {
    // The other ranks would wait for this one in their next collective: end the job.
    std::fprintf(stderr, "rank %d: %s budget %zu: %s\n", world().rank(), policy.c_str(), budget,
                 e.what());
    world().fail(e.what(), 1);
    throw;
  }
  return r;
}

void expect_bit_identical(const result& a, const result& b, const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (std::size_t i = 0; i < a.losses.size(); ++i) EXPECT_EQ(a.losses[i], b.losses[i]) << what;
  ASSERT_EQ(a.persistent.size(), b.persistent.size());
  for (std::size_t t = 0; t < a.persistent.size(); ++t) {
    EXPECT_EQ(0, std::memcmp(a.persistent[t].data(), b.persistent[t].data(),
                             a.persistent[t].size() * sizeof(float)))
        << what << ": persistent tensor #" << t << " on rank " << world().rank();
  }
}

TEST(data_parallel_test, matches_one_process_within_the_summation_order_tolerance) {
  ASSERT_GT(world().size(), 1) << "run under mpirun with several ranks";
  const result one = train("baseline", 0, nullptr);
  const result dp = train("baseline", 0, &world());
  EXPECT_GT(dp.reduce_s, 0.0);
  ASSERT_EQ(one.losses.size(), dp.losses.size());
  for (std::size_t i = 0; i < one.losses.size(); ++i) {
    EXPECT_NEAR(dp.losses[i], one.losses[i], 1e-4 * std::abs(one.losses[i])) << "iteration " << i;
  }
  ASSERT_EQ(one.persistent.size(), dp.persistent.size());
  double worst = 0;
  for (std::size_t t = 0; t < one.persistent.size(); ++t) {
    for (std::size_t i = 0; i < one.persistent[t].size(); ++i) {
      worst = std::max(worst,
                       std::abs(static_cast<double>(dp.persistent[t][i]) - one.persistent[t][i]));
    }
  }
  EXPECT_LE(worst, 1e-4);
  // It trained: the comparison is not of the initial values.
  EXPECT_NE(one.losses.front(), one.losses.back());
  std::printf("rank %d: largest weight difference to one process %.3g\n", world().rank(), worst);
}

TEST(data_parallel_test, is_bit_identical_run_to_run_and_across_ranks) {
  const result a = train("liveness", 0, &world());
  const result b = train("liveness", 0, &world());
  expect_bit_identical(a, b, "run to run");
  // Every rank ends with the same weights (the first tensor compared through rank 0's).
  std::vector<double> mine(a.persistent[0].begin(), a.persistent[0].end());
  const std::vector<double> all = world().allgather(mine);
  for (int r = 1; r < world().size(); ++r) {
    EXPECT_TRUE(std::equal(mine.begin(), mine.end(), all.begin() + r * mine.size()))
        << "rank " << r << " differs from rank 0";
  }
}

TEST(data_parallel_test, every_policy_keeps_the_oracle_with_the_same_ranks) {
  const result base = train("baseline", 0, &world());
  // The budget each rank's liveness plan needs, less a tenth: utp and all must move or drop
  // tensors (the buckets' gradients, held for their reductions, stay).
  device_options d;
  d.kind = "null";
  auto null_dev = make_device(d);
  const int rank = world().rank(), ranks = world().size();
  const std::int64_t mine = (rank + 1) * k_global_batch / ranks - rank * k_global_batch / ranks;
  const network net = chain(mine);
  executor_options probe_options = options("liveness", 0, nullptr);
  probe_options.ranks = ranks;
  executor probe(net, *null_dev, probe_options);
  probe.run_iteration(nullptr, 0);
  const std::size_t live_peak = probe.report().peak_bytes;
  for (const char* policy : {"liveness", "offload", "utp", "recompute", "all"}) {
    const bool tight = std::string(policy) == "utp" || std::string(policy) == "all";
    const result r = train(policy, tight ? live_peak * 9 / 10 : 0, &world());
    expect_bit_identical(base, r, policy);
    if (std::string(policy) != "liveness") {
      EXPECT_GT(r.moved, 0u) << policy << " did nothing";
    }
  }
}

}  // namespace
}  // namespace memweave
