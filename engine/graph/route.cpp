// Algorithm 1 of the paper, iteratively. The recursive RouteConstruct(layer) increments the
// layer's join counter, returns while the counter is below the number of inputs, otherwise
// appends the layer to the route and recurses into its consumers in order. Here an explicit
// stack of (layer, next consumer) frames replays exactly that call sequence, so deep
// networks (10^4 layers in a chain) cannot overflow the call stack. Every layer is reached:
// DATA is the only layer without inputs and every layer descends from it. Immutable after
// construction; thread-safe for const use.
#include "memweave/engine/route.hpp"

#include <sstream>
#include <utility>

#include "memweave/core/error.hpp"

namespace memweave {

const char* to_string(pass p) noexcept {
  return p == pass::forward ? "forward" : "backward";
}

route::route(const network& net) : position_(net.size(), 0) {
  const std::size_t n = net.size();
  if (n == 0) return;
  order_.reserve(n);
  std::vector<std::uint32_t> counter(n, 0);
  std::vector<std::pair<layer_id, std::size_t>> stack;  // (layer, next consumer to visit)

  // One call of RouteConstruct(l) up to its recursion: true when l joins the route.
  auto enter = [&](layer_id l) {
    if (++counter[l] < net[l].inputs.size()) return false;  // a join still waiting
    position_[l] = order_.size();
    order_.push_back(l);
    stack.push_back({l, 0});
    return true;
  };

  enter(net.data_layer());
  while (!stack.empty()) {
    auto& [l, k] = stack.back();
    const auto& next = net[l].consumers;
    if (k == next.size()) {
      counter[l] = 0;  // line 11: reset, so that the route can be constructed again
      stack.pop_back();
      continue;
    }
    enter(next[k++]);  // may push, invalidating l and k; they are re-read next round
  }
  if (order_.size() != n)
    throw std::logic_error("route: reached " + std::to_string(order_.size()) + " of " +
                           std::to_string(n) + " layers of network '" + net.name() +
                           "' (the network is not a DAG rooted at its DATA layer)");
}

route_step route::at(std::size_t s) const {
  const std::size_t n = order_.size();
  if (s >= 2 * n)
    throw invalid_argument("step " + std::to_string(s) + " is out of range: the route has " +
                           std::to_string(2 * n) + " steps (0 to " + std::to_string(2 * n - 1) +
                           ")");
  return s < n ? route_step{order_[s], pass::forward}
               : route_step{order_[2 * n - 1 - s], pass::backward};
}

bool route::is_topological(const network& net, std::span<const layer_id> order) {
  if (order.size() != net.size()) return false;
  constexpr std::size_t unseen = static_cast<std::size_t>(-1);
  std::vector<std::size_t> pos(net.size(), unseen);
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (order[i] >= net.size() || pos[order[i]] != unseen) return false;
    pos[order[i]] = i;
  }
  for (const layer& l : net.layers())
    for (layer_id x : l.inputs)
      if (pos[x] >= pos[l.id]) return false;
  return true;
}

std::string route::describe(const network& net) const {
  std::ostringstream os;
  for (std::size_t s = 0; s < step_count(); ++s) {
    const route_step st = at(s);
    os << s << ' ' << net[st.layer].name << ' ' << (st.direction == pass::forward ? 'F' : 'B')
       << '\n';
  }
  return os.str();
}

}  // namespace memweave
