// Heap traces: reading (strict: every malformed line is an error naming its number and
// what was expected), writing, replaying into a heap, and the synthetic training trace.
// Invariants: a trace read back equals the events written; a replay leaves the heap's
// allocations as it found them. Nothing here keeps state between calls: thread-safe as
// far as the heap it drives is.
#include "memweave/alloc/trace.hpp"

#include "memweave/alloc/device_heap.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <unordered_map>

#include "memweave/core/checked.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/log.hpp"
#include "memweave/core/quoted.hpp"

namespace memweave {

namespace {

// Splits on runs of spaces/tabs.
std::vector<std::string_view> fields_of(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const std::size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

template <class T>
bool parse_number(std::string_view s, T& out) {
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && p == end;
}

}  // namespace

namespace {

// Parses one event line (not the header, a comment or blank); throws naming `at`.
trace_event parse_event(std::string_view line, std::uint64_t line_no, const std::string& at) {
  const auto f = fields_of(line);
  if (f.size() != 5) {
    throw invalid_argument(at + "expected 5 fields 't_ns op offset bytes stream', found " +
                           std::to_string(f.size()) + " in " + quote_text(line));
  }
  trace_event e;
  e.line = line_no;
  if (!parse_number(f[0], e.t_ns)) {
    throw invalid_argument(at + "field 1 (t_ns) must be a non-negative integer, found " +
                           quote_text(f[0]));
  }
  if (f[1] == "a") {
    e.op = trace_op::alloc;
  } else if (f[1] == "f") {
    e.op = trace_op::free;
  } else {
    throw invalid_argument(at + "field 2 (op) must be 'a' (allocation) or 'f' (free), found " +
                           quote_text(f[1]));
  }
  if (!parse_number(f[2], e.offset)) {
    throw invalid_argument(at + "field 3 (offset) must be a non-negative integer, found " +
                           quote_text(f[2]));
  }
  if (!parse_number(f[3], e.bytes) || e.bytes == 0 || e.bytes > k_max_tensor_bytes) {
    throw invalid_argument(at + "field 4 (bytes) must be a positive integer, found " +
                           quote_text(f[3]) + " (at most " + std::to_string(k_max_tensor_bytes) +
                           ", 128 TiB)");
  }
  if (!parse_number(f[4], e.stream) || e.stream < 0) {
    throw invalid_argument(at + "field 5 (stream) must be an integer from 0 to " +
                           std::to_string(std::numeric_limits<int>::max()) + ", found " +
                           quote_text(f[4]));
  }
  return e;
}

// What follows the header's fixed text: " block_bytes=N", N a block size the heap takes (up
// to MEMWEAVE_BLOCK_BYTES's 1 GiB), or nothing (older traces: the default 1 KiB). Returns N.
std::size_t check_header(std::string_view rest, const std::string& at) {
  const auto f = fields_of(rest);
  if (f.empty()) return 1024;
  constexpr std::string_view key = "block_bytes=";
  std::uint64_t block = 0;
  if (f.size() != 1 || !f[0].starts_with(key) || !parse_number(f[0].substr(key.size()), block) ||
      !valid_block_bytes(block) || block > (std::uint64_t{1} << 30)) {
    throw invalid_argument(at + "the header's " + quote_text(rest) +
                           " is not ' block_bytes=N' with N a power of two from 256 to 1 GiB "
                           "(the heap's block size)");
  }
  return static_cast<std::size_t>(block);
}

// A trace's lines taken one at a time: what parse_trace (text in memory) and read_trace (a
// file read line by line, its text never held whole: a trace of 10 M events took 1.2 GB, half
// of it the text) share.
class trace_lines {
 public:
  trace_lines(std::string_view source, std::size_t* block_bytes)
      : where_("trace " + quote_text(source)), block_bytes_(block_bytes) {}

