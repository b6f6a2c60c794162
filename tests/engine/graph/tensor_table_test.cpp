// tensor_table: the tensors of an iteration and the exact accesses of every step.
#include "memweave/engine/tensor_table.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "graph_fixtures.hpp"
#include "memweave/engine/zoo.hpp"

namespace memweave {
namespace {

using test::conv3x3;

// data -> c1 -> r1 -> b1 -> {c2, c3} -> s(ADD) -> p(avg POOL) -> d(DROPOUT) -> f(FC) -> loss
network make_mixed() {
  network_builder b("mixed");
  auto x = b.data({2, 3, 8, 8}, 4, "data");
  auto c1 = b.conv(x, conv3x3(4), "c1");
  auto r1 = b.relu(c1, "r1");
  auto b1 = b.bn(r1, bn_params{}, "b1");
  auto c2 = b.conv(b1, conv3x3(4, false), "c2");
  auto c3 = b.conv(b1, conv3x3(4, false), "c3");
  auto s = b.add({c2, c3}, "s");
  pool_params avg;
  avg.mode = pool_mode::average;
  auto p = b.pool(s, avg, "p");
  auto d = b.dropout(p, dropout_params{}, "d");
  auto f = b.fc(d, fc_params{4, true}, "f");
  b.softmax_loss(f, "loss");
  return std::move(b).build();
}

class tensor_table_test : public ::testing::Test {
 protected:
  tensor_table_test() : net_(make_mixed()), route_(net_), table_(net_, route_) {}

  tensor_id t(const std::string& name) const {
    for (const tensor_info& i : table_.tensors())
      if (i.name == name) return i.id;
    ADD_FAILURE() << "no tensor " << name;
    return invalid_tensor;
  }
  layer_id l(const char* name) const { return net_.find(name).value(); }

  // The accesses of a step as "name:mode" strings, sorted.
  std::vector<std::string> step(std::size_t s) const {
    std::vector<std::string> r;
    for (const tensor_access& a : table_.accesses(s))
      r.push_back(table_[a.tensor].name + ":" + to_string(a.mode));
    std::sort(r.begin(), r.end());
    return r;
  }
  std::vector<std::string> fwd(const char* layer) const {
    return step(route_.forward_step(l(layer)));
  }
  std::vector<std::string> bwd(const char* layer) const {
    return step(route_.backward_step(l(layer)));
  }
  static std::vector<std::string> sorted(std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  }

