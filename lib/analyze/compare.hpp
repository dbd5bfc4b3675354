#pragma once
/// `ptune analyze BASE NEXT...`: the iterative table of tuning one's own training
/// code, one trace (file, or folder of ranks) per version: step time, samples/s, speedups, the
/// split, GPU busy, peak memory and the verdict per version; then, per adjacent pair, what
/// changed most (kernels, operators, copies, syncs, the data loader).

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyze/advice.hpp"

namespace ptune::analyze {

/// One version in the table.
struct Version {
  std::string label;                      // --label, else the folder or file name
  Analysis analysis;
  double step_ms = 0;                     // the slowest rank's mean step
  std::optional<int64_t> batch_size;      // --batch-size, else read from the trace's input shapes
  std::optional<double> samples_per_s;    // batch size x ranks / step time
  std::optional<double> vs_prev, vs_first;  // speedups (step time before / now)
};

/// One change between two versions: what, and by how much per step.
struct Change {
  std::string what;      // "kernel", "operator", "copy", "sync", "data loader", "verdict"
  std::string name;
  double before_ms = 0;  // per step (copies and syncs: calls per step)
  double after_ms = 0;
  std::string text;      // one line
};

/// The changes from version i-1 to i.
struct PairChanges {
  size_t from = 0, to = 0;
  std::vector<Change> changes;
};

struct Comparison {
  std::vector<Version> versions;
  std::vector<PairChanges> pairs;
};

/// Options of the table.
struct CompareOptions {
  std::vector<std::string> labels;       // --label, one per path (or none)
  std::optional<int64_t> batch_size;     // --batch-size
};

/// Analyzes each of `paths` (analyze()) and compares them in order. Throws DataError as
/// analyze(), and "--label given N times for M traces" when the counts differ.
Comparison compare(const std::vector<std::string>& paths, const AnalyzeOptions& opt, const CompareOptions& copt);

/// The comparison of already analyzed versions (labels and batch sizes set). Throws nothing.
Comparison compare_analyses(std::vector<Version> versions);

/// Renders the table in `format` ("table" | "json" | "md" | "csv"). Throws nothing.
std::string render_comparison(const Comparison& c, const std::string& format);
nlohmann::ordered_json comparison_json(const Comparison& c);

/// The split columns of the table, % of the step: data loading, copies (and memsets), kernels
/// (and communication), host (CPU operators and CUDA runtime calls), idle (none of these).
struct Split {
  double data = 0, copies = 0, kernels = 0, host = 0, idle = 0;
};
Split split_of(const StepBreakdown& mean);

}  // namespace ptune::analyze
