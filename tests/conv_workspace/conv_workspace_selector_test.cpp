#include "memweave/conv_workspace/conv_workspace_selector.hpp"

#include <gtest/gtest.h>

#include "memweave/core/error.hpp"

namespace memweave {
namespace {

std::vector<conv_candidate> ladder() {
  return {{"direct", 0, 9.0},
          {"im2col_image", 1000, 3.0},
          {"im2col_batch:4", 8000, 1.0},
          {"im2col_batch:2", 4000, 2.0}};
}

conv_workspace_selector make(const std::string& mode, std::size_t reserve = 0) {
  conv_ws_options o = conv_ws_options::parse(mode, "test");
  o.reserve_bytes = reserve;
  return conv_workspace_selector(o, "test");
}

TEST(conv_workspace_selector_test, dynamic_picks_the_fastest_that_fits) {
  auto s = make("dynamic");
  const auto& c = s.candidates("k", ladder);
  EXPECT_EQ(s.choose(c, 100000).algorithm, "im2col_batch:4");
  EXPECT_EQ(s.choose(c, 7999).algorithm, "im2col_batch:2");
  EXPECT_EQ(s.choose(c, 3999).algorithm, "im2col_image");
  EXPECT_EQ(s.choose(c, 999).algorithm, "direct");
  EXPECT_EQ(s.choose(c, 0).algorithm, "direct");  // never fails: the no-workspace one
}

TEST(conv_workspace_selector_test, reserve_is_kept_free) {
  auto s = make("dynamic", 5000);
  const auto& c = s.candidates("k", ladder);
  EXPECT_EQ(s.choose(c, 12000).algorithm, "im2col_batch:2");
  EXPECT_EQ(s.choose(c, 4000).algorithm, "direct");
}

TEST(conv_workspace_selector_test, none_max_and_fixed_ignore_the_free_memory) {
  auto none = make("none");
  auto max = make("max");
  auto fixed = make("fixed:im2col_image");
  EXPECT_EQ(none.choose(none.candidates("k", ladder), 1u << 30).algorithm, "direct");
  EXPECT_EQ(max.choose(max.candidates("k", ladder), 0).algorithm, "im2col_batch:4");
  EXPECT_EQ(fixed.choose(fixed.candidates("k", ladder), 0).algorithm, "im2col_image");
}

TEST(conv_workspace_selector_test, candidates_are_measured_once_per_key) {
  auto s = make("dynamic");
  int calls = 0;
  auto measure = [&] {
    ++calls;
    return ladder();
  };
  s.candidates("a", measure);
  s.candidates("a", measure);
  s.candidates("b", measure);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(s.measured(), 2u);
  EXPECT_EQ(s.hits(), 1u);
}

TEST(conv_workspace_selector_test, bad_modes_and_candidate_sets_are_rejected) {
  EXPECT_THROW(conv_ws_options::parse("fastest", "MEMWEAVE_CONV_WS"), invalid_argument);
  EXPECT_THROW(conv_ws_options::parse("fixed:", "MEMWEAVE_CONV_WS"), invalid_argument);
  // What to do, as every refused value says, for the knob the user set.
  for (const auto& [knob, remedy] :
       {std::pair{"MEMWEAVE_CONV_WS", "fix or unset it"}, {"--conv-ws", "change the option"}}) {
    try {
      (void)conv_ws_options::parse("fastest", knob);
      ADD_FAILURE() << knob;
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("fixed:direct); ") + remedy),
                std::string::npos)
          << e.what();
    }
  }
  auto s = make("dynamic");
  EXPECT_THROW(s.candidates("k",
                            [] {
                              return std::vector<conv_candidate>{{"gemm", 10, 1}};
                            }),
               invalid_argument);
  auto f = make("fixed:winograd");
  try {
    f.candidates("k", ladder);
    FAIL();
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("available: direct, im2col_image"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace memweave