  // One line, without its newline; `unterminated`: the last, which had none.
  void take(std::string_view line, bool unterminated) {
    ++line_no_;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::string at = where_ + " line " + std::to_string(line_no_) + ": ";
    if (!header_seen_) {
      if (!line.starts_with(trace_header)) {
        throw invalid_argument(at + "expected the header " + quote_text(trace_header) + ", found " +
                               quote_text(line) +
                               "; is this a memweave heap trace (MEMWEAVE_TRACE)?");
      }
      const std::size_t block = check_header(line.substr(trace_header.size()), at);
      if (block_bytes_ != nullptr) *block_bytes_ = block;
      header_seen_ = true;
      return;
    }
    const std::size_t first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos || line[first] == '#') return;
    if (!unterminated) {
      events_.push_back(parse_event(line, line_no_, at));
      // The writer stamps events in the order the heap serves them: time going back is two
      // traces run together or an edited file, whose replay would mean nothing.
      if (events_.size() > 1 && events_.back().t_ns < events_[events_.size() - 2].t_ns) {
        throw invalid_argument(at + "t_ns " + std::to_string(events_.back().t_ns) +
                               " is before line " +
                               std::to_string(events_[events_.size() - 2].line) + "'s " +
                               std::to_string(events_[events_.size() - 2].t_ns) +
                               ": events must be in time order (two traces run together?)");
      }
      return;
    }
    try {
      events_.push_back(parse_event(line, line_no_, at));
    } catch (const invalid_argument& e) {
      // Keep everything before it: the trace of an interrupted run is still a trace.
      log(log_level::warn, std::string(e.what()) +
                               "; this unterminated last line is what an interrupted run "
                               "leaves, so it is ignored and the " +
                               std::to_string(events_.size()) + " events before it are kept");
    }
  }

  std::vector<trace_event> finish() && {
    if (!header_seen_) {
      throw invalid_argument(where_ + " is empty: expected the header " + quote_text(trace_header));
    }
    return std::move(events_);
  }

 private:
  std::string where_;
  std::size_t* block_bytes_;
  std::vector<trace_event> events_;
  std::uint64_t line_no_ = 0;
  bool header_seen_ = false;
};

}  // namespace

std::vector<trace_event> parse_trace(std::string_view text, std::string_view source,
                                     std::size_t* block_bytes) {
  trace_lines lines(source, block_bytes);
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    // A last line without its newline is what a run interrupted mid-write leaves.
    const bool unterminated = eol == std::string_view::npos;
    if (unterminated) eol = text.size();
    lines.take(text.substr(pos, eol - pos), unterminated);
    pos = eol + 1;
  }
  return std::move(lines).finish();
}

std::vector<trace_event> read_trace(const std::string& path, std::size_t* block_bytes) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
    // A device or a pipe (/dev/zero) would be read until memory runs out.
    throw invalid_argument("cannot read trace '" + path +
                           "': not a regular file; give a file written by MEMWEAVE_TRACE");
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw invalid_argument("cannot read trace '" + path +
                           "': " + (errno != 0 ? std::strerror(errno) : "open failed") +
                           "; check the path (written by MEMWEAVE_TRACE)");
  }
  // The header first: a file that is not a trace (gigabytes of zeros, with no newline for a
  // line to end at) is refused before its first line is read whole.
  // (256 bytes: the message quotes up to 60 of its first line and marks a longer one.)
  std::string head(256, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(in.gcount()));
  if (!head.starts_with(trace_header)) {
    return parse_trace(head, path, block_bytes);  // throws: not a trace
  }
  in.clear();
  in.seekg(0);
  trace_lines lines(path, block_bytes);
  std::string line;
  // getline sets eof on a last line without its newline: an unterminated one.
  while (std::getline(in, line)) lines.take(line, in.eof());
  if (in.bad()) {
    throw invalid_argument("cannot read trace '" + path + "': " + std::strerror(errno));
  }
  return std::move(lines).finish();
}

