// The iteration's streams as a Chrome/Perfetto trace (the JSON trace-event format: open it in
// ui.perfetto.dev or chrome://tracing): one track per stream (compute, host-to-device,
// device-to-host), a complete event per kernel and per copy. Each copy carries how much of
// it overlapped compute, so a user sees which copies were hidden.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "memweave/device/stream_timeline.hpp"

namespace memweave {

/// The share of `copy`'s time during which the compute stream was running something
/// (1 = hidden under compute; a zero-length copy counts as hidden).
double overlap_with_compute(const timeline_span& copy, const std::vector<timeline_span>& spans);

/// Writes `spans` as a trace-event JSON object (times in microseconds).
void write_timeline_trace(std::ostream& out, const std::vector<timeline_span>& spans,
                          const std::string& title);

}  // namespace memweave
