// Random DAGs with fans and joins for oracle tests, valid by construction.
//
// The generator keeps, per spatial stage, every layer made so far (`all`) and those no layer
// consumes yet (`open`). Each step adds one layer reading layers of the current stage: a
// source already consumed gains another consumer (a fan); CONCAT and ADD read two or three
// (joins; ADD only among equal shapes). Within a stage every layer keeps the side, so any two
// may be joined. Between stages all open layers are joined by one CONCAT and pooled 2x2/2;
// at the end likewise, then FC and SOFTMAX. So every layer leads to the loss. The choices
// come from std::mt19937_64 (whose sequence the standard fixes) reduced by modulo, so a seed
// gives the same network everywhere. Pure function; thread-safe.
#include <algorithm>
#include <random>
#include <vector>

#include "memweave/core/error.hpp"
#include "zoo_common.hpp"

namespace memweave {

using namespace zoo_detail;

namespace {

class dag_generator {
 public:
  dag_generator(const random_dag_options& o, network_builder& b) : o_(o), b_(b), rng_(o.seed) {}

  std::size_t pick(std::size_t n) { return static_cast<std::size_t>(rng_() % n); }
  bool chance(unsigned percent) { return pick(100) < percent; }

  // A source: mostly one of the last few layers (depth), sometimes any (long fans).
  layer_handle source() {
    if (all_.size() > 3 && chance(60)) return all_[all_.size() - 1 - pick(3)];
    return all_[pick(all_.size())];
  }

  void made(layer_handle y, std::initializer_list<layer_handle> read) {
    for (layer_handle x : read) consume(x);
    all_.push_back(y);
    open_.push_back(y);
  }
  void made(layer_handle y, const std::vector<layer_handle>& read) {
    for (layer_handle x : read) consume(x);
    all_.push_back(y);
    open_.push_back(y);
  }
  void consume(layer_handle x) {
    open_.erase(std::remove(open_.begin(), open_.end(), x), open_.end());
  }

  // Joins all open layers into one (CONCAT when several).
  layer_handle merge() {
    layer_handle y = open_.size() == 1 ? open_[0] : b_.concat(open_);
    return y;
  }

  void start_stage(layer_handle x) {
    all_.assign(1, x);
    open_.assign(1, x);
  }

  void step() {
    const unsigned roll = static_cast<unsigned>(pick(100));
    const std::int64_t max_c = 2 * o_.channels;
    if (roll < 30) {
      layer_handle x = source();
      const std::int64_t k = chance(50) ? 3 : 1;
      conv_params p = conv_p(1 + static_cast<std::int64_t>(pick(static_cast<std::size_t>(max_c))),
                             k, k, 1, k / 2, k / 2, chance(50));
      made(b_.conv(x, p), {x});
    } else if (roll < 45) {
      layer_handle x = source();
      act_params p;
      p.mode = o_.all_types && chance(30) ? act_mode::tanh : act_mode::relu;
      made(b_.act(x, p), {x});
    } else if (roll < 58) {
      layer_handle x = source();
      made(b_.bn(x), {x});
    } else if (roll < 70) {
      // ADD of 2 or 3 layers of one shape.
      layer_handle x = source();
      std::vector<layer_handle> same;
      for (layer_handle y : all_)
        if (!(y == x) && b_.shape(y) == b_.shape(x)) same.push_back(y);
      if (same.empty()) {  // make a partner: a 1x1 CONV to x's channels
        conv_params p = conv_p(b_.shape(x).c, 1, 1, 1, 0, 0, false);
        layer_handle s = source();
        layer_handle y = b_.conv(s, p);
        made(y, {s});
        same.push_back(y);
      }
      std::vector<layer_handle> in{x, same[pick(same.size())]};
      if (same.size() > 1 && chance(30)) {
        layer_handle z = same[pick(same.size())];
        if (!(z == in[1])) in.push_back(z);
      }
      made(b_.add(in), in);
    } else if (roll < 82) {
      // CONCAT of 2 or 3 distinct layers.
      if (all_.size() < 2) return step_unary();
      std::vector<layer_handle> in{source()};
      const std::size_t want = chance(30) ? 3 : 2;
      for (int tries = 0; in.size() < want && tries < 8; ++tries) {
        layer_handle y = all_[pick(all_.size())];
        if (std::find(in.begin(), in.end(), y) == in.end()) in.push_back(y);
      }
      if (in.size() < 2) return step_unary();
      made(b_.concat(in), in);
    } else if (roll < 90 || !o_.all_types) {
      layer_handle x = source();
      pool_params p =
          pool_p(chance(o_.all_types ? 50 : 100) ? pool_mode::max : pool_mode::average, 3, 1, 1);
      made(b_.pool(x, p), {x});
    } else if (roll < 95) {
      layer_handle x = source();
      made(b_.lrn(x), {x});
    } else {
      layer_handle x = source();
      made(b_.dropout(x, dropout_params{0.25f}), {x});
    }
  }

  void step_unary() {
    layer_handle x = source();
    made(b_.relu(x), {x});
  }

 private:
  const random_dag_options& o_;
  network_builder& b_;
  std::mt19937_64 rng_;
  std::vector<layer_handle> all_, open_;
};

}  // namespace

network make_random_dag(const random_dag_options& o) {
  const std::string name = "random_" + std::to_string(o.seed);
  if (o.batch < 1 || o.channels < 1 || o.classes < 1 || o.stages < 1)
    throw invalid_argument(
        "make_random_dag: batch, channels, classes and stages must be >= 1 "
        "(got batch " +
        std::to_string(o.batch) + ", channels " + std::to_string(o.channels) + ", classes " +
        std::to_string(o.classes) + ", stages " + std::to_string(o.stages) + ")");
  if (o.stages > 30 || o.image_side < (std::int64_t{1} << (o.stages - 1)))
    throw invalid_argument("make_random_dag: image_side " + std::to_string(o.image_side) +
                           " cannot be halved " + std::to_string(o.stages - 1) +
                           " times; use image_side >= 2^(stages-1) (stages <= 30)");
  network_builder b(name);
  dag_generator g(o, b);
  layer_handle x = b.data({o.batch, o.channels, o.image_side, o.image_side}, o.classes);
  g.start_stage(x);
  for (std::size_t s = 0; s < o.stages; ++s) {
    const std::size_t n = o.layers / o.stages + (s < o.layers % o.stages ? 1 : 0);
    for (std::size_t k = 0; k < n; ++k) g.step();
    if (s + 1 < o.stages) {
      layer_handle m = g.merge();
      g.start_stage(b.pool(m, pool_p(pool_mode::max, 2, 2, 0)));
    }
  }
  layer_handle m = g.merge();
  m = b.fc(m, fc_params{o.classes, true});
  b.softmax_loss(m);
  return std::move(b).build();
}

}  // namespace memweave