void write_trace(const std::string& path, std::span<const trace_event> events,
                 std::size_t block_bytes) {
  // Written beside `path` and renamed over it: a full disk leaves no partial trace that a
  // later replay would take for a whole one.
  const std::string part = path + ".tmp-" + std::to_string(::getpid());
  std::FILE* f = std::fopen(part.c_str(), "w");
  if (f == nullptr) {
    throw invalid_argument("cannot write trace '" + path + "': " + std::strerror(errno) +
                           "; check the directory exists and is writable");
  }
  std::string out =
      std::string(trace_header) + " block_bytes=" + std::to_string(block_bytes) + "\n";
  char buf[128];
  for (const trace_event& e : events) {
    const int n = std::snprintf(buf, sizeof buf, "%llu %c %llu %llu %d\n",
                                static_cast<unsigned long long>(e.t_ns), static_cast<char>(e.op),
                                static_cast<unsigned long long>(e.offset),
                                static_cast<unsigned long long>(e.bytes), e.stream);
    out.append(buf, static_cast<std::size_t>(n));
  }
  const bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size() && std::fflush(f) == 0;
  int err = errno;
  const bool closed = std::fclose(f) == 0;
  if (ok && !closed) err = errno;
  if (!ok || !closed || std::rename(part.c_str(), path.c_str()) != 0) {
    if (ok && closed) err = errno;
    std::remove(part.c_str());
    throw invalid_argument("cannot write trace '" + path + "': " + std::strerror(err) +
                           "; nothing written");
  }
}

// ---------------------------------------------------------------- replay

