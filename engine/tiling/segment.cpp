// make_segment: a segment cut out of a network, renumbered so that it stands alone (local
// layer 0 for its input, then the members), with every check the tiled execution relies on:
// the members are spatially local, read only the segment, and only the last one is read
// outside it. Pure; thread-safe.
#include <string>
#include <unordered_map>

#include "engine/tiling/tiled_segment.hpp"
#include "memweave/core/error.hpp"

namespace memweave::tiling {

namespace {

std::string named(const layer& l) {
  return "layer " + std::to_string(l.id) + " '" + l.name + "' (" + to_string(l.type) + ")";
}

}  // namespace

// The types whose output element (y, x) depends only on a bounded window of their inputs
// around (y, x), which is what cutting the image into tiles with halos needs.
bool spatially_local(const layer& l) {
  switch (l.type) {
    case layer_type::conv:
    case layer_type::act:
    case layer_type::bn:
    case layer_type::lrn:
    case layer_type::add:
    case layer_type::concat:
      return true;
    case layer_type::pool:
      return !std::get<pool_params>(l.params).global && !std::get<pool_params>(l.params).adaptive();
    default:
      return false;
  }
}

tiled_segment make_segment(const network& net, layer_id input, const std::vector<layer_id>& members,
                           std::int64_t tiles_h, std::int64_t tiles_w) {
  MEMWEAVE_EXPECTS(!members.empty(), "make_segment: no members after " + named(net.at(input)) +
                                         "; expected at least one layer");
  std::unordered_map<layer_id, layer_id> local;  // network id -> local id
  local.emplace(input, 0);
  layer_id previous = input;
  for (const layer_id id : members) {
    const layer& l = net.at(id);
    MEMWEAVE_EXPECTS(id > previous, "make_segment: member " + named(l) + " is not after layer " +
                                        std::to_string(previous) +
                                        "; expected the input, then the members in increasing id "
                                        "order");
    MEMWEAVE_EXPECTS(spatially_local(l),
                     "make_segment: member " + named(l) +
                         " is not spatially local; expected CONV, POOL "
                         "(not global or adaptive), ACT, BN, LRN, ADD or CONCAT");
    local.emplace(id, static_cast<layer_id>(local.size()));
    previous = id;
  }

  tiled_segment s;
  s.tiles_h = tiles_h;
  s.tiles_w = tiles_w;
  const layer& in = net.at(input);
  layer stand_in;
  stand_in.id = 0;
  stand_in.name = in.name;
  stand_in.type = layer_type::data;
  stand_in.params = data_params{in.output_shape, 0};
  stand_in.output_shape = in.output_shape;
  stand_in.cost = cost_class::checkpoint;
  s.layers.push_back(std::move(stand_in));

  for (std::size_t k = 0; k < members.size(); ++k) {
    layer m = net.at(members[k]);
    const bool last = k + 1 == members.size();
    for (layer_id& x : m.inputs) {
      const auto it = local.find(x);
      MEMWEAVE_EXPECTS(it != local.end(),
                       "make_segment: member " + named(m) + " reads " + named(net.at(x)) +
                           ", which is outside the segment; expected it to read only the "
                           "segment's input (" +
                           named(in) + ") or earlier members");
      x = it->second;
      s.layers[x].consumers.push_back(static_cast<layer_id>(k + 1));
    }
    for (const layer_id c : m.consumers) {
      MEMWEAVE_EXPECTS(last || local.contains(c),
                       "make_segment: member " + named(m) + " is read by " + named(net.at(c)) +
                           " outside the segment; expected only the last member (the "
                           "segment's output) to be read outside it");
    }
    m.id = static_cast<layer_id>(k + 1);
    m.consumers.clear();  // refilled from the members' inputs (the last one's stay outside)
    s.layers.push_back(std::move(m));
  }
  MEMWEAVE_EXPECTS(!s.layers[0].consumers.empty(),
                   "make_segment: no member reads the segment's input " + named(in) +
                       "; expected the first members to read it");

  const shape4 out = s.layers.back().output_shape;
  MEMWEAVE_EXPECTS(tiles_h >= 1 && tiles_h <= out.h && tiles_w >= 1 && tiles_w <= out.w,
                   "make_segment: a grid of " + std::to_string(tiles_h) + " x " +
                       std::to_string(tiles_w) + " tiles for the " + std::to_string(out.h) + " x " +
                       std::to_string(out.w) + " output of " + named(net.at(members.back())) +
                       "; expected 1 <= tiles_h <= the output's height and 1 <= tiles_w <= its "
                       "width");
  return s;
}

}  // namespace memweave::tiling
