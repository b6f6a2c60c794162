// The DATA step's input pipeline: batch k + 1 made ahead on its own thread gives the bytes a
// fill made then would, a guess that was wrong changes nothing, a failure is told only to
// whom asks for that batch. One fill thread each (use_threads(1)): what is checked is the
// hand-off between the step and the thread making the batch ahead, not TBB's own workers,
// which ThreadSanitizer cannot see synchronize (the library is not instrumented).
#include "engine/runtime/batch_prefetcher.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <vector>

#include "memweave/engine/data_source.hpp"

namespace memweave {
namespace {

const shape4 k_image{1, 3, 5, 4};
constexpr std::int64_t k_n = 6;
const std::size_t k_floats = static_cast<std::size_t>(k_n * k_image.per_image());

// The synthetic source, counting the batches made and failing for one iteration.
class counted final : public data_source {
 public:
  explicit counted(std::int64_t failing = -1, bool concurrent = false)
      : inner_(make_synthetic_source(k_image, 5, 3)), failing_(failing), concurrent_(concurrent) {}
  std::string name() const override { return "counted"; }
  shape4 image_shape() const override { return k_image; }
  std::int64_t classes() const override { return 5; }
  void fill(std::int64_t iteration, std::int64_t n, float* images, float* labels) override {
    ++made;
    if (iteration == failing_) throw std::runtime_error("batch " + std::to_string(iteration));
    inner_->fill(iteration, n, images, labels);
  }
  void fill_slice(std::int64_t iteration, std::int64_t batch, std::int64_t first, std::int64_t n,
                  float* images, float* labels) override {
    ++sliced;
    inner_->fill_slice(iteration, batch, first, n, images, labels);
  }
  bool fills_concurrently() const override { return concurrent_; }
  std::atomic<int> made{0}, sliced{0};

 private:
  std::unique_ptr<data_source> inner_;
  std::int64_t failing_;
  bool concurrent_;
};

std::vector<float> direct(std::int64_t iteration) {
  auto s = make_synthetic_source(k_image, 5, 3);
  std::vector<float> b(k_floats + k_n);
  s->fill(iteration, k_n, b.data(), b.data() + k_floats);
  return b;
}

std::vector<float> copy(const float* p) {
  return std::vector<float>(p, p + k_floats + k_n);
}

TEST(batch_prefetcher_test, batches_made_ahead_are_the_bytes_a_fill_then_gives) {
  counted source;
  batch_prefetcher p;
  p.use_threads(1);
  for (std::int64_t it = 0; it < 4; ++it) {
    EXPECT_EQ(copy(p.take(source, it, k_n, k_floats)), direct(it)) << "iteration " << it;
    p.start_next(source, it + 1, k_n, k_floats);
  }
  p.settle();
  EXPECT_EQ(p.hits(), 3);
  EXPECT_EQ(source.made.load(), 5);  // batches 0..3 and 4, made ahead for nobody
}

// With one thread a source is filled whole even where it could be sliced: no TBB arena is
// entered (data_source_test checks the slices, on two threads, outside ThreadSanitizer).
TEST(batch_prefetcher_test, one_thread_fills_a_source_whole) {
  counted source(/*failing=*/-1, /*concurrent=*/true);
  batch_prefetcher p;
  p.use_threads(1);
  EXPECT_EQ(copy(p.take(source, 0, k_n, k_floats)), direct(0));
  p.start_next(source, 1, k_n, k_floats);
  EXPECT_EQ(copy(p.take(source, 1, k_n, k_floats)), direct(1));
  EXPECT_EQ(p.hits(), 1);
  EXPECT_EQ(source.made.load(), 2);
  EXPECT_EQ(source.sliced.load(), 0);
}

TEST(batch_prefetcher_test, a_batch_other_than_the_one_made_ahead_is_made_when_asked_for) {
  counted source, other;
  batch_prefetcher p;
  p.use_threads(1);
  (void)p.take(source, 0, k_n, k_floats);
  p.start_next(source, 1, k_n, k_floats);
  EXPECT_EQ(copy(p.take(source, 7, k_n, k_floats)), direct(7)) << "another iteration";
  p.start_next(source, 8, k_n, k_floats);
  EXPECT_EQ(copy(p.take(other, 8, k_n, k_floats)), direct(8)) << "another source";
  EXPECT_EQ(p.hits(), 0);
  // The buffer handed out stays as it was while the next batch is made into the other one.
  const float* handed = p.take(source, 2, k_n, k_floats);
  const std::vector<float> before = copy(handed);
  p.start_next(source, 3, k_n, k_floats);
  p.settle();
  EXPECT_EQ(copy(handed), before);
}

TEST(batch_prefetcher_test, a_failure_is_told_only_to_whom_asks_for_that_batch) {
  counted source(/*failing=*/1);
  batch_prefetcher p;
  p.use_threads(1);
  (void)p.take(source, 0, k_n, k_floats);
  p.start_next(source, 1, k_n, k_floats);  // fails, ahead
  EXPECT_EQ(copy(p.take(source, 5, k_n, k_floats)), direct(5)) << "batch 1 was not asked for";
  p.start_next(source, 1, k_n, k_floats);
  EXPECT_THROW((void)p.take(source, 1, k_n, k_floats), std::runtime_error);
  // And the pipeline goes on.
  EXPECT_EQ(copy(p.take(source, 2, k_n, k_floats)), direct(2));
}

TEST(batch_prefetcher_test, settling_lets_the_source_go) {
  batch_prefetcher p;
  p.use_threads(1);
  {
    counted source;
    (void)p.take(source, 0, k_n, k_floats);
    p.start_next(source, 1, k_n, k_floats);
    p.settle();  // the source goes now: nothing may read it after this (ASan checks)
  }
  // Another source, maybe where the first one was: the batch made ahead is not its own.
  counted again(/*failing=*/-1);
  (void)p.take(again, 1, k_n, k_floats);
  EXPECT_EQ(p.hits(), 0);
  EXPECT_EQ(again.made.load(), 1);
}

}  // namespace
}  // namespace memweave
