// Heap traces: the format round-trips, malformed input is rejected naming the line and
// what was expected, replays reproduce what was recorded, and the synthetic training
// trace is deterministic and well formed.
#include "memweave/alloc/trace.hpp"

#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>

#include "alloc/test_device.hpp"

namespace memweave {
namespace {

using test::test_device;

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "memweave_" + name + "_" + std::to_string(::getpid()) + ".trace";
}

heap_options options_of(std::size_t pool, std::size_t block = 1024) {
  heap_options o;
  o.pool_bytes = pool;
  o.block_bytes = block;
  return o;
}

std::string header() {
  return std::string(trace_header) + " block_bytes=1024\n";
}

// The message of the invalid_argument that parsing `text` throws.
std::string parse_error(const std::string& text) {
  try {
    parse_trace(text, "t.trace");
  } catch (const invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(trace_test, events_round_trip_through_a_file) {
  std::vector<trace_event> events;
  for (std::uint64_t i = 0; i < 100; ++i) {
    trace_event e;
    e.t_ns = i * 37 + (i % 3);
    e.op = i % 2 ? trace_op::free : trace_op::alloc;
    e.offset = (i / 2) * 4096 + (1ull << 40);
    e.bytes = 1 + i * 1000;
    e.stream = static_cast<int>(i % 3);
    events.push_back(e);
  }
  const std::string path = temp_path("round_trip");
  write_trace(path, events);
  const auto back = read_trace(path);
  ASSERT_EQ(back.size(), events.size());
  for (std::size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(back[i].t_ns, events[i].t_ns);
    EXPECT_EQ(back[i].op, events[i].op);
    EXPECT_EQ(back[i].offset, events[i].offset);
    EXPECT_EQ(back[i].bytes, events[i].bytes);
    EXPECT_EQ(back[i].stream, events[i].stream);
    EXPECT_EQ(back[i].line, i + 2);  // after the header
  }
  std::remove(path.c_str());
}

TEST(trace_test, comments_blank_lines_and_crlf_are_accepted) {
  const auto ev =
      parse_trace(header() + "# a comment\n\n0 a 0 10 0\r\n  \n  # indented\n5 f 0 10 0", "t");
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].line, 4u);
  EXPECT_EQ(ev[1].line, 7u);
  EXPECT_EQ(ev[1].op, trace_op::free);
}

TEST(trace_test, malformed_lines_are_rejected_naming_the_line_and_what_was_expected) {
  EXPECT_NE(parse_error("").find("is empty: expected the header"), std::string::npos);
  EXPECT_NE(parse_error("0 a 0 10 0\n").find("line 1: expected the header"), std::string::npos);
  const std::string h = header();
  struct bad {
    std::string line;
    std::string expected;
  };
  for (const bad& b : std::vector<bad>{
           {"0 a 0 10", "line 3: expected 5 fields 't_ns op offset bytes stream', found 4"},
           {"0 a 0 10 0 7", "line 3: expected 5 fields"},
           {"x a 0 10 0", "line 3: field 1 (t_ns) must be a non-negative integer, found 'x'"},
           {"-1 a 0 10 0", "field 1 (t_ns)"},
           {"0 m 0 10 0", "line 3: field 2 (op) must be 'a' (allocation) or 'f' (free), found 'm'"},
           {"0 alloc 0 10 0", "field 2 (op)"},
           {"0 a 0x10 10 0",
            "line 3: field 3 (offset) must be a non-negative integer, found '0x10'"},
           {"0 a 0 0 0", "line 3: field 4 (bytes) must be a positive integer, found '0'"},
           {"0 a 0 1.5 0", "field 4 (bytes)"},
           {"0 a 0 10 -2",
            "line 3: field 5 (stream) must be an integer from 0 to 2147483647, found '-2'"},
           {"0 a 0 10 4294967296",
            "line 3: field 5 (stream) must be an integer from 0 to 2147483647, found "
            "'4294967296'"},
           {"0 a 0 99999999999999999999999 0", "field 4 (bytes)"},
       }) {
    const std::string m = parse_error(h + "0 a 0 10 0\n" + b.line + "\n1 f 0 10 0\n");
    EXPECT_NE(m.find(b.expected), std::string::npos) << b.line << " -> " << m;
    EXPECT_NE(m.find("'t.trace'"), std::string::npos) << m;
  }
}

// The header's block size is one the heap takes, and time never goes back: a hand-edited
// file or two traces run together is refused, naming the line.
TEST(trace_test, a_bad_block_size_or_time_going_back_is_rejected) {
  const std::string h(trace_header);
  for (const char* block : {" block_bytes=0", " block_bytes=3", " block_bytes=2147483648",
                            " block_bytes=99999999999999999999", " blocks=1024"}) {
    const std::string m = parse_error(h + block + "\n0 a 0 10 0\n");
    EXPECT_NE(m.find("line 1: the header's"), std::string::npos) << block << " -> " << m;
  }
  EXPECT_EQ(parse_trace(h + "\n0 a 0 10 0\n", "t").size(), 1u);  // no block size: older traces
  const std::string m = parse_error(header() + "5 a 0 10 0\n3 f 0 10 0\n");
  EXPECT_NE(m.find("line 3: t_ns 3 is before line 2's 5"), std::string::npos) << m;
}

// A binary file is named in printable text (its NULs printed raw before), and refused at its
// first bytes, before the rest is read (3 GB of zeros took 18 s and 4.3 GB of memory).
TEST(trace_test, a_file_that_is_not_a_trace_is_refused_at_its_header_in_printable_text) {
  const std::string path = temp_path("zeros");
  {
    std::ofstream out(path, std::ios::binary);
    out << std::string(100, '\0') << "\n" << std::string(1 << 20, '\x07');
  }
  try {
    read_trace(path);
    FAIL() << "expected invalid_argument";
  } catch (const invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("line 1: expected the header"), std::string::npos) << m;
    EXPECT_NE(m.find("found '\\x00\\x00"), std::string::npos) << m;
    EXPECT_NE(m.find("\\x00...'"), std::string::npos) << m;  // 100 NULs: 60 shown, marked
    EXPECT_EQ(m.find('\0'), std::string::npos);
  }
  std::remove(path.c_str());
}

