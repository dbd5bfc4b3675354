#pragma once
/// `ptune analyze`'s outputs: an aligned terminal table, one stable JSON document (docs/analyze.md,
/// "JSON"), and Markdown.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyze/advice.hpp"
#include "core/table.hpp"

namespace ptune::analyze {

struct Version;  // analyze/compare.hpp

/// The analysis as JSON: path, writer, device, steps_from, verdict {rule, evidence, move,
/// text}, notes, rank, steps [...], mean, tensor_core_pct, half_precision_pct, top_kernels,
/// top_operators, dataloader, h2d, syncs, distributed, files. Every key is always present
/// (null where the trace cannot tell). Throws nothing.
nlohmann::ordered_json to_json(const Analysis& a, const Version* v = nullptr);

/// The device time of a rank as HTA's temporal breakdown defines it (idle, compute and
/// non-compute % of the span of its device work; kernel time by kernel); null without a GPU.
nlohmann::ordered_json gpu_json(const Breakdown& b);

/// A rank's FLOP/s per operator class, bytes, intensity and bound against its ceilings, as JSON
/// (the "throughput" key) and as the terminal table's lines ("" when the trace has neither FLOPs
/// nor shapes and nothing to advise). Throw nothing.
nlohmann::ordered_json throughput_json(const Throughput& th);
std::string throughput_table(const Throughput& th);
/// That table's columns and cells (a row per class, then the step's): the terminal's and the HTML
/// page's. Throws nothing.
table::Table throughput_cells(const Throughput& th);

/// Renders the analysis in `format` ("table" | "json" | "md" | "csv": the split per step).
/// `v`, when given, adds its samples/s (batch size). Throws nothing.
std::string render_analysis(const Analysis& a, const std::string& format, const Version* v = nullptr);

/// The formats render_analysis() knows.
const std::vector<std::string>& formats();

}  // namespace ptune::analyze
