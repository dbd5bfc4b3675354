#pragma once
/// `ptune analyze`'s outputs: an aligned terminal table, one stable JSON document (docs/analyze.md,
/// "JSON"), and Markdown.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyze/advice.hpp"

namespace ptune::analyze {

/// The analysis as JSON: path, writer, device, steps_from, verdict {rule, evidence, move,
/// text}, notes, rank, steps [...], mean, tensor_core_pct, half_precision_pct, top_kernels,
/// top_operators, dataloader, h2d, syncs, distributed, files. Every key is always present
/// (null where the trace cannot tell). Throws nothing.
nlohmann::ordered_json to_json(const Analysis& a);

/// Renders the analysis in `format` ("table" | "json" | "md"). Throws nothing.
std::string render(const Analysis& a, const std::string& format);

/// The formats render() knows.
const std::vector<std::string>& formats();

}  // namespace ptune::analyze