TEST(trace_test, unreadable_file_names_the_path_and_the_reason) {
  try {
    read_trace("/nonexistent-dir/x.trace");
    FAIL() << "expected invalid_argument";
  } catch (const invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("/nonexistent-dir/x.trace"), std::string::npos) << m;
    EXPECT_NE(m.find("No such file or directory"), std::string::npos) << m;
  }
  EXPECT_THROW(write_trace("/nonexistent-dir/x.trace", {}), invalid_argument);
}

TEST(trace_test, replay_reproduces_the_recorded_peak_and_counts) {
  const std::string path = temp_path("recorded");
  test_device dev(64 * MiB);
  heap_stats recorded;
  {
    heap_options o = options_of(16 * MiB);
    o.trace_path = path;
    device_heap h(dev, o);
    std::mt19937_64 rng(7);
    std::vector<void*> live;
    for (int i = 0; i < 3000; ++i) {
      if (live.empty() || rng() % 100 < 55) {
        if (void* p = h.try_allocate(1 + rng() % (64 * KiB))) live.push_back(p);
      } else {
        const std::size_t k = rng() % live.size();
        h.deallocate(live[k]);
        live[k] = live.back();
        live.pop_back();
      }
    }
    for (void* p : live) h.deallocate(p);
    recorded = h.stats();
  }
  device_heap fresh(dev, options_of(16 * MiB));
  const replay_result r = replay_trace(path, fresh);
  EXPECT_EQ(r.events, recorded.allocations + recorded.frees);
  EXPECT_EQ(r.allocations, recorded.allocations);
  EXPECT_EQ(r.frees, recorded.frees);
  EXPECT_EQ(r.failures, 0u);
  EXPECT_EQ(r.unmatched_frees, 0u);
  EXPECT_EQ(r.left_live, 0u);
  EXPECT_EQ(r.peak_bytes_in_use, recorded.peak_bytes_in_use);
  EXPECT_GT(r.peak_requested_bytes, 0u);
  EXPECT_LE(r.peak_requested_bytes, r.peak_bytes_in_use);
  EXPECT_GE(r.footprint_at_peak, r.peak_bytes_in_use);
  EXPECT_LE(r.footprint_at_peak, 16 * MiB);
  EXPECT_GE(r.fragmentation_at_peak, 0.0);
  EXPECT_LE(r.fragmentation_at_peak, 1.0);
  EXPECT_GT(r.ns_per_op, 0.0);
  EXPECT_EQ(fresh.stats().bytes_in_use, 0u);  // the replay cleans up
  fresh.check_invariants();
  std::remove(path.c_str());
}

