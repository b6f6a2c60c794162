// The Unified Tensor Pool and recomputation in the executor: offload (vDNN-like), utp
// (tensor cache + offload/prefetch), recompute (cost-aware) and all. Oracle: bit-identical to the
// baseline on unlimited memory at every budget that runs; bytes moved only when they must be, equal
// in plan and train; faults reported with the tensor named and nothing lost.
#include <filesystem>
#include <map>

#include "engine_test_util.hpp"
#include "memweave/alloc/trace.hpp"
#include "memweave/core/error.hpp"
#include "memweave/engine/network_builder.hpp"
#include "support/static_tls_reexec.hpp"

MEMWEAVE_REEXEC_WITH_STATIC_TLS();

namespace memweave {
namespace {

using test::policy_options;

policy_report plan_report(const network& net, const executor_options& o) {
  auto dev = test::make_test_device("null", std::size_t{1} << 40);
  executor ex(net, *dev, o);
  ex.run_iteration(nullptr, 0);
  return ex.report();
}

// Whether `o` runs on the planner. Fitting is not monotonic in the budget (fragmentation
// can make a larger arena fail where a smaller one runs), so budgets are checked one by one.
bool plan_fits(const network& net, const executor_options& o) {
  try {
    (void)plan_report(net, o);
    return true;
  } catch (const out_of_memory&) {
    return false;
  }
}

class utp_oracle_test : public ::testing::TestWithParam<std::string> {};

TEST_P(utp_oracle_test, every_policy_is_bit_identical_to_baseline_down_to_the_smallest_budget) {
  const network net = test::small_zoo(GetParam());
  const auto reference = test::train(net, policy_options("baseline"), 2);
  for (const std::string policy : {"offload", "utp", "recompute", "all"}) {
    const std::size_t smallest = test::smallest_budget(net, policy_options(policy));
    const std::size_t ample = plan_report(net, policy_options(policy)).peak_bytes * 2;
    int ran = 0;
    for (std::size_t budget : {ample, (ample / 2 + smallest) / 2, smallest}) {
      if (!plan_fits(net, policy_options(policy, budget))) continue;
      ++ran;
      SCOPED_TRACE(GetParam() + " " + policy + " budget " + std::to_string(budget));
      // A throttled link makes copies slow enough to be in flight while kernels run.
      for (double gbps : {0.0, 4.0}) {
        const auto got = test::train(net, policy_options(policy, budget), 2, gbps);
        test::expect_bit_identical(reference, got,
                                   GetParam() + " " + policy + " budget " + std::to_string(budget) +
                                       " link " + std::to_string(gbps));
      }
    }
    EXPECT_GE(ran, 2) << policy;  // the ample and the smallest budget always run
  }
}

INSTANTIATE_TEST_SUITE_P(zoo, utp_oracle_test,
                         ::testing::Values("alexnet", "vgg16", "resnet50", "inception_v4",
                                           "densenet121"));

TEST(utp_test, random_dags_are_bit_identical_under_the_smallest_budget_of_each_policy) {
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    const network net = test::oracle_random_dag(seed);
    const auto reference = test::train(net, policy_options("baseline"), 2);
    for (const std::string policy : {"utp", "recompute", "all"}) {
      const std::size_t smallest = test::smallest_budget(net, policy_options(policy));
      SCOPED_TRACE(net.name() + " " + policy + " budget " + std::to_string(smallest));
      test::expect_bit_identical(reference,
                                 test::train(net, policy_options(policy, smallest), 2, 2.0),
                                 net.name() + " " + policy);
    }
  }
}

// At full size the step loop meets situations the small networks do not (rebuilds far from
// where the static plan would put them, deep eviction chains): plan every zoo network under
// every moving policy down to its smallest budget; an internal inconsistency would throw.
TEST(utp_test, every_full_size_zoo_network_plans_down_to_its_smallest_budget) {
  for (const auto& [name, batch] :
       std::vector<std::pair<std::string, std::int64_t>>{{"alexnet", 128},
                                                         {"vgg16", 16},
                                                         {"resnet50", 16},
                                                         {"resnet101", 8},
                                                         {"inception_v4", 8},
                                                         {"densenet121", 8}}) {
    zoo_options z;
    z.batch = batch;
    const network net = make_network(name, z);
    for (const std::string policy : {"offload", "utp", "recompute", "all"}) {
      executor_options o = policy_options(policy, 0, "dynamic");
      o.host_pool_bytes = std::size_t{64} << 30;
      const std::size_t smallest = test::smallest_budget(net, o);
      const policy_report r = plan_report(net, [&] {
        executor_options t = o;
        t.budget_bytes = smallest;
        return t;
      }());
      EXPECT_TRUE(r.fits) << name << " " << policy;
      EXPECT_LE(r.peak_bytes, smallest) << name << " " << policy;
    }
  }
}

TEST(utp_test, recompute_replays_cheap_layers_and_all_only_when_the_budget_requires) {
  const network net = test::small_zoo("resnet50", 4);
  const policy_report recompute = plan_report(net, policy_options("recompute"));
  EXPECT_GT(recompute.recomputations, 0u);
  EXPECT_LT(recompute.peak_live_bytes,
            plan_report(net, policy_options("liveness")).peak_live_bytes);
  const policy_report ample = plan_report(net, policy_options("all"));
  EXPECT_EQ(ample.recomputations, 0u);
  EXPECT_EQ(ample.bytes_offloaded, 0u);
  const std::size_t smallest = test::smallest_budget(net, policy_options("all"));
  const policy_report tight = plan_report(net, policy_options("all", smallest));
  EXPECT_GT(tight.recomputations + tight.bytes_offloaded, 0u);
  // all engages only when needed, and then runs where plain liveness cannot.
  EXPECT_LT(smallest, test::smallest_budget(net, policy_options("liveness")));
}

TEST(utp_test, a_budget_that_fits_moves_nothing_and_a_tight_one_moves_the_same_in_plan_and_train) {
  const network net = test::small_zoo("resnet50", 4);
  const policy_report ample = plan_report(net, policy_options("utp"));
  EXPECT_EQ(ample.bytes_offloaded, 0u);
  EXPECT_EQ(ample.bytes_prefetched, 0u);
  EXPECT_EQ(ample.evictions, 0u);
  const std::size_t smallest = test::smallest_budget(net, policy_options("utp"));
  const std::size_t liveness_peak = plan_report(net, policy_options("liveness")).peak_bytes;
  EXPECT_LT(smallest, liveness_peak);  // utp runs where liveness alone cannot
  const policy_report planned = plan_report(net, policy_options("utp", smallest));
  EXPECT_GT(planned.bytes_offloaded, 0u);
  auto dev = test::make_test_device("host");
  auto data = make_synthetic_source(net[0].output_shape, net.classes(), 1);
  executor ex(net, *dev, policy_options("utp", smallest));
  ex.run_iteration(data.get(), 0);
  const policy_report trained = ex.report();
  EXPECT_EQ(trained.bytes_offloaded, planned.bytes_offloaded);
  EXPECT_EQ(trained.bytes_prefetched, planned.bytes_prefetched);
  EXPECT_EQ(trained.evictions, planned.evictions);
  ASSERT_EQ(trained.steps.size(), planned.steps.size());
  for (std::size_t s = 0; s < trained.steps.size(); ++s) {
    EXPECT_EQ(trained.steps[s].heap_bytes, planned.steps[s].heap_bytes) << "step " << s;
  }
}

// The reported peak is the heap's: the most its trace ever holds live (block-rounded). The
// steps' records sampled the heap after each step's placement, so what a step allocated later
// (prefetches for later steps) and the iteration's end (the parameters brought back) were
// missed: 7.79 MiB reported where the heap held 7.85 (session 47's hostile run).
TEST(utp_test, the_reported_peak_is_the_most_the_heap_held) {
  // 1000 classes: the FC's parameters, most of the persistent bytes, leave the device.
  const network net = test::zoo_net("resnet:1,1,1,1", 4, 128, 0.25, 1000);
  for (const std::string policy : {"offload", "utp", "recompute", "all"}) {
    const std::size_t smallest = test::smallest_budget(net, policy_options(policy));
    for (std::size_t budget : {smallest, std::max(smallest, std::size_t{8} << 20)}) {
      SCOPED_TRACE(policy + " budget " + std::to_string(budget));
      const std::string trace = (std::filesystem::temp_directory_path() /
                                 ("memweave_peak_" + policy + "_" + std::to_string(budget)))
                                    .string();
      executor_options o = policy_options(policy, budget);
      o.heap.trace_path = trace;
      policy_report reported;
      {
        auto dev = test::make_test_device("null", std::size_t{1} << 40);
        executor ex(net, *dev, o);
        ex.run_iteration(nullptr, 0);
        reported = ex.report();
      }  // the heap closes its trace
      std::size_t block = 0;
      std::map<std::uint64_t, std::uint64_t> live;
      std::uint64_t held = 0, most = 0;
      for (const trace_event& e : read_trace(trace, &block)) {
        const std::uint64_t bytes = (e.bytes + block - 1) / block * block;
        if (e.op == trace_op::alloc) {
          live[e.offset] = bytes;
          most = std::max(most, held += bytes);
        } else if (const auto it = live.find(e.offset); it != live.end()) {
          held -= it->second;
          live.erase(it);
        }
      }
      std::filesystem::remove(trace);
      EXPECT_EQ(reported.peak_bytes, most);
    }
  }
}

// A chain where the paper's model applies: CONV checkpoints each followed by a cheap ReLU,
// every output read in backward. With offload, the checkpoint outputs leave the device after
// their last forward use, so the peak drops by about their bytes.
TEST(utp_test, offload_peak_follows_the_papers_model_on_a_chain) {
  network_builder b("chain");
  auto x = b.data({8, 4, 16, 16}, 4);
  conv_params c;
  c.out_channels = 8;
  c.kernel_h = c.kernel_w = 3;
  c.pad_h = c.pad_w = 1;
  for (int i = 0; i < 6; ++i) x = b.relu(b.conv(x, c));
  b.softmax_loss(b.fc(x, fc_params{4, true}));
  const network net = std::move(b).build();
  executor_options o = policy_options("offload", 0, "none");
  o.offload_lag = 1;
  const policy_report off = plan_report(net, o);
  const policy_report live = plan_report(net, policy_options("liveness", 0, "none"));
  // Offloaded: the inputs of the six CONVs (the images, 32 KiB, and five ReLU outputs of
  // 8x8x16x16 floats, 64 KiB). At the end of forward, the paper's model keeps only the
  // non-checkpoint tensors on the device: all of them are gone but the last one or two
  // still in flight (lag 1), so the peak is lower by at least four of them.
  const std::size_t relu_output = 8 * 8 * 16 * 16 * sizeof(float);
  const std::size_t images = 8 * 4 * 16 * 16 * sizeof(float);
  EXPECT_EQ(off.bytes_offloaded, images + 5 * relu_output);
  EXPECT_EQ(off.bytes_prefetched, off.bytes_offloaded);
  EXPECT_LE(off.peak_live_bytes + 4 * relu_output, live.peak_live_bytes)
      << "offload peak " << off.peak_live_bytes << ", liveness peak " << live.peak_live_bytes;
}

// Runs one utp iteration of a small ResNet at its smallest budget with `faults` injected;
// returns the message of the E it must throw, after checking the parameters stay readable.
template <class E>
std::string fault_message(const transfer_faults& faults) {
  const network net = test::small_zoo("resnet50", 4);
  const std::size_t smallest = test::smallest_budget(net, policy_options("utp"));
  auto dev = test::make_test_device("host");
  auto data = make_synthetic_source(net[0].output_shape, net.classes(), 1);
  executor ex(net, *dev, policy_options("utp", smallest));
  ex.set_transfer_faults(faults);
  try {
    ex.run_iteration(data.get(), 0);
  } catch (const E& e) {
    EXPECT_FALSE(ex.read_persistent().empty());  // on the device or in host memory: readable
    return e.what();
  }
  ADD_FAILURE() << "the injected fault went unnoticed";
  return {};
}

TEST(utp_test, a_failed_copy_is_an_error_naming_the_tensor_and_loses_nothing) {
  transfer_faults f;
  f.fail_copy = 1;
  const std::string msg = fault_message<device_error>(f);
  EXPECT_NE(msg.find("."), std::string::npos) << msg;  // a tensor name ("layer.y")
}

TEST(utp_test, host_pool_exhaustion_is_an_error_with_the_numbers) {
  transfer_faults f;
  f.fail_host_allocation = 1;
  const std::string msg = fault_message<out_of_memory>(f);
  EXPECT_NE(msg.find("host"), std::string::npos) << msg;
}

// Host memory found full says so, once, naming where: placing the parameters before the first
// iteration, and a workspace's eviction at a step. The first read "out of budget" with a second
// heap description spliced in, the second "transfer_engine: cannot offload ..." alone
// (session 47's hostile run).
TEST(utp_test, host_memory_running_out_says_so_and_where) {
  const network net = test::zoo_net("resnet:1,1,1,1", 32, 32, 0.5, 10);
  auto failure = [&](std::size_t host_pool) {
    executor_options o = policy_options("utp", 7372800, "fixed:direct");
    o.host_pool_bytes = host_pool;
    try {
      auto dev = test::make_test_device("null", std::size_t{1} << 40);
      executor ex(net, *dev, o);
      ex.run_iteration(nullptr, 0);
    } catch (const out_of_memory& e) {
      return std::string(e.what());
    }
    return std::string("(ran)");
  };
  const std::string before = failure(std::size_t{8} << 20);
  EXPECT_TRUE(before.starts_with("host memory ran out before the first iteration: tensor "))
      << before;
  EXPECT_EQ(before.find("device heap"), std::string::npos) << before;
  const std::string at_step = failure(std::size_t{28} << 20);
  EXPECT_TRUE(at_step.starts_with("host memory ran out at step ")) << at_step;
  EXPECT_NE(at_step.find("no host memory for its host copy"), std::string::npos) << at_step;
}

// all: where host memory runs out, a value there that a replay rebuilds (a CONV's output
// too) gives it back, and the step that reads it replays its chain: at the least host pool
// all trains in, utp (which cannot drop) runs out, and all is bit-identical to baseline.
TEST(utp_test, all_gives_back_host_values_it_can_rebuild_when_host_memory_runs_out) {
  const network net = test::host_heavy_resnet50();
  // Near its smallest budget all runs on the cache alone (its schedule does not fit there).
  executor_options o = policy_options("all", 0, "fixed:direct");
  o.host_pool_bytes = std::size_t{256} << 20;
  o.budget_bytes = test::smallest_budget(net, o) * 11 / 10;
  const std::size_t least = test::least_host_pool_mib(8, 128, 2, [&](std::size_t mib) {
    o.host_pool_bytes = mib << 20;
    return plan_fits(net, o);
  });
  ASSERT_GT(least, 0u);
  o.host_pool_bytes = least << 20;
  executor_options utp = o;
  utp.policy = executor_policy::parse("utp");
  EXPECT_FALSE(plan_fits(net, utp)) << "host memory is not the limit at " << least << " MiB";
  EXPECT_GT(plan_report(net, o).host_drops, 0u) << least << " MiB";
  const auto reference = test::train(net, policy_options("baseline", 0, "fixed:direct"), 2);
  expect_bit_identical(
      reference, test::train(net, o, 2),
      "resnet50 near its smallest budget, host pool " + std::to_string(least) + " MiB");
}

TEST(utp_test, verify_mode_checks_every_transfer_and_changes_no_result) {
  const network net = test::small_zoo("vgg16");
  const auto reference = test::train(net, policy_options("baseline"), 2);
  executor_options o = policy_options("offload");
  o.verify_transfers = true;
  test::expect_bit_identical(reference, test::train(net, o, 2, 4.0), "verified offload");
}

}  // namespace
}  // namespace memweave
