// The one table of MEMWEAVE_* variables. Reading is stateless (getenv on each call), so
// it is thread-safe as long as nobody calls setenv concurrently; hot paths read their
// options once into their own option structs.
#include "memweave/core/config.hpp"

#include <array>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <stdexcept>

#include "memweave/core/error.hpp"
#include "memweave/core/log.hpp"
#include "memweave/core/units.hpp"

extern char** environ;

namespace memweave {
namespace {

using f = option_form;

// Keep sorted by module (device, alloc, engine, tools). A new variable is one new row here
// and one in README.md (a test compares the two).
constexpr std::array<option_info, 42> k_options{{
    {"MEMWEAVE_DEVICE", "auto", f::choice, "auto|cuda|host|null",
     "backend: cuda, host (simulated device on the CPU), null (planning: no memory touched); "
     "auto = cuda when a GPU is present, else host"},
    {"MEMWEAVE_CUDA_DEVICE",
     "0",
     f::integer,
     "",
     "CUDA device ordinal used by the cuda backend",
     {0, 1023}},
    {"MEMWEAVE_REQUIRE_GPU", "0", f::boolean, "",
     "tests: a GPU test (label gpu) that finds no CUDA device fails instead of skipping"},
    {"MEMWEAVE_DEVICE_BYTES",
     "8GiB",
     f::bytes,
     "",
     "memory capacity of the simulated host and null devices",
     {1, 1.8e19}},
    {"MEMWEAVE_HOST_LINK_GBPS",
     "0",
     f::number,
     "",
     "host backend: throttle host<->device copies to this many GB/s (0 = as fast as memcpy); "
     "null backend: the link speed of its copy-time model (0 = 16 GB/s)",
     {1e-4, 1e6, true}},
    {"MEMWEAVE_POOL_BYTES", "", f::bytes, "",
     "size of the device heap's arena, rounded down to whole blocks; unset or 0 = "
     "MEMWEAVE_POOL_FRACTION of free device memory"},
    {"MEMWEAVE_POOL_FRACTION", "0.9", f::fraction, "",
     "fraction of free device memory taken for the arena when MEMWEAVE_POOL_BYTES is unset or 0"},
    {"MEMWEAVE_BLOCK_BYTES",
     "1024",
     f::bytes,
     "",
     "the heap's block size; every allocation is a whole number of blocks (power of two)",
     {256, 1073741824, false, true}},
    {"MEMWEAVE_FIT", "best", f::choice, "best|first",
     "heap placement: best-fit O(log n), or the SuperNeurons paper's first-fit list"},
    {"MEMWEAVE_POOL_GROW", "0", f::bytes, "",
     "when the arena is full, take a further arena of at least this size (0 = never grow)"},
    {"MEMWEAVE_TRACE", "", f::text, "",
     "write every heap allocation and free to this file (replay with `memweave replay`)"},
    // The minimum is pinned_host_pool::min_bytes (tests/alloc checks they agree).
    {"MEMWEAVE_HOST_POOL_BYTES",
     "4GiB",
     f::bytes,
     "",
     "pinned host memory reserved up front for offloaded tensors",
     {8 << 20, 1.8e19}},
    {"MEMWEAVE_NO_REEXEC", "", f::boolean, "",
     "set to keep memweave programs from re-executing themselves with the static TLS that "
     "jemalloc (the pinned host pool) needs (see README)"},
    {"MEMWEAVE_VERIFY_TRANSFERS", "0", f::boolean, "",
     "checksum every offloaded tensor at offload and after prefetch; a mismatch is an error "
     "naming the tensor (slow: for debugging)"},
    {"MEMWEAVE_LOG", "warn", f::choice, "error|warn|info|debug", "diagnostics written to stderr"},
    {"MEMWEAVE_THREADS",
     "0",
     f::integer,
     "",
     "host kernels: worker threads (0 = all cores); results are bit-identical for any count",
     {1, 4096, true}},
    {"MEMWEAVE_CONV_WS", "dynamic", f::text, "",
     "convolution workspace: dynamic (fastest algorithm whose workspace fits the memory free "
     "at each step), none, max, or fixed:<algorithm>"},
    {"MEMWEAVE_CONV_WS_RESERVE", "0", f::bytes, "",
     "bytes left free when sizing a convolution workspace"},
    {"MEMWEAVE_CUDNN_DETERMINISTIC", "0", f::boolean, "",
     "cuda: only cuDNN convolution algorithms that cuDNN reports deterministic (bit-identical "
     "runs; backward ones may be slower or need more workspace)"},
    {"MEMWEAVE_CONV_CACHE", "", f::text, "",
     "file keeping measured convolution algorithm times across runs (re-measured if corrupt "
     "or foreign; one of another backend, device or thread count is left as it is: one file "
     "each; plan neither reads nor writes it)"},
    {"MEMWEAVE_POLICY", "liveness", f::text, "",
     "memory policy, or a comma-separated list to compare: baseline, liveness, offload, utp, "
     "recompute, all"},
    {"MEMWEAVE_PREFETCH_DISTANCE",
     "1",
     f::integer,
     "",
     "offload/utp/all: in backward, prefetch host-resident tensors for this many checkpoint "
     "layers ahead",
     {1, 1 << 20}},
    {"MEMWEAVE_RECOMPUTE", "cost_aware", f::choice, "cost_aware|speed_centric|memory_centric",
     "recompute/all: how a segment of cheap layers is rebuilt in backward"},
    {"MEMWEAVE_SCHEDULE", "swap,drop", f::choice, "swap,drop|swap|drop",
     "all: what the memory schedule may do to a tensor idle across an over-budget step"},
    {"MEMWEAVE_SCHEDULE_HEADROOM",
     "",
     f::number,
     "",
     "all: fraction of the budget the memory schedule leaves unplanned, for heap fragmentation; "
     "unset = 0.08, and half of it is tried too, and a quarter where half wins (each run on the "
     "null device, the fastest kept)",
     {0, 0.9, true}},
    {"MEMWEAVE_SCHEDULE_MIN_BYTES",
     "",
     f::bytes,
     "",
     "all: tensors smaller than this are never swapped or dropped by the schedule (LDFG's size "
     "threshold); unset = 0, and 1/16384 of the budget is tried too (both run on the null "
     "device, the faster kept)",
     {0, 1.8e19, true}},
    {"MEMWEAVE_SCHEDULE_MIN_DISTANCE",
     "2",
     f::integer,
     "",
     "all: gaps between two uses shorter than this many steps are never swapped (LDFG's "
     "distance bound)",
     {2, 2147483647}},
    {"MEMWEAVE_SCHEDULE_MAX_ACTIONS",
     "0",
     f::integer,
     "",
     "all: at most this many gaps get an action (TFLMS's n_tensors; 0 = no limit)",
     {1, 2147483647, true}},
    {"MEMWEAVE_SCHEDULE_LINK_CHARGE",
     "",
     f::number,
     "",
     "all: share of a swap's link time counted as added time even when its copies hide (the "
     "link is then taken from later swaps); unset = plan with 0.5, 1 and 2, keep the fastest",
     {0, 100, true}},
    {"MEMWEAVE_SCHEDULE_REPLAN", "1", f::boolean, "",
     "all, on host and cuda: re-plan the memory schedule once from the first iteration's "
     "measured step and copy times (on cuda the second's: the first is cold) (Capuchin), then "
     "run it and the model's in turn (iterations 2-5, on cuda 3-6) and keep the faster"},
    {"MEMWEAVE_COST_MODEL", "auto", f::choice, "auto|titan_xp|k40|h100_pcie5",
     "the device the schedule's model stands for: auto is a GPU's own figures on cuda (its "
     "attributes' fp32 and memory peaks, its host link timed) and TITAN Xp (the paper's) on the "
     "host and null devices; or TITAN Xp, Tesla K40, H100 on PCIe 5"},
    {"MEMWEAVE_SCHEDULE_SLACK_MS",
     "",
     f::number,
     "",
     "all: a scheduled prefetch is placed to land at least this many milliseconds before the "
     "step that needs it (LDFG's slack threshold); unset = plan with margins of 0, 0.5 and 1 "
     "times each prefetch's copy time, keep the fastest",
     {0, 1e6, true}},
    {"MEMWEAVE_SCHEDULE_PREFETCH_LB",
     "0",
     f::integer,
     "",
     "all: a scheduled prefetch is issued at least this many steps before its use (TFLMS's lb)",
     {1, 2147483647, true}},
    {"MEMWEAVE_SCHEDULE_PREFETCH_UB",
     "0",
     f::integer,
     "",
     "all: a scheduled prefetch is issued at most this many steps before its use (TFLMS's ub; 0 = "
     "no bound; below MEMWEAVE_SCHEDULE_PREFETCH_LB is an error)",
     {1, 2147483647, true}},
    {"MEMWEAVE_SCHEDULE_KEEP_REBUILT", "auto", f::choice, "auto|yes|no",
     "all: yes = a dropped tensor a replay rebuilt before its own use stays until that use "
     "where the steps between have room (one replay, not two); auto = run both on the null "
     "device, keep the faster"},
    {"MEMWEAVE_SCHEDULE_CONV_MODE", "auto", f::choice, "auto|ladder|mode",
     "all, under MEMWEAVE_CONV_WS none, max or fixed: mode = plan each convolution with the one "
     "algorithm that mode runs, its workspace whole; ladder = with dynamic selection's "
     "workspaces within a share of the budget (the run still takes the mode's); auto = run both "
     "on the null device, keep the faster"},
    {"MEMWEAVE_SCHEDULE_COMPRESS", "none", f::choice, "none|fp16",
     "all: fp16 = scheduled swaps of fp32 tensors cross the link as FP16, half the bytes (LDFG; "
     "lossy: results are no longer bit-identical, the round-trip error is reported)"},
    {"MEMWEAVE_SPLIT_WEIGH", "1", f::boolean, "",
     "all with --split: run the split plans whose micro-steps fit 100, 85, 70, 55 and 40 % of the "
     "budget on the null device, keep the fastest (0 = the fewest micro-batches that fit)"},
    {"MEMWEAVE_SPLIT_REGIONS",
     "64",
     f::integer,
     "",
     "all with --split: then mix the plans step by step: the steps where they differ are cut "
     "into regions, each tries every other plan's micro-batches, kept where faster on the null "
     "device; passes of 4, 8, ... regions up to this many (0 = the fastest whole plan)",
     {0, 1024, true}},
    {"MEMWEAVE_SPLIT_COMPRESS", "none", f::choice, "none|fp16",
     "utp/all with --split: fp16 = the split steps' micro-tensors that are activations (not "
     "the batch, BN inputs or the loss's output) are held in host memory and cross the link as "
     "FP16, half the bytes (LDFG for TSPLIT; lossy: results are no longer bit-identical, the "
     "largest rounding error is reported)"},
    {"MEMWEAVE_BUCKET_BYTES",
     "25MiB",
     f::bytes,
     "",
     "data parallelism: gradients of consecutive layers are reduced together in buckets of "
     "about this size, each started as soon as backward completes it (as PyTorch DDP)",
     {1, 1.8e19}},
    {"MEMWEAVE_NET_GBPS",
     "100",
     f::number,
     "",
     "plan --ranks: the network between devices, Gb/s, for the ring allreduce's time",
     {1e-3, 1e6}},
}};

const option_info& row(std::string_view name) {
  const option_info* info = find_option(name);
  if (info == nullptr) {
    throw std::logic_error("memweave: option " + std::string(name) + " is not in the table");
  }
  return *info;
}

// The value to parse: the environment's, else the default; nullopt when neither.
std::optional<std::string> effective(std::string_view name) {
  const option_info& info = row(name);
  if (auto v = option_raw(name)) return v;
  if (info.default_value.empty()) return std::nullopt;
  return std::string(info.default_value);
}

bool in_choices(std::string_view choices, std::string_view value) {
  while (!choices.empty()) {
    const auto bar = choices.find('|');
    if (choices.substr(0, bar) == value) return true;
    if (bar == std::string_view::npos) break;
    choices.remove_prefix(bar + 1);
  }
  return false;
}

// "a whole number from 1 to 4096 (or 0)".
std::string range_text(const option_info& info) {
  const option_range& r = info.range;
  std::string out = info.form == f::integer ? "a whole number"
                    : r.power_of_two        ? "a power of two"
                    : info.form == f::bytes ? "a size"
                                            : "a number";
  if (info.form == f::bytes && r.max >= 1.8e19) {
    if (r.min == 1) out = "a positive size";
    if (r.min > 1) out += " of at least " + format_bytes(static_cast<std::size_t>(r.min));
  } else if (info.form == f::bytes) {
    out += " from " + format_bytes(static_cast<std::size_t>(r.min)) + " to " +
           format_bytes(static_cast<std::size_t>(r.max));
  } else if (info.form == f::integer) {
    // Whole numbers in full: format_number's six digits would print 1048576 as 1.04858e+06.
    out += " from " + std::to_string(static_cast<std::int64_t>(r.min)) + " to " +
           std::to_string(static_cast<std::int64_t>(r.max));
  } else {
    out += " from " + format_number(r.min) + " to " + format_number(r.max);
  }
  if (r.zero_allowed && r.min > 0) out = "0 or " + out;
  return out;
}

void check_range(const option_info& info, const std::string& value, std::string_view knob,
                 double v) {
  const option_range& r = info.range;
  if ((v >= r.min && v <= r.max) || (r.zero_allowed && v == 0)) return;
  // A size past an unbounded row's range is past what a size can be: said, as the figure
  // (it said "expected a size" of 99999999999999999999 bytes; session 44's hostile run).
  const bool past_sizes = info.form == f::bytes && r.max >= 1.8e19 && v > r.max;
  throw invalid_argument(knob_value(knob, value) + " is out of range: expected " +
                         range_text(info) + (past_sizes ? " below 16 EiB" : "") + "; " +
                         std::string(knob_remedy(knob)));
}

// Throws when `value` does not have the row's form and range; errors name `knob`.
void check(const option_info& info, const std::string& value, std::string_view knob) {
  switch (info.form) {
    case f::bytes: {
      // 16 EiB and more is out of the row's range too (it said "not a size below 16 EiB").
      const std::optional<std::size_t> bytes = parse_bytes_unbounded(value, knob);
      check_range(info, value, knob,
                  bytes ? static_cast<double>(*bytes) : std::numeric_limits<double>::infinity());
      // As the heap refuses it (`config` showed MEMWEAVE_BLOCK_BYTES=4097 as good, and a run
      // refused it; session 45's hostile run).
      if (info.range.power_of_two && !std::has_single_bit(*bytes)) {
        throw invalid_argument(knob_value(knob, value) + " is " + std::to_string(*bytes) +
                               " bytes: expected " + range_text(info) + "; " +
                               std::string(knob_remedy(knob)));
      }
    } break;
    case f::fraction: {
      const double v = parse_double_unbounded(value, knob);
      if (!(v > 0.0 && v <= 1.0)) {
        throw invalid_argument(knob_value(knob, value) +
                               " is out of range: expected a fraction in (0, 1]; " +
                               std::string(knob_remedy(knob)));
      }
      break;
    }
    case f::number:
      check_range(info, value, knob, parse_double_unbounded(value, knob));
      break;
    case f::integer: {
      // parse_int's own message would name int64's range, not the row's.
      std::int64_t v = 0;
      try {
        v = parse_int(value, knob, INT64_MIN, INT64_MAX);
      } catch (const invalid_argument&) {
        // Digits past int64 are out of the row's range (the wording of every other number).
        std::string_view digits = trim(value);
        if (!digits.empty() && (digits.front() == '-' || digits.front() == '+')) {
          digits.remove_prefix(1);
        }
        const bool whole =
            !digits.empty() && digits.find_first_not_of("0123456789") == std::string_view::npos;
        throw invalid_argument(knob_value(knob, value) +
                               (whole ? " is out of range: expected " : " is not ") +
                               range_text(info) + "; " + std::string(knob_remedy(knob)));
      }
      check_range(info, value, knob, static_cast<double>(v));
      break;
    }
    case f::boolean:
      (void)parse_bool(value, knob);
      break;
    case f::choice:
      if (!in_choices(info.choices, value)) {
        throw invalid_argument(knob_value(knob, value) + " is not one of " +
                               std::string(info.choices) + "; " + std::string(knob_remedy(knob)));
      }
      break;
    case f::text:
      break;
  }
}

void check(const option_info& info, const std::string& value) {
  check(info, value, info.name);
}

}  // namespace

std::span<const option_info> option_table() noexcept {
  return k_options;
}

const option_info* find_option(std::string_view name) noexcept {
  for (const auto& o : k_options) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

namespace {
// Per row of k_options: overridden on the command line (override_option), read as unset.
std::array<std::atomic<bool>, k_options.size()> g_overridden{};
}  // namespace

void override_option(std::string_view name) {
  const option_info& info = row(name);
  g_overridden[static_cast<std::size_t>(&info - k_options.data())].store(true);
}

void reset_option_overrides() noexcept {
  for (auto& o : g_overridden) o.store(false);
}

std::optional<std::string> option_raw(std::string_view name) {
  const option_info& info = row(name);
  if (g_overridden[static_cast<std::size_t>(&info - k_options.data())].load()) return std::nullopt;
  const char* v = std::getenv(std::string(name).c_str());
  if (v == nullptr || *v == '\0') return std::nullopt;
  // White space around a value is dropped as number parsing drops it, for every form but
  // text (a path may hold it): `MEMWEAVE_LOG=' debug'` was refused where `' 1 '` was taken.
  const std::string_view value = info.form == f::text ? std::string_view(v) : trim(v);
  if (value.empty()) return std::nullopt;
  return std::string(value);
}

std::optional<std::size_t> option_bytes(std::string_view name) {
  auto v = effective(name);
  if (!v) return std::nullopt;
  check(row(name), *v);
  return parse_bytes(*v, name);
}

std::optional<double> option_double(std::string_view name) {
  auto v = effective(name);
  if (!v) return std::nullopt;
  check(row(name), *v);
  return parse_double(*v, name);
}

std::optional<std::int64_t> option_int(std::string_view name) {
  auto v = effective(name);
  if (!v) return std::nullopt;
  check(row(name), *v);
  return parse_int(*v, name, INT64_MIN, INT64_MAX);
}

std::int64_t parse_option_int(std::string_view name, std::string_view text, std::string_view knob) {
  const std::string value(text);
  check(row(name), value, knob);
  return parse_int(value, knob, INT64_MIN, INT64_MAX);
}

double parse_option_double(std::string_view name, std::string_view text, std::string_view knob) {
  const std::string value(text);
  check(row(name), value, knob);
  return parse_double(value, knob);
}

std::size_t parse_option_bytes(std::string_view name, std::string_view text,
                               std::string_view knob) {
  const std::string value(text);
  check(row(name), value, knob);
  return parse_bytes(value, knob);
}

bool option_bool(std::string_view name) {
  auto v = effective(name);
  if (!v) return false;
  check(row(name), *v);
  return parse_bool(*v, name);
}

std::string option_string(std::string_view name) {
  auto v = effective(name);
  if (!v) return {};
  check(row(name), *v);
  return *v;
}

std::string option_error(std::string_view name) {
  const auto v = option_raw(name);
  if (!v) return {};
  try {
    check(row(name), *v);
  } catch (const invalid_argument& e) {
    return e.what();
  }
  return {};
}

void validate_environment() {
  for (const auto& info : k_options) {
    if (auto v = option_raw(info.name)) check(info, *v);
  }
  static bool warned = false;  // warn about typos once per process
  if (warned) return;
  warned = true;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    if (!entry.starts_with("MEMWEAVE_")) continue;
    const std::string_view name = entry.substr(0, entry.find('='));
    if (find_option(name) == nullptr && name != "MEMWEAVE_SOURCE_DIR") {
      log(log_level::warn, std::string("unknown variable ") + std::string(name) +
                               " is ignored (typo? `memweave config` lists the known ones)");
    }
  }
}

std::string describe_form(const option_info& info) {
  switch (info.form) {
    case f::bytes:
      return range_text(info) +
             (info.range.power_of_two ? " such as 1KiB or 4KiB" : " such as 512MiB or 8GiB");
    case f::fraction:
      return "a fraction in (0, 1]";
    case f::number:
    case f::integer:
      return range_text(info);
    case f::boolean:
      return "a boolean (1/0, true/false)";
    case f::choice:
      return "one of " + std::string(info.choices);
    case f::text:
      return "text";
  }
  return "text";
}

std::string option_table_markdown() {
  std::string out = "| variable | default | meaning |\n|---|---|---|\n";
  for (const auto& o : k_options) {
    out += "| `" + std::string(o.name) + "` | " +
           (o.default_value.empty() ? std::string("unset")
                                    : "`" + std::string(o.default_value) + "`") +
           " | " + std::string(o.meaning) + " |\n";
  }
  return out;
}

}  // namespace memweave
