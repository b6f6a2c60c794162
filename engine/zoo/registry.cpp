// make_network: zoo names to builders. Pure functions; thread-safe.
#include <array>
#include <charconv>

#include "memweave/core/error.hpp"
#include "zoo_common.hpp"

namespace memweave {

namespace {

constexpr std::string_view resnet_prefix = "resnet:";

std::string known_names() {
  std::string s;
  for (const std::string& n : zoo_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// The most blocks a resnet:<n1>,<n2>,<n3>,<n4> may have, in one stage and in all.
constexpr std::int64_t k_max_blocks = 40000;

std::array<std::int64_t, 4> parse_resnet(std::string_view name) {
  std::string_view rest = name.substr(resnet_prefix.size());
  std::array<std::int64_t, 4> n{};
  for (std::size_t k = 0; k < 4; ++k) {
    const std::size_t comma = rest.find(',');
    const std::string_view part = rest.substr(0, comma);
    std::int64_t v = 0;
    auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    const bool last = k == 3;
    if (part.empty() || ec != std::errc{} || end != part.data() + part.size() || v < 1 ||
        v > k_max_blocks || (last != (comma == std::string_view::npos)))
      throw invalid_argument("zoo network '" + std::string(name) +
                             "': expected resnet:<n1>,<n2>,<n3>,<n4> with four block counts "
                             "from 1 to " +
                             std::to_string(k_max_blocks) + " (e.g. resnet:3,4,6,3 is resnet50)");
    n[k] = v;
    if (!last) rest = rest.substr(comma + 1);
  }
  // A block is three CONV/BN/ACT triples and an add: about 25 KB of graph and plan a block,
  // so a million blocks took tens of GB before anything was said; 40000 in all (120,000
  // layers, about a GB) is four times what plan --max-depth searches.
  if (n[0] + n[1] + n[2] + n[3] > k_max_blocks) {
    throw invalid_argument("zoo network '" + std::string(name) +
                           "': " + std::to_string(n[0] + n[1] + n[2] + n[3]) +
                           " blocks in all, more " + "than the " + std::to_string(k_max_blocks) +
                           " a ResNet may have here (3 layers and a residual add each); lower "
                           "the block counts");
  }
  return n;
}

}  // namespace

std::vector<std::string> zoo_names() {
  return {"alexnet",      "vgg16",      "resnet50",
          "resnet101",    "resnet152",  "resnet:<n1>,<n2>,<n3>,<n4>",
          "inception_v4", "densenet121"};
}

void check_zoo_name(std::string_view name) {
  for (const char* known :
       {"alexnet", "vgg16", "resnet50", "resnet101", "resnet152", "inception_v4", "densenet121"}) {
    if (name == known) return;
  }
  if (name.starts_with(resnet_prefix)) {
    (void)parse_resnet(name);
    return;
  }
  throw invalid_argument("unknown zoo network '" + std::string(name) +
                         "'; known: " + known_names());
}

network make_network(std::string_view name, const zoo_options& o) {
  if (name == "alexnet") return make_alexnet(o);
  if (name == "vgg16") return make_vgg16(o);
  if (name == "resnet50") return make_resnet({3, 4, 6, 3}, o, "resnet50");
  if (name == "resnet101") return make_resnet({3, 4, 23, 3}, o, "resnet101");
  if (name == "resnet152") return make_resnet({3, 8, 36, 3}, o, "resnet152");
  if (name.starts_with(resnet_prefix)) return make_resnet(parse_resnet(name), o);
  if (name == "inception_v4") return make_inception_v4(o);
  if (name == "densenet121") return make_densenet121(o);
  throw invalid_argument("unknown zoo network '" + std::string(name) +
                         "'; known: " + known_names());
}

std::int64_t zoo_native_side(std::string_view name) {
  if (name == "alexnet") return 227;
  if (name == "inception_v4") return 299;
  if (name == "vgg16" || name == "densenet121" || name == "resnet50" || name == "resnet101" ||
      name == "resnet152" || name.starts_with(resnet_prefix))
    return 224;
  throw invalid_argument("unknown zoo network '" + std::string(name) +
                         "'; known: " + known_names());
}

std::int64_t zoo_min_side(std::string_view name) {
  if (name == "alexnet") return 67;
  if (name == "vgg16") return 32;
  if (name == "inception_v4") return 75;
  if (name == "densenet121") return 29;
  if (name == "resnet50" || name == "resnet101" || name == "resnet152" ||
      name.starts_with(resnet_prefix))
    return 1;
  throw invalid_argument("unknown zoo network '" + std::string(name) +
                         "'; known: " + known_names());
}

}  // namespace memweave