TEST(trace_test, replay_into_a_smaller_heap_counts_failures_and_skips_their_frees) {
  std::vector<trace_event> ev;
  auto add = [&](trace_op op, std::uint64_t off, std::uint64_t bytes) {
    trace_event e;
    e.op = op;
    e.offset = off;
    e.bytes = bytes;
    e.line = ev.size() + 2;
    ev.push_back(e);
  };
  add(trace_op::alloc, 0, 40 * KiB);
  add(trace_op::alloc, 40 * KiB, 40 * KiB);  // does not fit in 64 KiB
  add(trace_op::free, 40 * KiB, 40 * KiB);   // its free is skipped
  add(trace_op::free, 0, 40 * KiB);
  add(trace_op::free, 1 * MiB, 10);  // allocated before the trace began
  add(trace_op::alloc, 0, 8 * KiB);  // never freed: the replay frees it
  test_device dev(16 * MiB);
  device_heap h(dev, options_of(64 * KiB));
  const replay_result r = replay_events(ev, h);
  EXPECT_EQ(r.allocations, 2u);
  EXPECT_EQ(r.failures, 1u);
  EXPECT_EQ(r.frees, 1u);
  EXPECT_EQ(r.unmatched_frees, 2u);
  EXPECT_EQ(r.left_live, 1u);
  EXPECT_EQ(r.peak_bytes_in_use, 40 * KiB);
  EXPECT_GT(r.fragmentation_max, -1.0);
  EXPECT_EQ(h.stats().bytes_in_use, 0u);
  EXPECT_EQ(h.stats().failures, 1u);
}

TEST(trace_test, allocation_at_a_live_offset_is_rejected_naming_both_lines) {
  const std::string text = header() + "0 a 0 10 0\n1 a 4096 10 0\n2 a 0 10 0\n";
  const auto ev = parse_trace(text, "dup");
  test_device dev(16 * MiB);
  device_heap h(dev, options_of(1 * MiB));
  try {
    replay_events(ev, h);
    FAIL() << "expected invalid_argument";
  } catch (const invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("line 4"), std::string::npos) << m;
    EXPECT_NE(m.find("line 2"), std::string::npos) << m;
  }
  EXPECT_EQ(h.stats().allocations, 0u);  // checked before anything ran
}

// Two live allocations whose bytes overlap are not one heap's trace (it replayed them).
TEST(trace_test, overlapping_live_allocations_are_rejected_naming_both_lines) {
  test_device dev(16 * MiB);
  device_heap h(dev, options_of(1 * MiB));
  for (const char* body :
       {"0 a 1024 4096 0\n1 a 2048 10 0\n", "0 a 2048 10 0\n1 a 1024 4096 0\n"}) {
    try {
      replay_events(parse_trace(header() + body, "t"), h);
      FAIL() << "expected invalid_argument for " << body;
    } catch (const invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("trace line 3: allocation of"), std::string::npos) << m;
      EXPECT_NE(m.find("overlaps the allocation of line 2, still live"), std::string::npos) << m;
    }
  }
  // An allocation whose end is past 2^64 (its range wrapped, and no overlap was seen).
  try {
    replay_events(parse_trace(header() + "0 a 18446744073709551000 4096 0\n1 a 0 10 0\n", "t"), h);
    FAIL() << "expected invalid_argument for a range past 2^64";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("ends past 2^64"), std::string::npos) << e.what();
  }
  // Freed first, the same bytes may be allocated again; adjacent ranges do not overlap.
  EXPECT_EQ(replay_events(parse_trace(header() + "0 a 1024 4096 0\n1 f 1024 4096 0\n2 a 2048 10 0\n"
                                                 "3 a 8192 1024 0\n4 a 9216 1024 0\n",
                                      "t"),
                          h)
                .allocations,
            4u);
}

