// Fuzz of everything that reads user input: the command-line parser (and the options it
// turns into), the zoo's sizes, the heap trace reader and replayer, the conv algorithm
// cache file and the CIFAR-10 reader. A seeded mutation generator feeds each for a bounded
// time (k_budget: a few seconds in all, so it runs in CI under ASan+UBSan); every input
// must be accepted or rejected with a memweave::error naming it. Anything else (another
// exception, a crash, a sanitizer report, a wrapped size) fails, printing the seed, the
// round and the input, which replays it: the generator is deterministic per seed.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cli_harness.hpp"
#include "memweave/alloc/device_heap.hpp"
#include "memweave/alloc/trace.hpp"
#include "memweave/conv_workspace/conv_algorithm_cache.hpp"
#include "memweave/conv_workspace/conv_workspace_selector.hpp"
#include "memweave/core/checked.hpp"
#include "memweave/core/log.hpp"
#include "memweave/device/device.hpp"
#include "memweave/engine/data_source.hpp"
#include "memweave/engine/zoo.hpp"
#include "tools/cli_args.hpp"
#include "tools/network_run.hpp"
#include "tools/training_options.hpp"

namespace memweave {
namespace {

constexpr std::uint64_t k_seed = 11;                        // issue 11
constexpr auto k_budget = std::chrono::milliseconds(1200);  // per target
constexpr int k_max_rounds = 20000;

// Values that break parsers: limits of every integer width, signs, exponents, NaN, junk.
const std::vector<std::string> k_interesting = {"0",
                                                "1",
                                                "-1",
                                                "2",
                                                "127",
                                                "128",
                                                "255",
                                                "256",
                                                "65536",
                                                "1e3",
                                                "1e99",
                                                "-1e99",
                                                "1e-9",
                                                "1e-320",
                                                "nan",
                                                "inf",
                                                "-inf",
                                                "0x10",
                                                "+1",
                                                "--",
                                                "",
                                                " ",
                                                "1.5",
                                                ".",
                                                "1..2",
                                                "2147483647",
                                                "2147483648",
                                                "4294967295",
                                                "4294967296",
                                                "4294967297",
                                                "9223372036854775807",
                                                "9223372036854775808",
                                                "18446744073709551615",
                                                "18446744073709551616",
                                                "99999999999999999999999",
                                                "1K",
                                                "1G",
                                                "1T",
                                                "16E",
                                                "8GiB",
                                                "1.8e19",
                                                "\t",
                                                "\n",
                                                ",",
                                                "=",
                                                ":",
                                                "a",
                                                "\xff",
                                                std::string(1, '\0')};

class mutator {
 public:
  explicit mutator(std::uint64_t seed) : rng_(seed) {}

  std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(rng_() % n); }
  bool coin() { return rng_() & 1; }
  const std::string& interesting() { return k_interesting[below(k_interesting.size())]; }

  // One to four random edits of `s`: byte flips, insertions, deletions, duplications,
  // truncation, and a run of digits replaced by an interesting value.
  std::string mutate(std::string s) {
    const std::size_t edits = 1 + below(4);
    for (std::size_t e = 0; e < edits; ++e) {
      const std::size_t at = below(s.size() + 1);
      switch (below(7)) {
        case 0:
          if (!s.empty()) s[below(s.size())] ^= static_cast<char>(1u << below(8));
          break;
        case 1:
          s.insert(at, 1, static_cast<char>(rng_()));
          break;
        case 2:
          if (at < s.size()) s.erase(at, 1 + below(8));
          break;
        case 3:
          if (at < s.size()) s.insert(at, s.substr(at, 1 + below(16)));
          break;
        case 4:
          s.resize(below(s.size() + 1));
          break;
        case 5: {
          std::size_t b = at;
          while (b < s.size() && !std::isdigit(static_cast<unsigned char>(s[b]))) ++b;
          std::size_t end = b;
          while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end]))) ++end;
          if (b < s.size()) s.replace(b, end - b, interesting());
          break;
        }
        default:
          s.insert(at, interesting());
          break;
      }
    }
    return s;
  }

 private:
  std::mt19937_64 rng_;
};

// Runs `one(m, round)` for k_budget (at most k_max_rounds rounds); a memweave::error is a
// rejection; anything else fails the test, naming the round and `describe()`'s input.
void fuzz(const std::string& target,
          const std::function<void(mutator&, int, std::string& input)>& one) {
  mutator m(k_seed);
  const auto end = std::chrono::steady_clock::now() + k_budget;
  int rounds = 0, rejected = 0;
  for (; rounds < k_max_rounds && std::chrono::steady_clock::now() < end; ++rounds) {
    std::string input;
    try {
      one(m, rounds, input);
    } catch (const error&) {
      ++rejected;
    } catch (const std::exception& e) {
      ADD_FAILURE() << target << ": seed " << k_seed << " round " << rounds << " threw "
                    << typeid(e).name() << " '" << e.what()
                    << "' (not a memweave::error) for: " << testing::PrintToString(input);
      return;
    }
  }
  std::cout << target << ": " << rounds << " inputs, " << rejected << " rejected\n";
  EXPECT_GT(rounds, 10) << target;
}

