// The search of largest_fit.hpp. Single-threaded.
#include "largest_fit.hpp"

#include <charconv>
#include <chrono>

#include "memweave/core/error.hpp"

namespace memweave {

largest_fit search_largest(std::int64_t low, std::int64_t high,
                           const std::function<bool(std::int64_t)>& fits) {
  const auto t0 = std::chrono::steady_clock::now();
  largest_fit r;
  auto probe = [&](std::int64_t v) {
    ++r.probes;
    return fits(v);
  };
  if (probe(low)) {
    // Double until a failure, then bisect between the last success and it.
    std::int64_t good = low, bad = high + 1;
    for (std::int64_t v = low * 2; v <= high; v *= 2) {
      if (!probe(v)) {
        bad = v;
        break;
      }
      good = v;
    }
    if (bad == high + 1 && good < high) {
      if (probe(high))
        good = high;
      else
        bad = high;
    }
    while (bad - good > 1) {
      const std::int64_t mid = good + (bad - good) / 2;
      (probe(mid) ? good : bad) = mid;
    }
    r.value = good;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::array<std::int64_t, 4> resnet_blocks(const std::string& net) {
  if (net == "resnet50") return {3, 4, 6, 3};
  if (net == "resnet101") return {3, 4, 23, 3};
  if (net == "resnet152") return {3, 8, 36, 3};
  if (net.starts_with("resnet:")) {
    std::array<std::int64_t, 4> b{};
    const char* p = net.data() + 7;
    const char* end = net.data() + net.size();
    for (int i = 0; i < 4; ++i) {
      auto [next, ec] = std::from_chars(p, end, b[i]);
      if (ec != std::errc() || b[i] < 1) break;
      p = next;
      if (i < 3) {
        if (p == end || *p != ',') break;
        ++p;
      } else if (p == end) {
        return b;
      }
    }
  }
  throw invalid_argument(
      "--max-depth grows n3 of the ResNet family: give --net resnet50, "
      "resnet101, resnet152 or resnet:<n1>,<n2>,<n3>,<n4>, not '" +
      net + "'");
}

}  // namespace memweave
