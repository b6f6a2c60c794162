// Heap traces: the file format written by device_heap::start_trace (MEMWEAVE_TRACE), its
// reader, a replayer that drives a heap with a recorded sequence, and a deterministic
// generator of a synthetic training-like trace (for benchmarks and demos without a GPU).
//
// Format (text, one event per line, fields separated by single spaces):
//   # memweave-trace v1 t_ns op offset bytes stream block_bytes=1024
//   0 a 0 1000 0
//   1530 f 0 1000 0
// t_ns: nanoseconds since the trace started; op: `a` (allocation) or `f` (free); offset:
// bytes from the start of the heap's address space (arenas numbered as if concatenated);
// bytes: the size requested (for a free, that of the allocation freed); stream: the
// stream argument of the call. The first line is the header; later lines starting with
// `#` and blank lines are ignored. Only successful allocations and frees are recorded. A
// malformed last line without its newline (a run interrupted mid-write) is ignored with a
// warning; any other malformed line is an error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "memweave/alloc/device_heap.hpp"

namespace memweave {

/// The header's fixed beginning; the writer appends " block_bytes=N".
inline constexpr std::string_view trace_header = "# memweave-trace v1 t_ns op offset bytes stream";

enum class trace_op : char { alloc = 'a', free = 'f' };

/// One line of a trace.
struct trace_event {
  std::uint64_t t_ns = 0;         ///< nanoseconds since the trace started
  trace_op op = trace_op::alloc;  ///< allocation or free
  std::uint64_t offset = 0;       ///< bytes from the start of the heap's address space
  std::uint64_t bytes = 0;        ///< requested bytes
  int stream = 0;                 ///< stream argument of the call
  std::uint64_t line = 0;         ///< line number in the file (1-based; 0 when generated)
};

/// Reads a trace file; with `block_bytes`, stores the heap block size its header names (1024
/// for a header without one: older traces). Throws invalid_argument naming the path and the
/// system's reason when it cannot be read, and naming the path, the line number and what
/// was expected when a line is malformed.
std::vector<trace_event> read_trace(const std::string& path, std::size_t* block_bytes = nullptr);

/// Parses trace text; `source` names it in messages (a path). Throws as read_trace.
std::vector<trace_event> parse_trace(std::string_view text, std::string_view source,
                                     std::size_t* block_bytes = nullptr);

/// Writes events in the trace format (the header says `block_bytes`). Throws
/// invalid_argument naming the path and the reason when it cannot be written.
void write_trace(const std::string& path, std::span<const trace_event> events,
                 std::size_t block_bytes = 1024);

/// What a replay did and saw.
struct replay_result {
  std::uint64_t events = 0;           ///< events in the trace
  std::uint64_t allocations = 0;      ///< allocations that succeeded
  std::uint64_t frees = 0;            ///< frees performed
  std::uint64_t failures = 0;         ///< allocations the heap could not serve
  std::uint64_t unmatched_frees = 0;  ///< frees of offsets with no live allocation (skipped):
                                      ///< allocated before the trace started, or failed here
  std::uint64_t unmatched_frees_in_trace = 0;   ///< of those, frees of offsets the trace never
                                                ///< allocated (before it started)
  std::uint64_t first_unmatched_free_line = 0;  ///< line of the first of those (0: none)
  std::uint64_t left_live = 0;           ///< allocations the trace never freed (freed at the end)
  std::size_t peak_bytes_in_use = 0;     ///< heap's peak during the replay (it is reset first)
  std::size_t peak_requested_bytes = 0;  ///< trace's peak of requested bytes live
  double fragmentation_at_peak = 0.0;    ///< heap's fragmentation when the trace's live
                                         ///< bytes first reach their peak
  std::size_t largest_free_run_at_peak = 0;  ///< heap's largest free run then
  std::size_t footprint_at_peak = 0;         ///< highest end offset of a live allocation then: the
                                             ///< arena size this placement needs
  double fragmentation_max = 0.0;            ///< highest fragmentation sampled (at the peak and
                                             ///< at every failure)
  /// The first allocation the heap could not serve (first_failure_line 0: none): its trace
  /// line, the bytes it asked, and the heap's free bytes and largest free run then.
  std::uint64_t first_failure_line = 0;
  std::size_t first_failure_bytes = 0;
  std::size_t first_failure_free_bytes = 0;
  std::size_t first_failure_largest_free_run = 0;
  double seconds = 0.0;    ///< time in heap calls (sampling excluded)
  double ns_per_op = 0.0;  ///< seconds / (allocations + frees + failures), in ns
};

/// Drives `heap` with the events in order: each `a` is heap.try_allocate(bytes, stream),
/// each `f` frees the pointer that replaced the allocation recorded at that offset.
/// Allocations still live at the end are freed, so the heap ends as it started. Resets
/// the heap's peak. Throws invalid_argument (naming the lines) for what a trace from one heap
/// cannot have: an allocation at an offset that is still live, a free of an offset already
/// freed, a free whose size is not its allocation's.
replay_result replay_events(std::span<const trace_event> events, device_heap& heap);

/// read_trace(path), then replay_events. Throws as both.
replay_result replay_trace(const std::string& path, device_heap& heap);

/// The shape of a synthetic training trace. A network of `layers` layers in four stages
/// (spatial size halving and channels doubling per stage, as in ResNet/VGG), each layer a
/// convolution, batch-norm or activation, some with a convolution workspace:
///  - at the start, persistent tensors: per weighted layer its weights and momentum, and
///    the input batch buffer;
///  - per iteration, forward: each layer allocates its output (and batch-norm saved
///    statistics; a convolution also a workspace it frees at once);
///  - backward, in reverse: each layer allocates its input gradient and its weight
///    gradient (and a workspace it frees at once), then frees its output gradient, its
///    output and its saved statistics;
///  - after the optimizer step, the weight gradients are freed in forward order (as
///    zero_grad(set_to_none) does), leaving holes the next forward pass must fit into;
///  - at the end, the persistent tensors are freed.
/// Offsets are placed by a best-fit device_heap over an address-only device, so the trace
/// is exactly what memweave would record; times are synthetic (1 us per event).
struct synthetic_trace_options {
  std::size_t layers = 50;         ///< layers in the network (>= 1)
  std::size_t iterations = 3;      ///< training iterations (>= 1)
  std::size_t batch = 32;          ///< images per batch: scales activations
  std::uint64_t seed = 1;          ///< chooses layer kinds and workspace sizes
  std::size_t block_bytes = 1024;  ///< block size of the heap that places the offsets
};

/// The synthetic trace as events (deterministic for given options). Throws
/// invalid_argument for layers or iterations of 0.
std::vector<trace_event> synthetic_trace(const synthetic_trace_options& options);

/// synthetic_trace(options) written to `path`. Throws as synthetic_trace and write_trace.
void write_synthetic_trace(const std::string& path, const synthetic_trace_options& options);

}  // namespace memweave