// Silences the warnings a corrupt input logs (thousands of them), for one test.
class quiet_log {
 public:
  quiet_log() { set_log_level(log_level::error); }
  ~quiet_log() { set_log_level(log_level::warn); }
};

// ---- the command line

const std::vector<std::string> k_options = {
    "net",         "batch",     "image-side",        "width",     "classes",  "policy",
    "budget",      "fit",       "conv-ws",           "recompute", "seed",     "lr",
    "threads",     "host-pool", "prefetch-distance", "json",      "csv",      "svg",
    "iterations",  "max-batch", "max-depth",         "bugdet",    "momentum", "weight-decay",
    "lr-schedule", "warmup"};
const std::vector<std::string> k_good_values = {"resnet:1,1,1,1",
                                                "16",
                                                "32",
                                                "0.25",
                                                "10",
                                                "liveness,utp",
                                                "16MiB",
                                                "best",
                                                "fixed:direct",
                                                "cost_aware",
                                                "7",
                                                "0.01",
                                                "2",
                                                "1GiB",
                                                "1",
                                                "/tmp/memweave_fuzz.json",
                                                "0.9",
                                                "step:3:0.5",
                                                "cosine:10"};

TEST(input_fuzz_test, command_line_options_are_accepted_or_rejected_by_name) {
  fuzz("command line", [](mutator& m, int, std::string& input) {
    std::vector<std::string> words = {"memweave", "plan", "--net",
                                      m.below(8) ? "resnet:1,1,1,1" : m.mutate("resnet:1,1,1,1")};
    // Distinct options, mostly known ones with good values, each sometimes mutated.
    std::vector<std::string> options = k_options;
    const std::size_t n = m.below(6);
    for (std::size_t i = 0; i < n && !options.empty(); ++i) {
      const std::size_t pick = m.below(options.size());
      std::string option = "--" + options[pick];
      options.erase(options.begin() + static_cast<std::ptrdiff_t>(pick));
      if (m.below(16) == 0) option = m.mutate(option);
      std::string value =
          m.below(3) ? k_good_values[m.below(k_good_values.size())] : m.interesting();
      if (m.below(3) == 0) value = m.mutate(value);
      if (m.below(4) == 0) {
        words.push_back(option + "=" + value);
      } else {
        words.push_back(option);
        if (m.below(8) != 0) words.push_back(value);
      }
    }
    for (const auto& w : words) input += w + " ";
    std::vector<const char*> argv;
    for (const auto& w : words) argv.push_back(w.c_str());
    cli_args args(static_cast<int>(argv.size()), argv.data(), 2, {"max-batch", "max-depth"});
    network_run_options o = read_network_run_options(args);
    read_training_options(args, o);
    (void)args.get_int("iterations", 1, std::numeric_limits<int>::max());
    (void)args.flag("max-batch");
    (void)args.flag("max-depth");
    args.reject_unused();
    // What was accepted is in range.
    EXPECT_GE(o.zoo.batch, 1) << input;
    EXPECT_GT(o.zoo.width_scale, 0.0) << input;
    EXPECT_LE(o.zoo.width_scale, k_max_width_scale) << input;
    EXPECT_TRUE(o.executor.learning_rate > 0.0f && std::isfinite(o.executor.learning_rate))
        << input;
    EXPECT_GE(o.executor.threads, 0) << input;
    EXPECT_LE(o.executor.threads, 4096) << input;
    EXPECT_GE(o.executor.prefetch_distance, 1) << input;
    EXPECT_TRUE(o.executor.momentum >= 0.0f && o.executor.momentum < 1.0f) << input;
    EXPECT_TRUE(o.executor.weight_decay >= 0.0f && o.executor.weight_decay <= 1.0f) << input;
    EXPECT_GE(o.schedule.warmup, 0) << input;
    EXPECT_GE(o.schedule.every, 1) << input;
    EXPECT_GE(o.schedule.t_max, 1) << input;
  });
}