replay_result replay_events(std::span<const trace_event> events, device_heap& heap) {
  // Compile first (untimed): give each allocation a slot, point each free at its slot,
  // and find the event at which the trace's live bytes first reach their peak.
  constexpr std::uint32_t no_slot = UINT32_MAX;
  std::vector<std::uint32_t> slot_of(events.size(), no_slot);
  std::unordered_map<std::uint64_t, std::pair<std::uint32_t, std::uint64_t>> live;  // offset ->
                                                                                    // (slot, line)
  std::unordered_map<std::uint64_t, std::uint64_t> freed;  // offset -> line of its free,
                                                           // until allocated again
  // The live allocations' ranges: offset -> (end, line). Two that overlap are not one heap's.
  std::map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>> ranges;
  std::uint32_t slots = 0;
  std::size_t requested_live = 0, peak_requested = 0, rounded_live = 0, peak_rounded = 0;
  std::size_t peak_at = SIZE_MAX;
  replay_result r;
  r.events = events.size();
  std::vector<std::uint64_t> bytes_of_slot;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const trace_event& e = events[i];
    if (e.op == trace_op::alloc) {
      freed.erase(e.offset);
      auto [it, fresh] = live.try_emplace(e.offset, slots, e.line);
      if (!fresh) {
        throw invalid_argument(
            "trace line " + std::to_string(e.line) + ": allocation at offset " +
            std::to_string(e.offset) + " while the allocation of line " +
            std::to_string(it->second.second) +
            " there is still live; a trace of one heap cannot have this (mixed or edited traces?)");
      }
      if (e.offset > UINT64_MAX - e.bytes) {
        throw invalid_argument("trace line " + std::to_string(e.line) + ": allocation of " +
                               std::to_string(e.bytes) + " bytes at offset " +
                               std::to_string(e.offset) +
                               " ends past 2^64; no heap has this (an edited trace?)");
      }
      const std::uint64_t end = e.offset + e.bytes;
      auto next = ranges.lower_bound(e.offset);
      const auto overlap = [&](std::uint64_t line) {
        return invalid_argument("trace line " + std::to_string(e.line) + ": allocation of " +
                                std::to_string(e.bytes) + " bytes at offset " +
                                std::to_string(e.offset) + " overlaps the allocation of line " +
                                std::to_string(line) +
                                ", still live; a trace of one heap cannot have this (mixed or "
                                "edited traces?)");
      };
      if (next != ranges.end() && next->first < end) throw overlap(next->second.second);
      if (next != ranges.begin() && std::prev(next)->second.first > e.offset) {
        throw overlap(std::prev(next)->second.second);
      }
      ranges.emplace_hint(next, e.offset, std::make_pair(end, e.line));
      slot_of[i] = slots++;
      bytes_of_slot.push_back(e.bytes);
      requested_live += e.bytes;
      rounded_live += heap.round_up(e.bytes);
      peak_requested = std::max(peak_requested, requested_live);
      if (rounded_live > peak_rounded) {
        peak_rounded = rounded_live;
        peak_at = i;
      }
    } else {
      auto it = live.find(e.offset);
      if (it == live.end()) {
        if (auto f = freed.find(e.offset); f != freed.end()) {
          throw invalid_argument("trace line " + std::to_string(e.line) + ": free of offset " +
                                 std::to_string(e.offset) + ", already freed at line " +
                                 std::to_string(f->second) +
                                 "; a trace of one heap cannot free twice (mixed or edited "
                                 "traces?)");
        }
        // Allocated before the trace started: skipped, counted and reported.
        if (r.unmatched_frees_in_trace++ == 0) r.first_unmatched_free_line = e.line;
        continue;
      }
      if (bytes_of_slot[it->second.first] != e.bytes) {
        throw invalid_argument(
            "trace line " + std::to_string(e.line) + ": free of " + std::to_string(e.bytes) +
            " bytes at offset " + std::to_string(e.offset) + ", but the allocation of line " +
            std::to_string(it->second.second) + " there has " +
            std::to_string(bytes_of_slot[it->second.first]) +
            " bytes; a free names the size of what it frees (mixed or edited traces?)");
      }
      freed[e.offset] = e.line;
      ranges.erase(e.offset);
      slot_of[i] = it->second.first;
      requested_live -= bytes_of_slot[it->second.first];
      rounded_live -= heap.round_up(bytes_of_slot[it->second.first]);
      live.erase(it);
    }
  }
  r.peak_requested_bytes = peak_requested;

  // Run (timed, except the one sample at the peak and samples at failures).
  std::vector<void*> ptr(slots, nullptr);
  heap.reset_peak();
  using clock = std::chrono::steady_clock;
  clock::duration sampling{0};
  auto sample = [&](bool at_peak, const trace_event* failed = nullptr) {
    const auto t0 = clock::now();
    const heap_stats s = heap.stats();
    r.fragmentation_max = std::max(r.fragmentation_max, s.fragmentation);
    if (failed != nullptr && r.first_failure_line == 0) {
      r.first_failure_line = failed->line;
      r.first_failure_bytes = static_cast<std::size_t>(failed->bytes);
      r.first_failure_free_bytes = s.free_bytes;
      r.first_failure_largest_free_run = s.largest_free_run;
    }
    if (at_peak) {
      r.fragmentation_at_peak = s.fragmentation;
      r.largest_free_run_at_peak = s.largest_free_run;
      for (void* p : ptr) {
        if (p != nullptr) {
          r.footprint_at_peak =
              std::max(r.footprint_at_peak, heap.offset_of(p) + heap.allocation_size(p));
        }
      }
    }
    sampling += clock::now() - t0;
  };
  const auto start = clock::now();
  for (std::size_t i = 0; i < events.size(); ++i) {
    const trace_event& e = events[i];
    const std::uint32_t s = slot_of[i];
    if (e.op == trace_op::alloc) {
      void* p = heap.try_allocate(static_cast<std::size_t>(e.bytes), e.stream);
      ptr[s] = p;
      if (p != nullptr) {
        ++r.allocations;
      } else {
        ++r.failures;
        sample(false, &e);
      }
      if (i == peak_at) sample(true);
    } else if (s == no_slot || ptr[s] == nullptr) {
      ++r.unmatched_frees;
    } else {
      heap.deallocate(ptr[s], e.stream);
      ptr[s] = nullptr;
      ++r.frees;
    }
  }
  const auto elapsed = clock::now() - start - sampling;
  for (void*& p : ptr) {
    if (p != nullptr) {
      heap.deallocate(p);
      p = nullptr;
      ++r.left_live;
    }
  }
  r.peak_bytes_in_use = heap.stats().peak_bytes_in_use;
  r.seconds = std::chrono::duration<double>(elapsed).count();
  const std::uint64_t ops = r.allocations + r.frees + r.failures;
  r.ns_per_op = ops == 0 ? 0.0 : r.seconds * 1e9 / static_cast<double>(ops);
  return r;
}

