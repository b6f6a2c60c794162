#include "timeline_writer.hpp"

#include <algorithm>

#include "json_text.hpp"

namespace memweave {
namespace {

int track_of(stream_role r) noexcept {
  return static_cast<int>(r) + 1;
}

}  // namespace

double overlap_with_compute(const timeline_span& copy, const std::vector<timeline_span>& spans) {
  const double length = copy.end_s - copy.begin_s;
  if (length <= 0) return 1.0;
  // Compute spans are in issue order on one in-order stream: they do not overlap each other.
  double covered = 0;
  for (const timeline_span& s : spans) {
    if (s.stream != stream_role::compute) continue;
    const double from = std::max(s.begin_s, copy.begin_s), to = std::min(s.end_s, copy.end_s);
    if (to > from) covered += to - from;
  }
  return std::min(1.0, covered / length);
}

void write_timeline_trace(std::ostream& out, const std::vector<timeline_span>& spans,
                          const std::string& title) {
  out << "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"title\": " << json_string(title)
      << "},\n \"traceEvents\": [\n";
  out << "  {\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, \"args\": {\"name\": "
      << json_string(title) << "}}";
  for (stream_role r :
       {stream_role::compute, stream_role::host_to_device, stream_role::device_to_host}) {
    out << ",\n  {\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": " << track_of(r)
        << ", \"args\": {\"name\": " << json_string(to_string(r)) << "}}";
    out << ",\n  {\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": 1, \"tid\": "
        << track_of(r) << ", \"args\": {\"sort_index\": " << track_of(r) << "}}";
  }
  for (const timeline_span& s : spans) {
    out << ",\n  {\"name\": " << json_string(s.name) << ", \"cat\": " << json_string(s.category)
        << ", \"ph\": \"X\", \"pid\": 1, \"tid\": " << track_of(s.stream)
        << ", \"ts\": " << json_number(s.begin_s * 1e6)
        << ", \"dur\": " << json_number((s.end_s - s.begin_s) * 1e6)
        << ", \"args\": {\"step\": " << s.step;
    if (s.stream != stream_role::compute) {
      out << ", \"bytes\": " << s.bytes
          << ", \"overlap_with_compute\": " << json_number(overlap_with_compute(s, spans));
    }
    out << "}}";
  }
  out << "\n]}\n";
}

}  // namespace memweave
