// The executor's memory accounting, budgets and training behaviour.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <stdexcept>

#include "engine/runtime/conv_selection.hpp"
#include "engine_test_util.hpp"
#include "memweave/core/error.hpp"
#include "memweave/engine/network_builder.hpp"

namespace memweave {
namespace {

std::string error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

executor_options options_for(const std::string& p, std::size_t budget = 0,
                             const std::string& conv_ws = "fixed:im2col_image") {
  executor_options o;
  o.policy = executor_policy::parse(p);
  o.budget_bytes = budget;
  o.threads = 2;
  o.conv_ws = conv_ws_options::parse(conv_ws, "test");
  return o;
}

TEST(executor_test, measured_bytes_equal_the_liveness_plan_at_every_step) {
  const network net = test::small_zoo("resnet50");
  for (std::string policy : {"baseline", "liveness"}) {
    auto dev = test::make_test_device("host");
    auto data = make_synthetic_source(net[0].output_shape, net.classes(), 1);
    executor ex(net, *dev, options_for(policy));
    ex.run_iteration(data.get(), 0);
    ASSERT_EQ(ex.steps().size(), ex.plan().steps.size());
    for (std::size_t s = 0; s < ex.steps().size(); ++s) {
      // The workspace is taken at the step, outside the plan.
      EXPECT_EQ(ex.steps()[s].bytes_live,
                ex.plan().steps[s].bytes_live + ex.steps()[s].workspace_bytes)
          << "step " << s;
      EXPECT_EQ(static_cast<std::size_t>(ex.steps()[s].tensors_live),
                ex.plan().steps[s].tensors_live)
          << "step " << s;
      EXPECT_GE(ex.steps()[s].heap_bytes, ex.steps()[s].bytes_live) << "step " << s;
    }
    EXPECT_GE(ex.report().peak_live_bytes, ex.plan().peak_bytes);
  }
}

TEST(executor_test, plan_on_null_and_train_on_host_agree_on_every_step) {
  const network net = test::small_zoo("inception_v4");
  for (std::string policy : {"baseline", "liveness"}) {
    auto host = test::make_test_device("host");
    auto null = test::make_test_device("null");
    auto data = make_synthetic_source(net[0].output_shape, net.classes(), 1);
    executor trained(net, *host, options_for(policy, 512u << 20));
    executor planned(net, *null, options_for(policy, 512u << 20));
    trained.run_iteration(data.get(), 0);
    planned.run_iteration(nullptr, 0);
    ASSERT_EQ(trained.steps().size(), planned.steps().size());
    for (std::size_t s = 0; s < trained.steps().size(); ++s) {
      const auto& a = trained.steps()[s];
      const auto& b = planned.steps()[s];
      EXPECT_EQ(a.bytes_live, b.bytes_live) << "step " << s;
      EXPECT_EQ(a.heap_bytes, b.heap_bytes) << "step " << s;
      EXPECT_EQ(a.tensors_live, b.tensors_live) << "step " << s;
      EXPECT_EQ(a.layer, b.layer);
    }
    EXPECT_GT(planned.report().seconds_per_iteration, 0.0);  // the cost model ran
  }
}

TEST(executor_test, liveness_peak_is_below_baseline_and_at_least_the_largest_layer) {
  const network net = test::small_zoo("vgg16");
  auto dev = test::make_test_device("null");
  executor base(net, *dev, options_for("baseline"));
  base.run_iteration(nullptr, 0);
  auto dev2 = test::make_test_device("null");
  executor live(net, *dev2, options_for("liveness"));
  live.run_iteration(nullptr, 0);
  EXPECT_LT(live.report().peak_live_bytes, base.report().peak_live_bytes);
  EXPECT_GE(live.report().peak_live_bytes, live.report().max_layer_bytes);
  EXPECT_EQ(base.plan().peak_bytes,
            base.table().persistent_bytes() + base.table().transient_bytes());
}

TEST(executor_test, loss_falls_on_the_synthetic_task) {
  network_builder b("tiny");
  auto x = b.data({8, 3, 8, 8}, 4);
  conv_params c;
  c.out_channels = 8;
  c.kernel_h = c.kernel_w = 3;
  c.pad_h = c.pad_w = 1;
  auto h = b.relu(b.conv(x, c));
  pool_params p;
  h = b.pool(h, p);
  auto logits = b.fc(h, fc_params{4, true});
  b.softmax_loss(logits);
  const network net = std::move(b).build();
  auto o = options_for("liveness");
  o.learning_rate = 0.05f;
  const auto r = test::train(net, o, 200);
  double first = 0, last = 0;
  for (int i = 0; i < 20; ++i) first += r.losses[i], last += r.losses[r.losses.size() - 1 - i];
  EXPECT_LT(last, 0.5 * first) << "mean loss of the first 20 iterations " << first / 20
                               << ", of the last 20 " << last / 20;
}

// A data source that does not make the network's images is refused before it writes: a
// larger image overran the staging buffer, a smaller one trained on a partly filled batch.
TEST(executor_test, a_data_source_of_another_shape_is_refused) {
  const network net = test::small_zoo("resnet50");
  auto dev = test::make_test_device("host");
  executor ex(net, *dev, options_for("liveness"));
  const shape4 in = net[net.data_layer()].output_shape;
  for (const auto& [shape, classes] :
       {std::pair{shape4{in.n, in.c, in.h * 2, in.w * 2}, net.classes()},
        std::pair{shape4{in.n, 1, in.h, in.w}, net.classes()}, std::pair{in, net.classes() + 1}}) {
    auto data = make_synthetic_source(shape, classes, 1);
    const std::string msg = error_text([&] { (void)ex.run_iteration(data.get(), 0); });
    EXPECT_NE(msg.find("run_iteration: data source"), std::string::npos) << msg;
    EXPECT_NE(msg.find("make the source with the DATA layer's shape and classes"),
              std::string::npos)
        << msg;
    EXPECT_NE(error_text([&] { (void)ex.evaluate(data.get(), 0, 1); }).find("evaluate: data"),
              std::string::npos);
  }
  auto good = make_synthetic_source(in, net.classes(), 1);
  EXPECT_NE(error_text([&] { (void)ex.run_iteration(good.get(), -5); }).find("iteration = -5"),
            std::string::npos);
  EXPECT_NE(error_text([&] {
              (void)ex.evaluate(good.get(), std::numeric_limits<std::int64_t>::max(), 2);
            }).find("past 2^63"),
            std::string::npos);
}

// A source that fails mid-iteration (a file gone): the iteration throws, and the next one
// runs as on an executor that never saw it (the failed step's locks leaked before, and the
// next iteration's frees aborted the process).
TEST(executor_test, an_iteration_after_a_failed_one_runs) {
  struct failing_source final : data_source {
    std::unique_ptr<data_source> inner;
    std::string name() const override { return "failing"; }
    shape4 image_shape() const override { return inner->image_shape(); }
    std::int64_t classes() const override { return inner->classes(); }
    void fill(std::int64_t, std::int64_t, float*, float*) override {
      throw std::runtime_error("the disk went away");
    }
  };
  const network net = test::small_zoo("resnet50");
  const shape4 in = net[net.data_layer()].output_shape;
  for (const char* policy : {"liveness", "utp", "all"}) {
    auto dev = test::make_test_device("host");
    auto fresh_dev = test::make_test_device("host");
    const std::size_t budget = policy == std::string("liveness") ? 0 : 4u << 20;
    executor ex(net, *dev, options_for(policy, budget));
    executor fresh(net, *fresh_dev, options_for(policy, budget));
    failing_source bad;
    bad.inner = make_synthetic_source(in, net.classes(), 1);
    EXPECT_THROW((void)ex.run_iteration(&bad, 0), std::runtime_error) << policy;
    auto data = make_synthetic_source(in, net.classes(), 1);
    EXPECT_EQ(ex.run_iteration(data.get(), 0), fresh.run_iteration(data.get(), 0)) << policy;
  }
}

// Options that were clamped, ignored, or swallowed by `all`'s weighing are refused, naming
// the field (a NaN headroom ran `all` as recompute; split_parts 0 ran as 1).
TEST(executor_test, options_the_run_would_clamp_or_swallow_are_refused) {
  const network net = test::small_zoo("resnet50");
  auto dev = test::make_test_device("host");
  const auto refused = [&](const executor_options& o, const std::string& words) {
    const std::string msg = error_text([&] { executor ex(net, *dev, o); });
    EXPECT_NE(msg.find(words), std::string::npos) << msg;
  };
  executor_options o = options_for("all", 4u << 20);
  o.schedule.headroom = std::numeric_limits<double>::quiet_NaN();
  refused(o, "headroom nan");
  o = options_for("utp", 4u << 20);
  o.split_parts = {1, 0};
  refused(o, "executor_options.split_parts[1] = 0");
  o = options_for("utp", 4u << 20);
  o.split_parts = {1, static_cast<int>(net.batch()) + 1};
  refused(o, "expected 1 to " + std::to_string(net.batch()));
  o = options_for("utp", 4u << 20);
  o.split_parts.assign(route(net).step_count() + 1, 1);
  refused(o, "expected at most one per route step");
  o = options_for("utp", 4u << 20);
  o.channel_parts = {2};  // step 0 is DATA: no channel groups
  refused(o, "executor_options.channel_parts[0] = 2");
  o = options_for("liveness");
  o.ranks = -4;
  refused(o, "executor_options.ranks = -4");
  o = options_for("liveness");
  o.split_regions = 2000;
  refused(o, "executor_options.split_regions = 2000");
  // A budget's heap that grew would take memory past the budget and still say it fits.
  o = options_for("liveness", 4u << 20);
  o.heap.grow_bytes = 1u << 20;
  refused(o, "executor_options.heap.grow_bytes = 1048576 with budget_bytes = 4194304");
  o.budget_bytes = 0;  // no budget: the heap may grow
  EXPECT_NO_THROW(executor(net, *dev, o));
}

TEST(executor_test, the_null_device_charges_the_options_cost_model) {
  const network net = test::small_zoo("resnet50");
  auto seconds = [&](const cost_model& m) {
    auto dev = test::make_test_device("null");
    executor_options o = options_for("liveness", 0, "dynamic");
    o.model = m;
    executor ex(net, *dev, o);
    ex.run_iteration(nullptr, 0);
    return ex.report().seconds_per_iteration;
  };
  const double base = seconds(cost_model{});
  EXPECT_GT(base, 0.0);
  // Everything ten times faster: every step's compute and memory time shrinks tenfold.
  EXPECT_NEAR(seconds(cost_model{120e12, 5000e9, 160e9}), base / 10, base * 1e-9);
  auto dev = test::make_test_device("null");
  executor_options o = options_for("liveness");
  o.model.memory_bytes_per_s = 0;
  EXPECT_NE(error_text([&] { executor ex(net, *dev, o); }).find("executor_options.model"),
            std::string::npos);
}

TEST(executor_test, cost_model_presets_name_the_paper_s_gpu_a_k40_and_an_h100) {
  const cost_model titan = cost_model::preset("titan_xp");
  EXPECT_EQ(titan.flops, cost_model{}.flops);  // the default is the paper's
  EXPECT_EQ(titan.memory_bytes_per_s, cost_model{}.memory_bytes_per_s);
  EXPECT_EQ(titan.link_bytes_per_s, cost_model{}.link_bytes_per_s);
  const cost_model k40 = cost_model::preset("k40"), h100 = cost_model::preset("h100_pcie5");
  EXPECT_LT(k40.flops, titan.flops);
  EXPECT_LT(k40.memory_bytes_per_s, titan.memory_bytes_per_s);
  EXPECT_GT(h100.flops, titan.flops);
  EXPECT_GT(h100.memory_bytes_per_s, titan.memory_bytes_per_s);
  EXPECT_EQ(h100.link_bytes_per_s, 4 * titan.link_bytes_per_s);  // PCIe 5.0 x16
  EXPECT_EQ(cost_model::preset_names(),
            (std::vector<std::string>{"titan_xp", "k40", "h100_pcie5"}));
  EXPECT_NE(error_text([] { (void)cost_model::preset("a100", "--cost-model"); })
                .find("--cost-model 'a100' is not a known device model: expected auto or "
                      "titan_xp, k40, h100_pcie5"),
            std::string::npos);
}

TEST(executor_test, auto_is_the_devices_own_model_where_it_has_one_and_the_default_elsewhere) {
  // A GPU's figures (device_throughput_test reads them off its attributes) make its model;
  // a link it did not time stays the default's.
  const cost_model timed = cost_model::of(device_throughput{66.9e12, 4.8e12, 53e9});
  EXPECT_EQ(timed.flops, 66.9e12);
  EXPECT_EQ(timed.memory_bytes_per_s, 4.8e12);
  EXPECT_EQ(timed.link_bytes_per_s, 53e9);
  EXPECT_EQ(cost_model::of(device_throughput{66.9e12, 4.8e12, 0}).link_bytes_per_s,
            cost_model{}.link_bytes_per_s);
  // The simulated devices stand for no GPU: auto is the default there, as without a device.
  for (const char* kind : {"host", "null"}) {
    auto dev = test::make_test_device(kind);
    EXPECT_FALSE(dev->throughput().has_value()) << kind;
    const cost_model m = cost_model::for_device(*dev);
    EXPECT_EQ(m.flops, cost_model{}.flops) << kind;
    EXPECT_EQ(m.link_bytes_per_s, cost_model{}.link_bytes_per_s) << kind;
  }
  EXPECT_EQ(cost_model::preset("auto").flops, cost_model{}.flops);
}

TEST(executor_test, budget_below_any_policy_is_a_clear_error) {
  const network net = test::small_zoo("resnet50");
  auto dev = test::make_test_device("host");
  const std::string msg =
      error_text([&] { executor ex(net, *dev, options_for("liveness", 64 * 1024)); });
  EXPECT_NE(msg.find("below what policy liveness can run"), std::string::npos) << msg;
  EXPECT_NE(msg.find("raise --budget to at least"), std::string::npos) << msg;
}

TEST(executor_test, budget_larger_than_the_device_is_a_clear_error) {
  const network net = test::small_zoo("resnet50");
  auto dev = test::make_test_device("host", 256u << 20);
  const std::string msg =
      error_text([&] { executor ex(net, *dev, options_for("liveness", 1u << 30)); });
  EXPECT_NE(msg.find("exceeds the device's free memory"), std::string::npos) << msg;
}

// Issue 11: a pool too small for the parameters failed while their initial values were still
// being copied in, and the copies then read freed host buffers and wrote an unmapped arena.
TEST(executor_test, parameters_that_do_not_fit_the_pool_are_an_error_and_nothing_is_touched_after) {
  zoo_options z;
  z.batch = 2;
  z.image_side = 32;
  z.width_scale = 0.25;
  z.classes = 1000;  // 2 MiB of FC weights, as many of momenta: more than the pool holds
  const network net = make_network("resnet:1,1,1,1", z);
  for (const std::string policy : {"liveness", "utp", "all"}) {
    auto dev = test::make_test_device("host", 256u << 20);
    executor_options o = options_for(policy, 0);
    o.heap.pool_bytes = 4u << 20;
    const std::string msg = error_text([&] { executor ex(net, *dev, o); });
    // liveness keeps its parameters on the device: an error naming the tensor; utp/all move
    // the ones that do not fit to host memory, or fail the same way (under ASan either path
    // is checked for touching what it gave back).
    if (policy == "liveness") {
      EXPECT_NE(msg.find("out of budget"), std::string::npos) << msg;
    }
  }
}

// Issue 11: under `ulimit -v`, OpenBLAS retried a failed buffer allocation forever inside the
// first convolution. A child process runs with an address-space limit that leaves no room
// for its buffers: it must end with an error naming the limit, not hang (an alarm kills it).
TEST(executor_test, an_address_space_limit_too_small_for_blas_is_an_error_not_a_hang) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "sanitizers reserve terabytes of address space: no limit can be set";
#else
  const network net = test::small_zoo("resnet50");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(30);
    auto dev = test::make_test_device("host", 64u << 20);
    long pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    // What the process holds now, plus 200 MiB: room for one of OpenBLAS's buffers, not two.
    const rlim_t cap = static_cast<rlim_t>(pages) * 4096 + (rlim_t{200} << 20);
    const rlimit limit{cap, cap};
    if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(3);
    try {
      executor ex(net, *dev, options_for("liveness"));
      auto data = make_synthetic_source(net[net.data_layer()].output_shape, net.classes(), 7);
      ex.run_iteration(data.get(), 0);
    } catch (const out_of_memory& e) {
      _exit(std::string(e.what()).find("ulimit -v") != std::string::npos ? 0 : 4);
    } catch (...) {
      _exit(5);
    }
    _exit(6);  // ran: the limit was not small enough to test anything
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child was killed (signal " << WTERMSIG(status)
                                 << "): it hung or crashed";
  EXPECT_EQ(WEXITSTATUS(status), 0);
#endif
}

TEST(executor_test, baseline_out_of_budget_names_step_and_tensor_where_liveness_fits) {
  const network net = test::small_zoo("vgg16");
  auto null = test::make_test_device("null");
  executor live(net, *null, options_for("liveness"));
  live.run_iteration(nullptr, 0);
  const std::size_t budget = live.report().peak_bytes + (256 << 10);
  auto dev = test::make_test_device("host");
  auto data = make_synthetic_source(net[0].output_shape, net.classes(), 1);
  // Baseline holds every tensor at once: refused before it runs, naming all it holds.
  try {
    executor base(net, *dev, options_for("baseline", budget));
    FAIL() << "baseline fit in the liveness budget";
  } catch (const budget_too_small& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("is below what policy baseline can run vgg16"), std::string::npos) << msg;
    EXPECT_NE(msg.find("plus the tensors live and the fixed:im2col_image workspace of step"),
              std::string::npos)
        << msg;
  }
  executor fits(net, *dev, options_for("liveness", budget));
  EXPECT_TRUE(std::isfinite(fits.run_iteration(data.get(), 0)));
}

// Out of memory in a step (one heap block below the smallest budget liveness runs in: above
// its floor, which holds its tensors but not the heap's layout of them): the message names
// the step and tensor, and the report says how far memory got there, though the step has no
// record (it said peak 0 B).
TEST(executor_test, a_step_out_of_memory_names_itself_and_reports_how_far_memory_got) {
  const network net = test::small_zoo("vgg16");
  // smallest_budget is to 4 KiB: the first block below it that does not run.
  std::size_t budget = test::smallest_budget(net, options_for("liveness"));
  auto dev = test::make_test_device("host");
  auto data = make_synthetic_source(net[0].output_shape, net.classes(), 1);
  std::unique_ptr<executor> ex;
  for (int i = 0; i < 4 && !ex; ++i) {
    budget -= 1024;
    auto tried = std::make_unique<executor>(net, *dev, options_for("liveness", budget));
    try {
      tried->run_iteration(data.get(), 0);
    } catch (const out_of_memory&) {
      ex = std::move(tried);
    }
  }
  ASSERT_NE(ex, nullptr) << "liveness ran 4 KiB below the smallest budget";
  try {
    ex->run_iteration(data.get(), 1);
    FAIL() << "liveness ran in the budget it failed in";
  } catch (const out_of_memory& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("out of budget at step"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tensor"), std::string::npos) << msg;
    EXPECT_GT(e.requested(), e.largest_free_run());
  }
  const policy_report failed = ex->report();
  EXPECT_GT(failed.peak_step, 0);
  EXPECT_GE(failed.peak_bytes, ex->heap().stats().bytes_in_use);
  EXPECT_GT(failed.peak_bytes, budget / 2);
  EXPECT_GT(failed.peak_live_bytes, 0u);
}

std::size_t smallest_budget(const network& net, const std::string& mode) {
  return test::smallest_budget(net, options_for("liveness", 0, mode));
}

TEST(executor_test, tight_budget_shrinks_convolution_workspaces_and_still_runs) {
  const network net = test::small_zoo("resnet50", 4);
  const std::size_t tight = smallest_budget(net, "none");
  {  // On the host backend, with measured times, training runs at that budget.
    auto host = test::make_test_device("host");
    auto data = make_synthetic_source(net[0].output_shape, net.classes(), 1);
    executor ex(net, *host, options_for("liveness", tight, "dynamic"));
    EXPECT_TRUE(std::isfinite(ex.run_iteration(data.get(), 0)));
  }
  // On the null device the model makes larger workspaces faster, so the choice is decided
  // by the memory free alone.
  auto zero_workspace_steps = [&](std::size_t budget) {
    auto dev = test::make_test_device("null", std::size_t{1} << 40);
    executor ex(net, *dev, options_for("liveness", budget, "dynamic"));
    ex.run_iteration(nullptr, 0);
    std::vector<std::size_t> ws;
    for (const auto& r : ex.steps()) {
      EXPECT_LE(r.heap_bytes, budget);
      if (!r.algorithm.empty()) ws.push_back(r.workspace_bytes);
    }
    return ws;
  };
  // Where "none" barely runs, dynamic runs too (it never takes what a step needs); near the
  // peak it settles for smaller workspaces than it takes with room to spare. (That it falls
  // to the no-workspace algorithm when nothing else fits is conv_workspace_selector_test's.)
  const auto tight_ws = zero_workspace_steps(tight);
  const auto ample_ws = zero_workspace_steps(4 * tight);
  ASSERT_EQ(tight_ws.size(), ample_ws.size());
  int smaller = 0;
  for (std::size_t i = 0; i < tight_ws.size(); ++i) {
    EXPECT_LE(tight_ws[i], ample_ws[i]) << "conv step " << i;
    smaller += tight_ws[i] < ample_ws[i];
  }
  EXPECT_GT(smaller, 0);
}

TEST(executor_test, ample_budget_takes_the_fastest_measured_algorithm) {
  const network net = test::small_zoo("resnet50", 8);
  auto dev = test::make_test_device("host");
  auto data = make_synthetic_source(net[0].output_shape, net.classes(), 1);
  executor ex(net, *dev, options_for("liveness", 0, "dynamic"));
  ex.run_iteration(data.get(), 0);
  const auto& selector = ex.workspace_selector();
  EXPECT_GT(selector.measured(), 0u);
  int checked = 0;
  for (const auto& r : ex.steps()) {
    if (r.pass != 'F' || r.algorithm.empty()) continue;
    const layer& l = net[*net.find(r.layer)];
    const std::string key =
        conv_key("host", kernels::host::conv_pass::forward, net[l.inputs[0]].output_shape,
                 std::get<conv_params>(l.params));
    const auto* candidates = selector.cache().find(key);
    ASSERT_NE(candidates, nullptr) << key;
    const conv_candidate* fastest = &candidates->front();
    for (const auto& c : *candidates) {
      if (c.seconds < fastest->seconds ||
          (c.seconds == fastest->seconds && c.workspace_bytes < fastest->workspace_bytes)) {
        fastest = &c;
      }
    }
    EXPECT_EQ(r.algorithm, fastest->algorithm) << r.layer;
    EXPECT_EQ(r.workspace_bytes, fastest->workspace_bytes) << r.layer;
    ++checked;
  }
  EXPECT_GT(checked, 10);
}

TEST(executor_test, max_mode_fails_a_step_whose_workspace_does_not_fit) {
  const network net = test::small_zoo("resnet50", 4);
  auto dev = test::make_test_device("null", std::size_t{1} << 40);
  executor ex(net, *dev, options_for("liveness", smallest_budget(net, "none"), "max"));
  try {
    ex.run_iteration(nullptr, 0);
    FAIL() << "max mode fit without room for workspaces";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("='max': the workspace of"), std::string::npos)
        << e.what();
    // The remedy is the knob that sized the pool, the budget, not the pool variables (which
    // do not size an executor's heap).
    EXPECT_NE(std::string(e.what()).find("Free or evict tensors, or raise the budget, --budget."),
              std::string::npos)
        << e.what();
    EXPECT_EQ(std::string(e.what()).find("MEMWEAVE_POOL_BYTES"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace memweave