// Every network the zoo builds from sizes in the command line's ranges has tensors that fit
// an address space; the others are rejected naming the layer.
TEST(input_fuzz_test, zoo_sizes_never_wrap) {
  const std::vector<std::string> nets = {"resnet:1,1,1,1", "alexnet", "vgg16", "densenet121",
                                         "inception_v4"};
  const std::vector<std::int64_t> big = {1, 2, 3, 7, 64, 1000, 65535, 1 << 20, 2147483647};
  fuzz("zoo sizes", [&](mutator& m, int, std::string& input) {
    zoo_options z;
    z.batch = big[m.below(big.size())];
    z.image_side = m.coin() ? 0 : big[m.below(6)] + 60;
    z.classes = big[m.below(big.size())];
    z.width_scale = m.coin() ? 1.0 / static_cast<double>(big[m.below(5)])
                             : static_cast<double>(big[m.below(5)]);
    const std::string& net = nets[m.below(nets.size())];
    input = net + " batch " + std::to_string(z.batch) + " side " + std::to_string(z.image_side) +
            " classes " + std::to_string(z.classes) + " width " + std::to_string(z.width_scale);
    const network n = make_network(net, z);
    for (const layer& l : n.layers()) {
      ASSERT_LE(l.output_shape.bytes(), k_max_tensor_bytes) << input << " " << l.name;
      for (const auto& p : l.param_tensors) {
        ASSERT_LE(p.shape.bytes(), k_max_tensor_bytes) << input << " " << l.name;
      }
    }
  });
}

// ---- files

TEST(input_fuzz_test, traces_are_read_and_replayed_or_rejected_naming_the_line) {
  synthetic_trace_options so;
  so.layers = 6;
  so.iterations = 1;
  so.batch = 1;
  const std::string good = test::temp("fuzz_base.trace");
  write_synthetic_trace(good, so);
  const std::string base = test::slurp(good);
  std::filesystem::remove(good);
  device_options d;
  d.kind = "null";
  d.capacity_bytes = std::size_t{1} << 36;
  auto dev = make_device(d);
  heap_options h;
  h.pool_bytes = std::size_t{64} << 20;
  device_heap heap(*dev, h);
  quiet_log quiet;
  fuzz("trace", [&](mutator& m, int, std::string& input) {
    input = m.mutate(base);
    if (m.below(4) == 0) input = m.mutate(input);
    const auto events = parse_trace(input, "fuzz.trace");
    const replay_result r = replay_events(events, heap);
    EXPECT_EQ(heap.stats().bytes_in_use, 0u) << "a replay leaves the heap as it found it";
    EXPECT_EQ(r.events, events.size());
  });
}

TEST(input_fuzz_test, conv_caches_are_trusted_or_measured_again_never_thrown) {
  const std::string fp = "host threads=2";
  const std::string base = "# memweave-conv-cache v1 " + fp +
                           "\nk1\tdirect 0 0.5\tim2col_image 4096 0.125\n"
                           "k2\tdirect 0 1e-06\tim2col_batch:2 65536 0.25\n";
  const std::string path = test::temp("fuzz.convcache");
  quiet_log quiet;
  fuzz("conv cache", [&](mutator& m, int, std::string& input) {
    input = m.mutate(base);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << input;
    conv_algorithm_cache c;
    (void)c.load(path, fp);  // never throws: a bad file is measured again
    for (const char* mode : {"dynamic", "none", "max", "fixed:direct", "fixed:im2col_image"}) {
      conv_ws_options o = conv_ws_options::parse(mode, "--conv-ws");
      o.cache_path = path;
      conv_workspace_selector s(o, fp);
      for (const char* key : {"k1", "k2"}) {
        const auto measure = [] {
          return std::vector<conv_candidate>{{"direct", 0, 1.0}, {"im2col_image", 64, 0.5}};
        };
        const auto& candidates = s.candidates(key, measure);
        (void)s.choose(candidates, m.below(1 << 20));
      }
    }
  });
  std::filesystem::remove(path);
}

TEST(input_fuzz_test, cifar_files_are_read_or_rejected_naming_the_file) {
  constexpr std::size_t record = 1 + 3 * 32 * 32;
  std::string base(3 * record, '\x80');
  for (std::size_t r = 0; r < 3; ++r) base[r * record] = static_cast<char>(r * 4);
  const std::string path = test::temp("fuzz.cifar.bin");
  std::vector<float> images(2 * (record - 1)), labels(2);
  fuzz("cifar10", [&](mutator& m, int round, std::string& input) {
    std::string bytes = base;
    // Few edits keep the size a multiple of a record often enough to reach the labels.
    if (m.coin()) {
      bytes[m.below(bytes.size())] = static_cast<char>(m.below(256));
    } else {
      bytes = m.mutate(bytes);
    }
    input = "size " + std::to_string(bytes.size()) + ", labels";
    for (std::size_t r = 0; r * record < bytes.size(); ++r) {
      // Appended in two parts: GCC 12 warns (wrongly) on " " + std::string&& here.
      input += ' ';
      input += std::to_string(static_cast<unsigned char>(bytes[r * record]));
    }
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    auto source = make_cifar10_source(path);
    source->fill(round, 2, images.data(), labels.data());
    for (float l : labels) EXPECT_TRUE(l >= 0 && l <= 9) << input;
  });
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace memweave
