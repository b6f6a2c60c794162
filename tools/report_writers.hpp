// Writers of a run_report: JSON (totals + per-step rows per policy), CSV (one row per
// policy and step), SVG (memory and live tensors per step, one curve per policy, with the
// forward/backward divider, like Fig. 10 of the SuperNeurons paper) and the text summary.
#pragma once

#include <ostream>
#include <span>
#include <string>

#include "memweave/engine/run_report.hpp"

namespace memweave {

void write_json(std::ostream& out, const run_report& report);
void write_csv(std::ostream& out, const run_report& report);
void write_svg(std::ostream& out, const run_report& report);
/// The summary table printed at the end of train/plan.
void write_summary(std::ostream& out, const run_report& report);
/// One line per tiled segment ("tiled segment A..B (N layers) in HxW tiles: ..."), "" for none.
std::string describe_segments(std::span<const tiled_segment_choice> segments);

/// Writes with `writer` to `path`; throws invalid_argument naming the path when it cannot.
void write_file(const std::string& path, const run_report& report,
                void (*writer)(std::ostream&, const run_report&));

}  // namespace memweave