// Issue 11: replay skipped double frees silently, as if allocated before the trace began.
// The message of the invalid_argument that replaying `body` (after the header) throws.
std::string replay_error(const std::string& body, device_heap& h) {
  try {
    replay_events(parse_trace(header() + body, "t.trace"), h);
  } catch (const invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(trace_test, double_free_and_size_mismatch_are_rejected_naming_the_lines) {
  test_device dev(16 * MiB);
  device_heap h(dev, options_of(1 * MiB));
  const std::string twice = replay_error("0 a 0 10 0\n1 f 0 10 0\n2 f 0 10 0\n", h);
  EXPECT_NE(twice.find("trace line 4: free of offset 0, already freed at line 3"),
            std::string::npos)
      << twice;
  const std::string sizes = replay_error("0 a 0 10 0\n1 f 0 20 0\n", h);
  EXPECT_NE(sizes.find("free of 20 bytes at offset 0, but the allocation of line 2 there has 10"),
            std::string::npos)
      << sizes;
  // Freed, allocated again, freed again: legitimate.
  const auto reuse =
      parse_trace(header() + "0 a 0 10 0\n1 f 0 10 0\n2 a 0 10 0\n3 f 0 10 0\n", "reuse");
  const replay_result r = replay_events(reuse, h);
  EXPECT_EQ(r.frees, 2u);
  EXPECT_EQ(r.unmatched_frees_in_trace, 0u);
}

// Issue 11: an interrupted run leaves a last line without its newline; the events before it
// are kept (only that line is dropped, with a warning).
TEST(trace_test, unterminated_malformed_last_line_is_dropped_and_the_rest_kept) {
  const auto ev = parse_trace(header() + "0 a 0 10 0\n1 a 4096 20 0\n2 f 40", "cut");
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[1].bytes, 20u);
  // A complete last line without a newline is an event like any other.
  EXPECT_EQ(parse_trace(header() + "0 a 0 10 0", "whole").size(), 1u);
  // Inside the file, the same line is an error.
  EXPECT_NE(parse_error(header() + "2 f 40\n0 a 0 10 0\n").find("line 2: expected 5 fields"),
            std::string::npos);
}

TEST(trace_test, synthetic_trace_is_deterministic_and_well_formed) {
  synthetic_trace_options o;
  o.layers = 40;
  o.iterations = 2;
  o.batch = 8;
  const auto a = synthetic_trace(o);
  const auto b = synthetic_trace(o);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].op, b[i].op);
    ASSERT_EQ(a[i].offset, b[i].offset);
    ASSERT_EQ(a[i].bytes, b[i].bytes);
    ASSERT_EQ(a[i].t_ns, b[i].t_ns);
  }
  o.seed = 2;
  const auto c = synthetic_trace(o);
  bool differs = c.size() != a.size();
  for (std::size_t i = 0; !differs && i < a.size(); ++i) differs = a[i].bytes != c[i].bytes;
  EXPECT_TRUE(differs);
  // Every allocation is freed once, at its own size, and live ranges never overlap.
  std::map<std::uint64_t, std::uint64_t> live;  // offset -> bytes
  std::size_t max_live = 0;
  for (const auto& e : a) {
    if (e.op == trace_op::alloc) {
      auto next = live.lower_bound(e.offset);
      ASSERT_TRUE(next == live.end() || next->first >= e.offset + e.bytes);
      if (next != live.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + prev->second, e.offset);
      }
      live[e.offset] = e.bytes;
      max_live = std::max(max_live, live.size());
    } else {
      auto it = live.find(e.offset);
      ASSERT_NE(it, live.end());
      ASSERT_EQ(it->second, e.bytes);
      live.erase(it);
    }
  }
  EXPECT_TRUE(live.empty());
  EXPECT_GT(max_live, 40u);  // activations of every layer live at the forward's end
  // Replaying it needs no more than it recorded.
  test_device dev(8 * GiB, test_device::backing::address_only);
  device_heap h(dev, options_of(4 * GiB));
  const replay_result r = replay_events(a, h);
  EXPECT_EQ(r.failures, 0u);
  EXPECT_EQ(r.unmatched_frees, 0u);
  EXPECT_EQ(r.left_live, 0u);
}

TEST(trace_test, synthetic_trace_file_is_readable) {
  const std::string path = temp_path("synthetic");
  synthetic_trace_options o;
  o.layers = 10;
  o.iterations = 1;
  write_synthetic_trace(path, o);
  EXPECT_EQ(read_trace(path).size(), synthetic_trace(o).size());
  std::remove(path.c_str());
  o.layers = 0;
  EXPECT_THROW(synthetic_trace(o), invalid_argument);
}

}  // namespace
}  // namespace memweave
