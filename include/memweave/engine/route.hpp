// The execution route of one training iteration (Algorithm 1 of the paper): a depth-first
// walk from the DATA layer in which a join runs only once all its inputs have run (a counter
// per layer). The forward pass runs the layers in route order, the backward pass in the
// reverse order, one layer per step:
//
//   step s, 0 <= s < N:   forward of order()[s]
//   step s, N <= s < 2N:  backward of order()[2N-1-s]
//
// Steps are 0-based indices here, as in the paper's Fig. 4 (DATA0 ... DATA11); reports
// number them from 1 (step_number = s + 1: forward 1..N, backward N+1..2N, as in Fig. 10).
// The last step is DATA's backward, which does no work (it has no tensor accesses); it is
// kept so that step s and step 2N-1-s always belong to the same layer.
//
// Construction is O(N + E) and iterative (no recursion, so 10^4-layer ResNets are fine).
// Immutable after construction.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "memweave/engine/network.hpp"

namespace memweave {

/// The direction of a step.
enum class pass { forward, backward };

/// "forward" / "backward".
const char* to_string(pass p) noexcept;

/// One step of the route.
struct route_step {
  layer_id layer = invalid_layer;
  pass direction = pass::forward;
  friend bool operator==(const route_step&, const route_step&) = default;
};

class route {
 public:
  /// The route of `net` by Algorithm 1. Children are explored in consumer order (the order
  /// the layers were added), as the paper's get_next() does.
  explicit route(const network& net);

  /// N, the number of layers.
  std::size_t layer_count() const noexcept { return order_.size(); }
  /// 2N, the number of steps of one iteration.
  std::size_t step_count() const noexcept { return 2 * order_.size(); }

  /// The layers in forward execution order; order()[0] is the DATA layer and the last is
  /// the SOFTMAX loss.
  std::span<const layer_id> order() const noexcept { return order_; }

  /// Step s (0 <= s < step_count()); throws invalid_argument when out of range.
  route_step at(std::size_t s) const;

  /// Position of a layer in order() (= its forward step).
  std::size_t position(layer_id id) const noexcept { return position_[id]; }
  /// The forward and backward steps of a layer.
  std::size_t forward_step(layer_id id) const noexcept { return position_[id]; }
  std::size_t backward_step(layer_id id) const noexcept { return step_count() - 1 - position_[id]; }

  /// Whether `order` lists every layer of `net` exactly once with each layer after all of
  /// its inputs. Used by tests; also true of order() by construction.
  static bool is_topological(const network& net, std::span<const layer_id> order);

  /// "0 data F, 1 conv1 F, ..., 2N-1 data B", one step per line.
  std::string describe(const network& net) const;

 private:
  std::vector<layer_id> order_;
  std::vector<std::size_t> position_;  // indexed by layer id
};

}  // namespace memweave