  network net_;
  route route_;
  tensor_table table_;
};

TEST_F(tensor_table_test, every_layer_has_its_tensors_with_roles_and_shapes) {
  const layer_tensors& data = table_.of(l("data"));
  EXPECT_EQ(table_[data.output].role, tensor_role::data);
  EXPECT_EQ(table_[data.labels].name, "data.labels");
  EXPECT_EQ(table_[data.labels].shape, (shape4{2, 1, 1, 1}));
  EXPECT_EQ(data.labels, table_.labels());
  EXPECT_EQ(data.output_grad, invalid_tensor);  // never a gradient for DATA's output
  EXPECT_EQ(table_.of(l("loss")).output_grad, invalid_tensor);

  const layer_tensors& b1 = table_.of(l("b1"));
  ASSERT_EQ(b1.params.size(), 4u);
  EXPECT_EQ(table_[b1.params[0]].role, tensor_role::parameter);        // gamma
  EXPECT_EQ(table_[b1.params[2]].role, tensor_role::parameter_state);  // running_mean
  ASSERT_EQ(b1.param_grads.size(), 2u);
  ASSERT_EQ(b1.momenta.size(), 2u);
  EXPECT_EQ(table_[b1.momenta[1]].name, "b1.beta.momentum");
  EXPECT_EQ(table_[b1.momenta[1]].role, tensor_role::parameter_state);
  EXPECT_EQ(table_[b1.param_grads[0]].role, tensor_role::parameter_gradient);
  EXPECT_EQ(table_[b1.aux[1]].name, "b1.saved_inv_std");
  EXPECT_EQ(table_[b1.aux[1]].role, tensor_role::auxiliary);

  const layer_tensors& c1 = table_.of(l("c1"));
  EXPECT_EQ(table_[c1.params[0]].shape, (shape4{4, 3, 3, 3}));
  EXPECT_EQ(table_[c1.params[0]].bytes, 4u * 27u * 4u);
  EXPECT_EQ(table_[c1.fwd_workspace].role, tensor_role::workspace);
  EXPECT_EQ(table_[c1.fwd_workspace].bytes, 0u);
  EXPECT_EQ(table_[table_.of(l("d")).aux[0]].shape, net_[l("d")].output_shape);

  for (const tensor_info& i : table_.tensors()) {
    EXPECT_EQ(i.persistent,
              i.role == tensor_role::parameter || i.role == tensor_role::parameter_state)
        << i.name;
    if (i.role != tensor_role::workspace) {
      EXPECT_EQ(i.bytes, i.shape.bytes()) << i.name;
    }
  }
  std::size_t persistent = 0, transient = 0;
  for (const tensor_info& i : table_.tensors()) (i.persistent ? persistent : transient) += i.bytes;
  EXPECT_EQ(table_.persistent_bytes(), persistent);
  EXPECT_EQ(table_.transient_bytes(), transient);
}

TEST_F(tensor_table_test, forward_steps_read_inputs_and_parameters_and_write_outputs) {
  EXPECT_EQ(fwd("data"), sorted({"data.y:write", "data.labels:write"}));
  EXPECT_EQ(fwd("c1"), sorted({"data.y:read", "c1.weight:read", "c1.bias:read", "c1.y:write",
                               "c1.fwd_workspace:write"}));
  EXPECT_EQ(fwd("b1"), sorted({"r1.y:read", "b1.gamma:read", "b1.beta:read",
                               "b1.running_mean:update", "b1.running_var:update", "b1.y:write",
                               "b1.saved_mean:write", "b1.saved_inv_std:write"}));
  EXPECT_EQ(fwd("s"), sorted({"c2.y:read", "c3.y:read", "s.y:write"}));
  EXPECT_EQ(fwd("d"), sorted({"p.y:read", "d.y:write", "d.mask:write"}));
  EXPECT_EQ(fwd("loss"), sorted({"f.y:read", "data.labels:read", "loss.y:write"}));
}

TEST_F(tensor_table_test, backward_steps_read_what_their_type_declares) {
  // CONV on DATA: reads x and dy, makes no dx, updates its parameters in the same step.
  EXPECT_EQ(bwd("c1"),
            sorted({"c1.dy:read", "data.y:read", "c1.weight:update", "c1.weight.momentum:update",
                    "c1.bias:update", "c1.bias.momentum:update", "c1.weight.grad:write",
                    "c1.bias.grad:write", "c1.bwd_workspace:write"}));
  // ACT reads y, not x.
  EXPECT_EQ(bwd("r1"), sorted({"r1.dy:read", "r1.y:read", "c1.dy:write"}));
  // BN reads x, saved stats, gamma (updated), not its running stats.
  EXPECT_EQ(bwd("b1"),
            sorted({"b1.dy:read", "r1.y:read", "b1.saved_mean:read", "b1.saved_inv_std:read",
                    "b1.gamma:update", "b1.gamma.momentum:update", "b1.beta:update",
                    "b1.beta.momentum:update", "r1.dy:write", "b1.gamma.grad:write",
                    "b1.beta.grad:write"}));
  // ADD and average POOL read nothing of the forward pass.
  EXPECT_EQ(bwd("s"), sorted({"s.dy:read", "c2.dy:write", "c3.dy:write"}));
  EXPECT_EQ(bwd("p"), sorted({"p.dy:read", "s.dy:write"}));
  EXPECT_EQ(bwd("d"), sorted({"d.dy:read", "d.mask:read", "p.dy:write"}));
  // SOFTMAX: no incoming gradient; y and labels.
  EXPECT_EQ(bwd("loss"), sorted({"loss.y:read", "data.labels:read", "f.dy:write"}));
  // DATA's backward step exists and does nothing.
  EXPECT_TRUE(bwd("data").empty());
  EXPECT_FALSE(table_.has_work(route_.backward_step(l("data"))));
  EXPECT_TRUE(table_.has_work(route_.backward_step(l("s"))));
}

TEST_F(tensor_table_test, fan_out_gradient_is_written_by_the_latest_consumer_and_accumulated) {
  // b1 feeds c2 and c3; c3 comes later in the route, so its backward runs first and writes.
  ASSERT_LT(route_.position(l("c2")), route_.position(l("c3")));
  auto mode_of = [&](const char* layer, const char* tensor) {
    for (const tensor_access& a : table_.accesses(route_.backward_step(l(layer))))
      if (table_[a.tensor].name == tensor) return a.mode;
    ADD_FAILURE() << tensor << " not in " << layer;
    return access_mode::read;
  };
  EXPECT_EQ(mode_of("c3", "b1.dy"), access_mode::write);
  EXPECT_EQ(mode_of("c2", "b1.dy"), access_mode::accumulate);
  EXPECT_LT(route_.backward_step(l("c3")), route_.backward_step(l("c2")));
}

TEST_F(tensor_table_test, each_step_lists_a_tensor_once_reads_before_writes) {
  for (std::size_t s = 0; s < table_.step_count(); ++s) {
    std::set<tensor_id> seen;
    bool writing = false;
    for (const tensor_access& a : table_.accesses(s)) {
      EXPECT_TRUE(seen.insert(a.tensor).second) << table_[a.tensor].name << " at step " << s;
      if (a.mode == access_mode::write) {
        writing = true;
      } else {
        EXPECT_FALSE(writing) << "a non-write after a write at step " << s;
      }
    }
  }
}

TEST_F(tensor_table_test, parameter_gradients_live_within_their_backward_step) {
  for (const tensor_info& i : table_.tensors()) {
    if (i.role != tensor_role::parameter_gradient) continue;
    std::vector<std::size_t> steps;
    for (std::size_t s = 0; s < table_.step_count(); ++s)
      for (const tensor_access& a : table_.accesses(s))
        if (a.tensor == i.id) steps.push_back(s);
    EXPECT_EQ(steps, std::vector<std::size_t>{route_.backward_step(i.owner)}) << i.name;
  }
}

TEST_F(tensor_table_test, only_workspaces_can_be_resized) {
  const tensor_id ws = table_.of(l("c2")).bwd_workspace;
  table_.set_workspace_bytes(ws, 4096);
  EXPECT_EQ(table_[ws].bytes, 4096u);
  test::expect_contains(test::error_of([&] { table_.set_workspace_bytes(t("c2.y"), 1); }),
                        {"'c2.y'", "data tensor", "only workspaces"});
  test::expect_contains(test::error_of([&] { table_.set_workspace_bytes(1u << 30, 1); }),
                        {"out of range"});
}

TEST(tensor_table_layers_test, a_layer_without_backward_work_gets_no_gradient) {
  // relu directly on DATA has no parameters and no input needing a gradient.
  network_builder b("nowork");
  auto x = b.data({2, 3, 4, 4}, 3, "data");
  auto r = b.relu(x, "r");
  auto f = b.fc(r, fc_params{3, true}, "f");
  b.softmax_loss(f, "loss");
  network net = std::move(b).build();
  route rt(net);
  tensor_table t(net, rt);
  EXPECT_EQ(t.of(1).output_grad, invalid_tensor);
  EXPECT_FALSE(t.has_work(rt.backward_step(1)));
  for (const tensor_access& a : t.accesses(rt.backward_step(2)))  // FC: reads r.y as x only
    EXPECT_FALSE(t[a.tensor].owner == 1u && a.mode != access_mode::read) << t[a.tensor].name;
  EXPECT_NE(t.of(2).output_grad, invalid_tensor);
}

TEST(tensor_table_layers_test, tables_of_zoo_networks_name_every_tensor_uniquely) {
  zoo_options o{2, 32, 0.125, 10, 3};
  network net = make_network("densenet121", o);
  route r(net);
  tensor_table t(net, r);
  std::set<std::string> names;
  for (const tensor_info& i : t.tensors()) EXPECT_TRUE(names.insert(i.name).second) << i.name;
  EXPECT_EQ(t.step_count(), 2 * net.size());
}

}  // namespace
}  // namespace memweave
