// Output formats of a run_report. Pure functions of the report; no state.
#include "report_writers.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iomanip>
#include <span>
#include <sstream>

#include "json_text.hpp"
#include "memweave/core/atomic_file.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"

namespace memweave {
namespace {

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

namespace {

// A JSON array of tiled segments, one a line, `indent` the array's own.
void write_segments(std::ostream& out, std::span<const tiled_segment_choice> segments,
                    const std::string& indent) {
  out << "[";
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const tiled_segment_choice& c = segments[i];
    out << (i ? "," : "") << "\n"
        << indent << "  {\"first\": " << json_string(c.first)
        << ", \"last\": " << json_string(c.last) << ", \"layers\": " << c.members.size()
        << ", \"tiles_h\": " << c.tiles_h << ", \"tiles_w\": " << c.tiles_w
        << ", \"untiled_bytes\": " << c.untiled_bytes << ", \"step_bytes\": " << c.step_bytes
        << ", \"forward_workspace_bytes\": " << c.forward_workspace
        << ", \"backward_workspace_bytes\": " << c.backward_workspace << "}";
  }
  out << (segments.empty() ? "]" : "\n" + indent + "]");
}

}  // namespace

std::string describe_segments(std::span<const tiled_segment_choice> segments) {
  std::ostringstream s;
  for (const tiled_segment_choice& c : segments) {
    s << "tiled segment " << c.first << ".." << c.last << " (" << c.members.size() << " layers) in "
      << c.tiles_h << "x" << c.tiles_w << " tiles: its step touches " << format_bytes(c.step_bytes)
      << " (untiled " << format_bytes(c.untiled_bytes) << "), one tile's buffers "
      << format_bytes(c.forward_workspace) << " forward, " << format_bytes(c.backward_workspace)
      << " backward\n";
  }
  return s.str();
}

void write_json(std::ostream& out, const run_report& r) {
  out << "{\n  \"command\": " << json_string(r.command)
      << ",\n  \"network\": " << json_string(r.network) << ",\n  \"batch\": " << r.batch
      << ",\n  \"budget_bytes\": " << r.budget_bytes << ",\n  \"device\": " << json_string(r.device)
      << ",\n  \"iterations\": " << r.iterations << ",\n  \"ranks\": " << r.ranks
      << ",\n  \"search\": " << json_string(r.search)
      << (r.command == "eval" ? ",\n  \"first_batch\": " + std::to_string(r.first_batch)
                              : std::string())
      << ",\n  \"tiled_segments\": ";
  write_segments(out, r.tiling, "  ");
  out << ",\n  \"policies\": [";
  for (std::size_t i = 0; i < r.policies.size(); ++i) {
    const policy_report& p = r.policies[i];
    out << (i ? "," : "") << "\n    {\n      \"policy\": " << json_string(p.policy)
        << ",\n      \"fits\": " << (p.fits ? "true" : "false")
        << ",\n      \"failed\": " << (p.failed ? "true" : "false")
        << ",\n      \"failure\": " << json_string(p.failure)
        << ",\n      \"stopped_by\": " << json_string(p.stopped_by)
        << ",\n      \"iterations_run\": " << p.iterations_run
        << ",\n      \"image_side\": " << p.image_side
        << ",\n      \"tiling_target_bytes\": " << p.tiling_target_bytes
        << ",\n      \"tiled_segments\": ";
    write_segments(out, p.tiling, "      ");
    out << ",\n      \"peak_bytes\": " << p.peak_bytes
        << ",\n      \"peak_live_bytes\": " << p.peak_live_bytes
        << ",\n      \"peak_step\": " << p.peak_step
        << ",\n      \"max_layer_bytes\": " << p.max_layer_bytes
        << ",\n      \"persistent_bytes\": " << p.persistent_bytes
        << ",\n      \"tensors_allocated\": " << p.tensors_allocated
        << ",\n      \"bytes_offloaded\": " << p.bytes_offloaded
        << ",\n      \"bytes_prefetched\": " << p.bytes_prefetched
        << ",\n      \"recomputations\": " << p.recomputations
        << ",\n      \"cache_hits\": " << p.cache_hits
        << ",\n      \"cache_misses\": " << p.cache_misses
        << ",\n      \"evictions\": " << p.evictions
        << ",\n      \"scheduled_swaps\": " << p.scheduled_swaps
        << ",\n      \"scheduled_drops\": " << p.scheduled_drops
        << ",\n      \"scheduled_parks\": " << p.scheduled_parks
        << ",\n      \"scheduled_whole\": " << p.scheduled_whole
        << ",\n      \"scheduled_to_host\": " << p.scheduled_to_host
        << ",\n      \"parked_bytes\": " << p.parked_bytes
        << ",\n      \"schedule_misses\": " << p.schedule_misses
        << ",\n      \"predicted_seconds\": " << json_number(p.predicted_seconds)
        << ",\n      \"schedule_measured\": " << (p.schedule_measured ? "true" : "false")
        << ",\n      \"bound_seconds\": " << json_number(p.bound_seconds)
        << ",\n      \"weighed\": {\"all_seconds\": " << json_number(p.weighed_all_seconds)
        << ", \"recompute_seconds\": " << json_number(p.weighed_recompute_seconds)
        << ", \"headroom\": " << json_number(p.weighed_headroom)
        << ", \"workspace_share\": " << p.weighed_workspace_share
        << ", \"keep_rebuilt\": " << (p.weighed_keep_rebuilt ? "true" : "false")
        << ", \"min_bytes\": " << p.weighed_min_bytes
        << ", \"conv_mode_workspaces\": " << (p.weighed_conv_mode_workspaces ? "true" : "false")
        << ", \"ran_as_recompute\": " << (p.ran_as_recompute ? "true" : "false")
        << ", \"reactive_seconds\": " << json_number(p.weighed_reactive_seconds)
        << ", \"ran_without_schedule\": " << (p.ran_without_schedule ? "true" : "false")
        << ", \"split_share\": " << json_number(p.weighed_split_share)
        << ", \"split_steps\": " << p.weighed_split_steps
        << ", \"fewest_split_steps\": " << p.fewest_split_steps
        << ", \"fewest_split_seconds\": " << json_number(p.weighed_fewest_split_seconds)
        << ", \"mixed_split_steps\": " << p.mixed_split_steps
        << ", \"whole_split_seconds\": " << json_number(p.weighed_whole_split_seconds) << "}"
        << ",\n      \"cost_model\": {\"flops\": " << json_number(p.model.flops)
        << ", \"memory_bytes_per_s\": " << json_number(p.model.memory_bytes_per_s)
        << ", \"link_bytes_per_s\": " << json_number(p.model.link_bytes_per_s) << "}"
        << ",\n      \"replan\": {\"replanned\": " << (p.replan.replanned ? "true" : "false")
        << ", \"model_seconds\": " << json_number(p.replan.model_seconds)
        << ", \"measured_seconds\": " << json_number(p.replan.measured_seconds)
        << ", \"measured_iteration\": " << p.replan.measured_iteration
        << ", \"link_gbps\": " << json_number(p.replan.link_gbps)
        << ", \"copy_latency_us\": " << json_number(p.replan.copy_latency_us)
        << ", \"gaps_changed\": " << p.replan.gaps_changed << ", \"replanned_iteration_seconds\": "
        << json_number(p.replan.replanned_iteration_seconds)
        << ", \"model_iteration_seconds\": " << json_number(p.replan.model_iteration_seconds)
        << ", \"note\": " << json_string(p.replan.note) << "}"
        << ",\n      \"staged_steps\": " << p.staged_steps
        << ",\n      \"channel_group_steps\": " << p.channel_group_steps
        << ",\n      \"bytes_staged\": " << p.bytes_staged
        << ",\n      \"bytes_handed\": " << p.bytes_handed
        << ",\n      \"bytes_staged_fp16\": " << p.bytes_staged_fp16
        << ",\n      \"staged_fp16_error\": " << json_number(p.staged_fp16_error)
        << ",\n      \"host_drops\": " << p.host_drops
        << ",\n      \"bytes_compressed\": " << p.bytes_compressed
        << ",\n      \"max_compression_error\": " << json_number(p.max_compression_error)
        << ",\n      \"transfer_wait_s\": " << json_number(p.transfer_wait_s)
        << ",\n      \"images_per_s\": " << json_number(p.images_per_s)
        << ",\n      \"seconds_per_iteration\": " << json_number(p.seconds_per_iteration)
        << ",\n      \"timed_iterations\": [" << p.timed_first << ", " << p.timed_last << "]"
        << ",\n      \"bookkeeping_us_per_step\": " << json_number(p.bookkeeping_us_per_step)
        << ",\n      \"ranks\": " << p.ranks
        << ",\n      \"allreduce_bytes\": " << p.allreduce_bytes
        << ",\n      \"allreduce_seconds\": " << json_number(p.allreduce_seconds)
        << ",\n      \"allreduce_wait_seconds\": " << json_number(p.allreduce_wait_seconds)
        << ",\n      \"tightest_rank\": " << p.tightest_rank << ",\n      \"per_rank\": [";
    for (std::size_t k = 0; k < p.rank_reports.size(); ++k) {
      const rank_report& q = p.rank_reports[k];
      out << (k ? ", " : "") << "{\"rank\": " << q.rank << ", \"peak_bytes\": " << q.peak_bytes
          << ", \"bytes_moved\": " << q.bytes_moved
          << ", \"seconds_per_iteration\": " << json_number(q.seconds_per_iteration)
          << ", \"allreduce_seconds\": " << json_number(q.allreduce_seconds)
          << ", \"allreduce_wait_seconds\": " << json_number(q.allreduce_wait_seconds) << "}";
    }
    out << "]"
        << (r.command != "eval" ? std::string()
            // Nothing evaluated (it did not fit, its loss was not finite, the null device):
            // no numbers that read as a loss of 0.
            : !p.fits || p.images == 0
                ? std::string(",\n      \"evaluation\": null")
                : ",\n      \"evaluation\": {\"loss\": " + json_number(p.eval_loss) +
                      ", \"accuracy\": " + json_number(p.accuracy) + ", \"correct\": " +
                      std::to_string(p.correct) + ", \"images\": " + std::to_string(p.images) + "}")
        << ",\n      \"losses\": [";
    for (std::size_t k = 0; k < p.losses.size(); ++k) {
      out << (k ? ", " : "") << json_number(p.losses[k]);
    }
    out << "],\n      \"steps\": [";
    for (std::size_t k = 0; k < p.steps.size(); ++k) {
      const step_record& s = p.steps[k];
      out << (k ? "," : "") << "\n        {\"step\": " << s.step
          << ", \"layer\": " << json_string(s.layer) << ", \"pass\": \"" << s.pass
          << "\", \"bytes_live\": " << s.bytes_live << ", \"heap_bytes\": " << s.heap_bytes
          << ", \"tensors_live\": " << s.tensors_live
          << ", \"workspace_bytes\": " << s.workspace_bytes
          << ", \"algorithm\": " << json_string(s.algorithm) << ", \"offloads\": " << s.offloads
          << ", \"prefetches\": " << s.prefetches << ", \"replays\": " << s.replays
          << ", \"parts\": " << s.parts << ", \"groups\": " << s.groups
          << ", \"staged\": " << (s.staged ? "true" : "false") << "}";
    }
    out << (p.steps.empty() ? "" : "\n      ") << "]\n    }";
  }
  out << "\n  ]\n}\n";
}

namespace {

// A CSV field (RFC 4180): as it is, or in double quotes with each quote doubled where it
// holds a comma, a quote or a line break (an ONNX model's layer names may).
std::string csv_field(std::string_view text) {
  if (text.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(text);
  std::string quoted = "\"";
  for (const char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + '"';
}

}  // namespace

void write_csv(std::ostream& out, const run_report& r) {
  out << "policy,step,layer,pass,bytes_live,heap_bytes,tensors_live,workspace_bytes,algorithm,"
         "offloads,prefetches,replays,parts,groups,staged\n";
  for (const policy_report& p : r.policies) {
    for (const step_record& s : p.steps) {
      out << csv_field(p.policy) << ',' << s.step << ',' << csv_field(s.layer) << ',' << s.pass
          << ',' << s.bytes_live << ',' << s.heap_bytes << ',' << s.tensors_live << ','
          << s.workspace_bytes << ',' << csv_field(s.algorithm) << ',' << s.offloads << ','
          << s.prefetches << ',' << s.replays << ',' << s.parts << ',' << s.groups << ','
          << (s.staged ? 1 : 0) << '\n';
    }
  }
}

void write_svg(std::ostream& out, const run_report& r) {
  // Three stacked panels sharing the step axis: memory (heap bytes), live tensors, and the
  // convolution workspace taken at each step (Fig. 12 of the paper).
  constexpr int panels = 3;
  constexpr double width = 900, panel = 220, left = 80, right = 20, top = 40, gap = 50;
  constexpr double height = top + panels * panel + (panels - 1) * gap + 50;
  static constexpr const char* colours[] = {"#d62728", "#1f77b4", "#2ca02c",
                                            "#9467bd", "#ff7f0e", "#8c564b"};
  std::size_t steps = 0, max_bytes = 1, max_workspace = 1;
  int max_tensors = 1;
  for (const auto& p : r.policies) {
    steps = std::max(steps, p.steps.size());
    for (const auto& s : p.steps) {
      max_bytes = std::max(max_bytes, s.heap_bytes);
      max_tensors = std::max(max_tensors, s.tensors_live);
      max_workspace = std::max(max_workspace, s.workspace_bytes);
    }
  }
  const double plot_w = width - left - right;
  auto x_of = [&](double step) {
    return left + plot_w * (step - 1) / std::max<double>(1, steps - 1);
  };
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << left << "\" y=\"22\" font-size=\"15\">" << xml_escape(r.network)
      << ", batch " << r.batch << ": memory, live tensors and workspace per step ("
      << xml_escape(r.command) << ")</text>\n";
  for (int panel_index = 0; panel_index < panels; ++panel_index) {
    const double y0 = top + panel_index * (panel + gap);
    const double y1 = y0 + panel;
    out << "<rect x=\"" << left << "\" y=\"" << y0 << "\" width=\"" << plot_w << "\" height=\""
        << panel << "\" fill=\"none\" stroke=\"#444\"/>\n";
    const std::string label =
        panel_index == 0 ? "heap bytes in use (max " + format_bytes(max_bytes) + ")"
        : panel_index == 1
            ? "live tensors (max " + std::to_string(max_tensors) + ")"
            : "convolution workspace taken at the step (max " + format_bytes(max_workspace) + ")";
    out << "<text x=\"" << left + 4 << "\" y=\"" << y0 + 14 << "\">" << xml_escape(label)
        << "</text>\n";
    if (steps > 1) {
      const double divider = x_of(static_cast<double>(steps) / 2 + 0.5);
      out << "<line x1=\"" << divider << "\" y1=\"" << y0 << "\" x2=\"" << divider << "\" y2=\""
          << y1 << "\" stroke=\"#888\" stroke-dasharray=\"4 3\"/>\n"
          << "<text x=\"" << divider - 60 << "\" y=\"" << y1 - 6 << "\">forward</text>\n"
          << "<text x=\"" << divider + 6 << "\" y=\"" << y1 - 6 << "\">backward</text>\n";
    }
    for (std::size_t i = 0; i < r.policies.size(); ++i) {
      const auto& p = r.policies[i];
      out << "<polyline fill=\"none\" stroke-width=\"1.5\" stroke=\"" << colours[i % 6]
          << "\" points=\"";
      for (const auto& s : p.steps) {
        const double v =
            panel_index == 0 ? static_cast<double>(s.heap_bytes) / static_cast<double>(max_bytes)
            : panel_index == 1
                ? static_cast<double>(s.tensors_live) / max_tensors
                : static_cast<double>(s.workspace_bytes) / static_cast<double>(max_workspace);
        out << std::fixed << std::setprecision(1) << x_of(s.step) << ',' << y1 - v * (panel - 20)
            << ' ';
      }
      out << "\"/>\n";
    }
  }
  // The memory panel's marks: per policy a row of what moved at each step (a copy out, a
  // copy back, a replay), so a curve's dips and bumps can be read against them.
  bool any_marks = false;
  for (std::size_t i = 0; i < r.policies.size(); ++i) {
    const double y = top + 26 + 9.0 * static_cast<double>(i);
    for (const auto& s : r.policies[i].steps) {
      const double x = x_of(s.step);
      const char* c = colours[i % 6];
      if (s.offloads > 0) {
        out << "<polygon class=\"offload\" fill=\"" << c << "\" points=\"" << x - 3 << ',' << y - 3
            << ' ' << x + 3 << ',' << y - 3 << ' ' << x << ',' << y + 3 << "\"/>\n";
      }
      if (s.prefetches > 0) {
        out << "<polygon class=\"prefetch\" fill=\"none\" stroke=\"" << c << "\" points=\"" << x - 3
            << ',' << y + 3 << ' ' << x + 3 << ',' << y + 3 << ' ' << x << ',' << y - 3 << "\"/>\n";
      }
      if (s.replays > 0) {
        out << "<circle class=\"replay\" fill=\"" << c << "\" cx=\"" << x << "\" cy=\"" << y
            << "\" r=\"1.8\"/>\n";
      }
      any_marks = any_marks || s.offloads > 0 || s.prefetches > 0 || s.replays > 0;
    }
  }
  if (any_marks) {
    out << "<text x=\"" << width - right - 4 << "\" y=\"" << top + 14
        << "\" text-anchor=\"end\">marks: &#9660; copy out, &#9651; copy back, &#8226; "
           "replay</text>\n";
  }
  // One legend entry per policy, spread over the plot's width.
  const double legend_y = height - 18;
  const double slot = plot_w / static_cast<double>(std::max<std::size_t>(1, r.policies.size()));
  for (std::size_t i = 0; i < r.policies.size(); ++i) {
    const auto& p = r.policies[i];
    const double x = left + slot * static_cast<double>(i);
    const std::string what = p.fits     ? "peak " + format_bytes(p.peak_bytes)
                             : p.failed ? std::string("failed")
                                        : std::string("does not fit");
    out << "<rect x=\"" << x << "\" y=\"" << legend_y - 10
        << "\" width=\"14\" height=\"10\" fill=\"" << colours[i % 6] << "\"/><text x=\"" << x + 18
        << "\" y=\"" << legend_y << "\">" << xml_escape(p.policy) << " (" << what << ")</text>\n";
  }
  out << "<text x=\"" << width / 2 << "\" y=\"" << top + panels * panel + (panels - 1) * gap + 20
      << "\" text-anchor=\"middle\">step (forward 1..N, backward N+1..2N)</text>\n</svg>\n";
}

void write_summary(std::ostream& out, const run_report& r) {
  out << "\n"
      << r.command << " " << r.network << "  batch " << r.batch << "  budget "
      << (r.budget_bytes ? format_bytes(r.budget_bytes) : std::string("none")) << "  device "
      << r.device << "\n";
  out << std::left << std::setw(12) << "policy" << std::setw(6) << "fits" << std::right
      << std::setw(13) << "peak" << std::setw(13) << "peak live" << std::setw(13) << "max(l_i)"
      << std::setw(13) << "persistent" << std::setw(10) << "tensors" << std::setw(13) << "offloaded"
      << std::setw(13) << "prefetched" << std::setw(8) << "recomp";
  if (r.command == "train") out << std::setw(10) << "img/s" << std::setw(12) << "last loss";
  if (r.command == "plan") out << std::setw(10) << "ms/iter";
  out << "\n";
  for (const auto& p : r.policies) {
    out << std::left << std::setw(12) << p.policy << std::setw(6)
        << (p.fits     ? "yes"
            : p.failed ? "ERR"
                       : "NO")
        << std::right << std::setw(13) << format_bytes(p.peak_bytes) << std::setw(13)
        << format_bytes(p.peak_live_bytes) << std::setw(13) << format_bytes(p.max_layer_bytes)
        << std::setw(13) << format_bytes(p.persistent_bytes) << std::setw(10) << p.tensors_allocated
        << std::setw(13) << format_bytes(p.bytes_offloaded) << std::setw(13)
        << format_bytes(p.bytes_prefetched) << std::setw(8) << p.recomputations;
    if (r.command == "train") {
      const double loss = p.losses.empty() ? 0.0 : p.losses.back();
      out << std::setw(10) << std::fixed << std::setprecision(1) << p.images_per_s;
      // A space of its own, and a loss past 1e6 (a run going wrong, not yet NaN) in
      // exponent form: fixed, 5.3e11 ran into the img/s column on an H200 (VGG-16 at lr 0.01).
      // A row that ran no iteration has no loss (it read 0.00000; plan's rows say "-").
      if (p.losses.empty()) {
        out << ' ' << std::setw(11) << "-";
      } else if (std::abs(loss) < 1e6) {
        out << ' ' << std::setw(11) << std::setprecision(5) << loss;
      } else {
        out.unsetf(std::ios::fixed);
        out << ' ' << std::setw(11) << std::scientific << std::setprecision(4) << loss;
        out.unsetf(std::ios::scientific);
      }
      out.unsetf(std::ios::fixed);
    }
    // A space of its own: a huge image's iteration (1e7 ms) fills the column.
    if (r.command == "plan" && !p.fits) out << ' ' << std::setw(9) << "-";
    if (r.command == "plan" && p.fits) {
      out << ' ' << std::setw(9) << std::fixed << std::setprecision(1)
          << 1e3 * p.seconds_per_iteration;
      out.unsetf(std::ios::fixed);
    }
    out << "\n";
    if (!p.fits) out << "  " << p.policy << ": " << p.failure << "\n";
    if (p.tiling_target_bytes != 0) {
      out << "  " << p.policy << ": the budget's tiled segments did not fit it; it ran tiled for "
          << format_bytes(p.tiling_target_bytes) << " (" << p.tiling_target_bytes
          << " bytes; the layers whose own step is over that tile):\n";
      std::istringstream lines(describe_segments(p.tiling));
      for (std::string line; std::getline(lines, line);) out << "    " << line << "\n";
    }
    if (!p.stopped_by.empty() && p.iterations_run > 0) {
      out << "  " << p.policy << ": stopped by " << p.stopped_by << " after " << p.iterations_run
          << " of " << r.iterations << " iterations: its figures are those iterations'\n";
    }
    if (!p.rank_reports.empty()) {
      out << "  " << p.policy << ": " << p.ranks << " ranks (budget per rank), tightest rank "
          << p.tightest_rank << ";";
      for (const rank_report& q : p.rank_reports) {
        out << " rank " << q.rank << " peak " << format_bytes(q.peak_bytes) << " moved "
            << format_bytes(q.bytes_moved) << ",";
      }
      out << " allreduce " << std::setprecision(4) << 1e3 * p.allreduce_seconds << " ms per "
          << "iteration of which " << 1e3 * p.allreduce_wait_seconds
          << " ms not hidden behind backward (rank 0)\n";
    }
    // A time of 0: no such run fit the budget.
    if (p.ran_as_recompute) {
      const double own =
          p.weighed_all_seconds > 0 ? p.weighed_all_seconds : p.weighed_reactive_seconds;
      out << "  " << p.policy << ": ran as recompute, ";
      if (own > 0) {
        out << "faster here in the plan's model (" << std::setprecision(4)
            << 1e3 * p.weighed_recompute_seconds << " ms per iteration against " << 1e3 * own
            << " ms with its own schedule and cache)\n";
      } else {
        out << "the one way that fits here in the plan's model (" << std::setprecision(4)
            << 1e3 * p.weighed_recompute_seconds << " ms per iteration)\n";
      }
    }
    if (p.ran_without_schedule) {
      out << "  " << p.policy << ": ran without its memory schedule, on the cache alone, ";
      if (p.weighed_all_seconds > 0) {
        out << "faster here in the plan's model (" << std::setprecision(4)
            << 1e3 * p.weighed_reactive_seconds << " ms per iteration against "
            << 1e3 * p.weighed_all_seconds << " ms with it)\n";
      } else {
        out << "which fits where no run with a schedule did (" << std::setprecision(4)
            << 1e3 * p.weighed_reactive_seconds << " ms per iteration in the plan's model)\n";
      }
    }
    const bool other_plan = p.weighed_split_share > 0 && p.weighed_split_share < 1;
    if (other_plan) {
      out << "  " << p.policy << ": TSPLIT: the fastest whole split plan here in the plan's "
          << "model fits its micro-steps in " << std::setprecision(3) << 100 * p.weighed_split_share
          << " % of the budget (" << p.weighed_split_steps << " steps in micro-batches, against "
          << p.fewest_split_steps << " with the fewest, which ";
      // 0: the fewest did not run to the end (host memory ran out, say).
      if (p.weighed_fewest_split_seconds > 0) {
        out << "runs " << std::setprecision(4) << 1e3 * p.weighed_fewest_split_seconds
            << " ms per iteration)\n";
      } else {
        out << "does not fit)\n";
      }
    }
    if (p.mixed_split_steps != 0) {
      out << "  " << p.policy << ": TSPLIT: " << p.mixed_split_steps
          << " steps took another split plan's micro-batches, region by region, faster here in "
             "the plan's model (the whole plan: "
          << std::setprecision(4) << 1e3 * p.weighed_whole_split_seconds << " ms per iteration)\n";
    }
    if (other_plan || p.mixed_split_steps != 0) {
      // Its plan step by step (the plan printed above is the fewest), the first few here.
      constexpr std::size_t shown = 12;
      std::size_t split = 0;
      out << "  " << p.policy << ": its steps in micro-batches:";
      for (const step_record& st : p.steps) {
        if (st.parts <= 1 && st.groups <= 1) continue;
        if (++split > shown) continue;
        out << (split == 1 ? " " : ", ") << st.layer << ' ' << st.pass << ' ' << st.parts;
        if (st.groups > 1) out << "x" << st.groups << " groups";
      }
      if (split > shown) out << ", and " << split - shown << " more (--json, --csv: `parts`)";
      out << "\n";
    }
    if (p.scheduled_swaps + p.scheduled_drops != 0) {
      out << "  " << p.policy << ": memory schedule of " << p.scheduled_swaps << " swaps and "
          << p.scheduled_drops << " drops (rebuilt by replays), predicted " << std::setprecision(4)
          << 1e3 * p.predicted_seconds << " ms per iteration in the "
          << (p.schedule_measured ? "measured times" : "plan's model") << "; " << p.schedule_misses
          << " tensors not where it put them, " << p.evictions << " safety-net evictions\n";
      if (p.scheduled_parks != 0) {
        out << "  " << p.policy << ": " << p.scheduled_parks << " of the swaps park persistent "
            << "tensors (" << format_bytes(p.parked_bytes)
            << ") on the host across the iteration's end\n";
      }
      if (p.staged_steps != 0) {
        out << "  " << p.policy << ": at its staged split steps the schedule keeps "
            << p.scheduled_whole << " micro-tensors whole on the device; " << p.scheduled_to_host
            << " of the swaps go to host memory for a staged step and stay there\n";
      }
      if (p.bound_seconds > 0) {
        out << "  " << p.policy << ": no exact schedule can take less than " << std::setprecision(4)
            << 1e3 * p.bound_seconds << " ms per iteration in that model (a lower bound)\n";
      }
    }
    if (p.replan.replanned || !p.replan.note.empty()) {
      out << "  " << p.policy << ": re-planned from iteration " << p.replan.measured_iteration
          << "'s measured times (its steps " << std::setprecision(4)
          << 1e3 * p.replan.measured_seconds << " ms, the link ";
      if (p.replan.link_gbps > 0) {
        out << std::setprecision(3) << p.replan.link_gbps << " GB/s + " << p.replan.copy_latency_us
            << " us per copy";
      } else {
        out << "unmeasured: no copy ran";
      }
      out << "; the model's schedule predicted " << std::setprecision(4)
          << 1e3 * p.replan.model_seconds << " ms): ";
      if (p.replan.replanned) {
        out << p.replan.gaps_changed << " gaps changed\n";
      } else {
        out << p.replan.note << "\n";
      }
      if (p.replan.model_iteration_seconds > 0) {
        out << "  " << p.policy << ": on trial, the re-planned schedule ran an iteration in "
            << std::setprecision(4) << 1e3 * p.replan.replanned_iteration_seconds
            << " ms, the model's in " << 1e3 * p.replan.model_iteration_seconds
            << " ms: " << (p.replan.replanned ? "the re-planned" : "the model's") << " runs on\n";
      }
      // Which iterations train's img/s is timed over, where the trial is in the reckoning.
      const bool after_trial = p.timed_first > 2;
      const bool in_trial = p.replan.replanned && p.replan.model_iteration_seconds == 0;
      if (r.command == "train" && (after_trial || (in_trial && p.timed_last > 1))) {
        out << "  " << p.policy << ": img/s timed over iterations " << p.timed_first << "-"
            << p.timed_last
            << (after_trial ? ", after the re-planning and its trial"
                            : ", all in the trial of the re-planned schedule")
            << " (each switch of schedule re-places the parameters)"
            << (after_trial ? "" : ": more iterations time the speed after it") << "\n";
      }
    }
    if (p.host_drops != 0) {
      out << "  " << p.policy << ": host memory ran out: " << p.host_drops
          << " values there were given back and rebuilt by replays\n";
    }
    if (p.staged_steps != 0) {
      out << "  " << p.policy << ": TSPLIT: " << p.staged_steps << " steps ran in micro-batches"
          << (p.channel_group_steps != 0
                  ? " (" + std::to_string(p.channel_group_steps) + " in output-channel groups)"
                  : std::string())
          << " with their micro-tensors in host memory, " << format_bytes(p.bytes_staged)
          << " over the link per iteration"
          << (p.bytes_handed != 0 ? " (" + format_bytes(p.bytes_handed) +
                                        " more stayed on the device between split steps)"
                                  : std::string())
          << "\n";
    }
    if (p.bytes_staged_fp16 != 0) {
      out << "  " << p.policy << ": TSPLIT: FP16 micro-tensors (lossy, MEMWEAVE_SPLIT_COMPRESS): "
          << format_bytes(p.bytes_staged_fp16) << " of those crossed as fp16 (half the bytes)";
      if (p.staged_fp16_error > 0) {
        out << ", largest relative rounding error " << std::setprecision(3) << p.staged_fp16_error;
      }
      out << "\n";
    }
    if (p.bytes_compressed != 0) {
      out << "  " << p.policy << ": FP16 compression (lossy, MEMWEAVE_SCHEDULE_COMPRESS): "
          << format_bytes(p.bytes_compressed) << " offloaded as fp16, largest relative "
          << "round-trip error " << std::setprecision(3) << p.max_compression_error << "\n";
    } else if (p.schedule_compress && p.fits) {
      // Asked and not used: said, as where the policy plans no schedule (it was silent).
      out << "  " << p.policy << ": MEMWEAVE_SCHEDULE_COMPRESS=fp16 compressed nothing: the "
          << "memory schedule swapped no fp32 tensor (the results are not rounded)\n";
    }
  }
  // The model the runs planned with (every policy's alike), once: under auto on a GPU its own
  // figures, which no option names.
  for (const auto& p : r.policies) {
    if (!p.fits) continue;
    char line[160];
    std::snprintf(line, sizeof line,
                  "cost model: %.1f TFLOP/s fp32, %.0f GB/s device memory, link %.1f GB/s\n",
                  p.model.flops / 1e12, p.model.memory_bytes_per_s / 1e9,
                  p.model.link_bytes_per_s / 1e9);
    out << line;
    break;
  }
}

void write_file(const std::string& path, const run_report& report,
                void (*writer)(std::ostream&, const run_report&)) {
  // Replaced atomically: a reader never sees half a file, and a failure leaves any earlier
  // file at `path` as it was.
  std::ostringstream text;
  writer(text, report);
  write_file_atomically(path, text.str(), "report");
}

}  // namespace memweave
