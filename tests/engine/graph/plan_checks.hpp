// Oracle checks of a liveness analysis and its plans, by brute force over the access lists.
#pragma once

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "memweave/engine/liveness.hpp"

namespace memweave::test {

/// First and last step touching each tensor, by a plain scan.
struct brute_intervals {
  std::vector<std::size_t> first, last;
  explicit brute_intervals(const tensor_table& t)
      : first(t.size(), SIZE_MAX), last(t.size(), SIZE_MAX) {
    for (std::size_t s = 0; s < t.step_count(); ++s)
      for (const tensor_access& a : t.accesses(s)) {
        if (first[a.tensor] == SIZE_MAX) first[a.tensor] = s;
        last[a.tensor] = s;
      }
  }
};

/// Runs `plan` step by step against the table: everything a step touches is resident, every
/// allocation is new, every free releases a resident tensor no later step touches (under
/// liveness; under baseline everything is freed after the last step), and the plan's counts
/// equal the resident set's. With `policy` liveness, also that each tensor is allocated at
/// its first use and freed at its last.
inline void check_plan(const tensor_table& t, const memory_plan& plan, const std::string& what) {
  SCOPED_TRACE(what + " / " + to_string(plan.policy));
  brute_intervals bi(t);
  std::set<tensor_id> resident(plan.persistent.begin(), plan.persistent.end());
  std::size_t persistent_bytes = 0;
  for (tensor_id p : plan.persistent) {
    ASSERT_TRUE(t[p].persistent);
    persistent_bytes += t[p].bytes;
  }
  for (const tensor_info& i : t.tensors()) {
    if (i.persistent && i.bytes > 0) {
      ASSERT_TRUE(resident.count(i.id)) << i.name;
    }
  }
  ASSERT_EQ(plan.persistent_bytes, persistent_bytes);
  ASSERT_EQ(plan.steps.size(), t.step_count());
  std::size_t peak = 0, peak_tensors = 0;
  for (std::size_t s = 0; s < t.step_count(); ++s) {
    const step_plan& sp = plan.steps[s];
    for (tensor_id a : sp.allocate) {
      ASSERT_FALSE(t[a].persistent) << t[a].name;
      ASSERT_GT(t[a].bytes, 0u) << t[a].name;
      ASSERT_TRUE(resident.insert(a).second) << t[a].name << " allocated twice";
      if (plan.policy == memory_policy::liveness) {
        ASSERT_EQ(bi.first[a], s) << t[a].name;
      }
    }
    for (const tensor_access& a : t.accesses(s)) {
      if (t[a.tensor].bytes > 0) {
        ASSERT_TRUE(resident.count(a.tensor))
            << t[a.tensor].name << " touched at step " << s << " but not resident";
      }
    }
    std::size_t bytes = 0;
    for (tensor_id r : resident) bytes += t[r].bytes;
    ASSERT_EQ(sp.bytes_live, bytes) << "step " << s;
    ASSERT_EQ(sp.tensors_live, resident.size()) << "step " << s;
    ASSERT_EQ(sp.transient_bytes_live, bytes - persistent_bytes) << "step " << s;
    ASSERT_EQ(sp.transient_tensors_live, resident.size() - plan.persistent.size());
    if (bytes > peak) peak = bytes;
    if (resident.size() > peak_tensors) peak_tensors = resident.size();
    for (tensor_id f : sp.free) {
      ASSERT_TRUE(resident.erase(f)) << t[f].name << " freed but not resident";
      ASSERT_LE(bi.last[f], s) << t[f].name << " freed before a later use";
      if (plan.policy == memory_policy::liveness) {
        ASSERT_EQ(bi.last[f], s) << t[f].name;
      }
    }
  }
  EXPECT_EQ(resident, std::set<tensor_id>(plan.persistent.begin(), plan.persistent.end()))
      << "transient tensors left after the iteration";
  EXPECT_EQ(plan.peak_bytes, peak);
  EXPECT_EQ(plan.peak_tensors, peak_tensors);
  EXPECT_EQ(plan.steps[plan.peak_step].bytes_live, peak);
}

/// in/out/born/dies sets of `lv` equal their definitions over a brute-force scan.
inline void check_sets(const tensor_table& t, const liveness& lv, const std::string& what) {
  SCOPED_TRACE(what);
  brute_intervals bi(t);
  for (const tensor_info& i : t.tensors()) {
    ASSERT_EQ(lv.first_use(i.id), bi.first[i.id]) << i.name;
    ASSERT_EQ(lv.last_use(i.id), bi.last[i.id]) << i.name;
  }
  std::vector<std::vector<std::size_t>> uses(t.size());  // steps touching each tensor
  for (std::size_t u = 0; u < t.step_count(); ++u)
    for (const tensor_access& a : t.accesses(u)) uses[a.tensor].push_back(u);
  for (std::size_t s = 0; s < t.step_count(); ++s) {
    std::vector<tensor_id> in, out, born, dies;
    for (const tensor_info& i : t.tensors()) {
      if (i.persistent) continue;
      // in: touched before s and at or after s; out: touched at or before s and after s.
      bool before = false, at_or_after = false, at_or_before = false, after = false;
      for (std::size_t u : uses[i.id]) {
        before |= u < s;
        at_or_after |= u >= s;
        at_or_before |= u <= s;
        after |= u > s;
      }
      if (before && at_or_after) in.push_back(i.id);
      if (at_or_before && after) out.push_back(i.id);
      if (bi.first[i.id] == s) born.push_back(i.id);
      if (bi.last[i.id] == s) dies.push_back(i.id);
    }
    ASSERT_EQ(lv.in_set(s), in) << "step " << s;
    ASSERT_EQ(lv.out_set(s), out) << "step " << s;
    ASSERT_EQ(std::vector<tensor_id>(lv.born_at(s).begin(), lv.born_at(s).end()), born);
    ASSERT_EQ(std::vector<tensor_id>(lv.dies_after(s).begin(), lv.dies_after(s).end()), dies);
  }
}

}  // namespace memweave::test