replay_result replay_trace(const std::string& path, device_heap& heap) {
  const std::vector<trace_event> events = read_trace(path);
  return replay_events(events, heap);
}

// ---------------------------------------------------------------- synthetic trace

namespace {

// A device whose memory is address space only (PROT_NONE, never committed): the heap
// never touches what it hands out, so offsets can be placed for arenas of any size.
class address_only_device final : public device {
 public:
  device_kind kind() const noexcept override { return device_kind::null; }
  std::string name() const override { return "address-only device (synthetic traces)"; }
  void* allocate(std::size_t bytes) override {
    void* p = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      throw out_of_memory("cannot reserve " + std::to_string(bytes) +
                              " bytes of address space: " + std::strerror(errno),
                          bytes, 0, 0);
    }
    return p;
  }
  void deallocate(void* p, std::size_t bytes) noexcept override { ::munmap(p, bytes); }
  void* allocate_pinned(std::size_t) override { throw unsupported("pinned memory"); }
  void deallocate_pinned(void*, std::size_t) noexcept override {}
  memory_info memory() const override { return {0, 0}; }
  stream& get_stream(stream_role) override { throw unsupported("streams"); }
  std::unique_ptr<event> make_event(const event_options&) override { throw unsupported("events"); }
  void synchronize() override {}
  bool touches_memory() const noexcept override { return false; }

 private:
  static device_error unsupported(const char* what) {
    return device_error(std::string("the synthetic-trace device has no ") + what);
  }
};

struct layer_shape {
  enum kind_t { conv, bn, act } kind;
  std::size_t out_bytes;     // output activation
  std::size_t in_bytes;      // input activation (its gradient's size)
  std::size_t weight_bytes;  // 0 for act
  std::size_t saved_bytes;   // batch-norm saved mean/variance; 0 otherwise
  std::size_t workspace;     // convolution workspace; 0 otherwise
};

}  // namespace

