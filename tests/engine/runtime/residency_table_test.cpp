// The residency table's transitions: each moves the live counters with the tensor's device
// memory, and only the ones that take or give back device memory do.
#include "engine/runtime/residency_table.hpp"

#include "engine_test_util.hpp"
#include "memweave/engine/route.hpp"

namespace memweave {
namespace {

class residency_table_test : public ::testing::Test {
 protected:
  network net_ = test::small_zoo("resnet50");
  route route_{net_};
  tensor_table table_{net_, route_};
  residency_table r_{table_};
  int slot_ = 0;  // stands in for device memory held aside

  std::size_t bytes(tensor_id t) const { return table_[t].bytes; }
};

TEST_F(residency_table_test, starts_with_every_tensor_absent_and_nothing_live) {
  ASSERT_EQ(r_.size(), table_.size());
  for (tensor_id t = 0; t < r_.size(); ++t) {
    EXPECT_EQ(r_.state(t), residency::absent);
    EXPECT_EQ(r_.aside(t), nullptr);
    EXPECT_FALSE(r_.copied(t));
  }
  EXPECT_EQ(r_.bytes_live(), 0u);
  EXPECT_EQ(r_.tensors_live(), 0u);
}

TEST_F(residency_table_test, a_round_trip_to_host_counts_device_memory_only_while_held) {
  const tensor_id t = table_.of(net_[1].id).output;
  r_.allocated(t);
  EXPECT_EQ(r_.state(t), residency::resident);
  EXPECT_EQ(r_.bytes_live(), bytes(t));
  r_.offload_started(t, &slot_);  // the memory is still held, aside
  EXPECT_EQ(r_.state(t), residency::offloading);
  EXPECT_EQ(r_.aside(t), &slot_);
  EXPECT_EQ(r_.bytes_live(), bytes(t));
  r_.offload_landed(t);
  EXPECT_EQ(r_.state(t), residency::on_host);
  EXPECT_EQ(r_.aside(t), nullptr);
  EXPECT_EQ(r_.bytes_live(), 0u);
  EXPECT_EQ(r_.tensors_live(), 0u);
  r_.prefetch_started(t, &slot_);
  EXPECT_EQ(r_.bytes_live(), bytes(t));
  r_.back_in_cache(t);
  EXPECT_EQ(r_.state(t), residency::resident);
  EXPECT_EQ(r_.aside(t), nullptr);
  EXPECT_EQ(r_.bytes_live(), bytes(t));
  r_.freed(t);
  EXPECT_EQ(r_.state(t), residency::absent);
  EXPECT_EQ(r_.bytes_live(), 0u);
  EXPECT_EQ(r_.tensors_live(), 0u);
}

// The count of tensors only in host memory follows every way in and out of on_host: with
// none, prefetch_ahead does not walk the route (it did at every step of a network without
// checkpoint layers).
TEST_F(residency_table_test, tensors_on_host_are_counted_through_every_transition) {
  const tensor_id a = table_.of(net_[1].id).output, b = table_.of(net_[2].id).output;
  EXPECT_EQ(r_.on_host_tensors(), 0u);
  r_.allocated(a);
  r_.left_device(a, residency::on_host);  // evicted with a host copy
  EXPECT_EQ(r_.on_host_tensors(), 1u);
  r_.allocated(b);
  r_.offload_started(b, &slot_);
  EXPECT_EQ(r_.on_host_tensors(), 1u);
  r_.offload_landed(b);
  EXPECT_EQ(r_.on_host_tensors(), 2u);
  r_.prefetch_started(b, &slot_);
  EXPECT_EQ(r_.on_host_tensors(), 1u);
  r_.back_in_cache(b);
  r_.staged(a);
  EXPECT_EQ(r_.on_host_tensors(), 0u);
  r_.freed(a);
  r_.allocated(a);
  r_.left_device(a, residency::on_host);
  r_.host_value_dropped(a);
  EXPECT_EQ(r_.on_host_tensors(), 0u);
  r_.unborn(a, residency::absent);
  r_.allocated(a);
  r_.left_device(a, residency::on_host);
  r_.freed(a);
  EXPECT_EQ(r_.on_host_tensors(), 0u);
  r_.allocated(a);
  r_.left_device(a, residency::on_host);
  r_.allocated(a);  // brought back by the cache
  EXPECT_EQ(r_.on_host_tensors(), 0u);
}

TEST_F(residency_table_test, freeing_a_tensor_without_device_memory_changes_no_counter) {
  const tensor_id t = table_.of(net_[1].id).output;
  r_.allocated(t);
  r_.left_device(t, residency::dropped);
  EXPECT_EQ(r_.bytes_live(), 0u);
  r_.freed(t);
  EXPECT_EQ(r_.bytes_live(), 0u);
  EXPECT_EQ(r_.tensors_live(), 0u);
  r_.unborn(t, residency::dropped);
  EXPECT_EQ(r_.state(t), residency::dropped);
  r_.forget_dropped();
  EXPECT_EQ(r_.state(t), residency::absent);
}

TEST_F(residency_table_test, peaks_cover_workspaces_and_restart_each_step) {
  const tensor_id t = table_.of(net_[1].id).output;
  r_.allocated(t);
  r_.workspace_taken(1000);
  r_.note_peak(4096);
  r_.workspace_returned(1000);
  r_.note_peak(2048);
  EXPECT_EQ(r_.step_peak_live(), bytes(t) + 1000);
  EXPECT_EQ(r_.step_peak_heap(), 4096u);
  r_.begin_step();
  r_.note_peak(0);
  EXPECT_EQ(r_.step_peak_live(), bytes(t));
  EXPECT_EQ(r_.step_peak_heap(), 0u);
}

}  // namespace
}  // namespace memweave