std::vector<trace_event> synthetic_trace(const synthetic_trace_options& o) {
  MEMWEAVE_EXPECTS(o.layers >= 1 && o.iterations >= 1 && o.batch >= 1,
                   "synthetic_trace_options: layers (" + std::to_string(o.layers) +
                       "), iterations (" + std::to_string(o.iterations) + ") and batch (" +
                       std::to_string(o.batch) + ") must all be at least 1");
  std::mt19937_64 rng(o.seed);
  const std::size_t f = 4;  // bytes per float
  const std::size_t input_bytes = o.batch * 3 * 224 * 224 * f;
  std::vector<layer_shape> layers;
  std::size_t prev = input_bytes;
  for (std::size_t l = 0; l < o.layers; ++l) {
    const std::size_t stage = std::min<std::size_t>(3, 4 * l / o.layers);
    const std::size_t side = 56 >> stage;
    const std::size_t channels = 64 << stage;
    layer_shape s{};
    const auto pick = rng() % 3;
    s.kind = pick == 0 ? layer_shape::conv : pick == 1 ? layer_shape::bn : layer_shape::act;
    if (l == 0) s.kind = layer_shape::conv;
    s.in_bytes = prev;
    s.out_bytes = o.batch * channels * side * side * f;
    if (s.kind == layer_shape::conv) {
      s.weight_bytes = channels * channels * 9 * f;
      s.workspace = s.out_bytes / 4 * (1 + rng() % 8) / 2;  // 1/8 .. 1x the output
    } else if (s.kind == layer_shape::bn) {
      s.weight_bytes = 2 * channels * f;
      s.saved_bytes = 2 * channels * f;
    }
    layers.push_back(s);
    prev = s.out_bytes;
  }
  // Enough address space for everything ever live at once (and growth as a fallback).
  std::size_t arena = input_bytes;
  for (const auto& s : layers) arena += 3 * s.weight_bytes + 2 * s.out_bytes + s.saved_bytes;
  arena += 4 * input_bytes + (64ull << 20);
  address_only_device dev;
  heap_options ho;
  ho.pool_bytes = arena;
  // What sized the arena, for its error: the trace's size, not a variable the user never set.
  ho.pool_knob = "the synthetic trace's layers and batch (--synthetic-layers, --batch)";
  ho.block_bytes = o.block_bytes;
  ho.grow_bytes = arena;
  device_heap heap(dev, ho);

  std::vector<trace_event> out;
  auto emit = [&](trace_op op, void* p, std::size_t bytes) {
    trace_event e;
    e.t_ns = out.size() * 1000;
    e.op = op;
    e.offset = heap.offset_of(p);
    e.bytes = bytes;
    out.push_back(e);
  };
  auto alloc = [&](std::size_t bytes) {
    void* p = heap.allocate_or_throw(bytes);
    emit(trace_op::alloc, p, bytes);
    return p;
  };
  auto release = [&](void* p, std::size_t bytes) {
    emit(trace_op::free, p, bytes);
    heap.deallocate_or_throw(p);
  };

  struct persistent {
    void* p;
    std::size_t bytes;
  };
  std::vector<persistent> keep;
  void* input = alloc(input_bytes);
  for (const auto& s : layers) {
    if (s.weight_bytes == 0) continue;
    for (int k = 0; k < 2; ++k) keep.push_back({alloc(s.weight_bytes), s.weight_bytes});
  }
  std::vector<void*> act(layers.size()), saved(layers.size()), grad_w(layers.size());
  for (std::size_t it = 0; it < o.iterations; ++it) {
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const auto& s = layers[l];
      act[l] = alloc(s.out_bytes);
      if (s.saved_bytes != 0) saved[l] = alloc(s.saved_bytes);
      if (s.workspace != 0) release(alloc(s.workspace), s.workspace);
    }
    void* grad_out = alloc(layers.back().out_bytes);  // the loss gradient
    for (std::size_t l = layers.size(); l-- > 0;) {
      const auto& s = layers[l];
      void* grad_in = alloc(s.in_bytes);
      if (s.weight_bytes != 0) grad_w[l] = alloc(s.weight_bytes);
      if (s.workspace != 0) release(alloc(s.workspace), s.workspace);
      release(grad_out, s.out_bytes);
      release(act[l], s.out_bytes);
      if (s.saved_bytes != 0) release(saved[l], s.saved_bytes);
      grad_out = grad_in;
    }
    release(grad_out, input_bytes);
    // The optimizer step, then zero_grad(set_to_none): gradients go in forward order.
    for (std::size_t l = 0; l < layers.size(); ++l) {
      if (layers[l].weight_bytes != 0) release(grad_w[l], layers[l].weight_bytes);
    }
  }
  for (auto it = keep.rbegin(); it != keep.rend(); ++it) release(it->p, it->bytes);
  release(input, input_bytes);
  return out;
}

void write_synthetic_trace(const std::string& path, const synthetic_trace_options& options) {
  const auto events = synthetic_trace(options);
  write_trace(path, events, options.block_bytes);
}

}  // namespace memweave
