#pragma once
/// `ptune analyze BASE NEXT...`: the iterative table of tuning one's own training
/// code, one trace (file, or folder of ranks) per version: step time, samples/s, speedups with
/// their intervals and verdicts, the split, GPU busy, peak memory and the verdict per version;
/// then, per adjacent pair, what changed most (kernels, operators, copies, syncs, the data loader).
///
/// A speedup is measured as the sweep measures two independent runs (core/stats.hpp): the
/// per-step times of the two traces (their ProfilerStep#N windows) are two samples, compared by
/// Welch's t-interval on log step times at stats::kSpeedupLevel, and its verdict is
/// stats::verdict_of's with analyze's NoiseRule (noise_rule()): faster, slower, within noise or
/// undecided. The steps of one trace do not measure how two separate runs differ (two processes
/// started alike ran up to 8% apart on a quiet 2-core VM, more beside other work), so a
/// difference within ±noise_pct (default 10%) is never called faster or slower, and within noise
/// means the interval lies inside ±noise_pct. Fewer than kMinSteps steps on a side, or a trace
/// recorded under load, make it undecided. Where both traces' samples per step are known and
/// differ (a batch change), the speedup compares time per sample.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analyze/advice.hpp"
#include "core/stats.hpp"

namespace ptune::analyze {

/// The fewest steps per trace for a speedup to be called faster, slower or within noise.
inline constexpr size_t kMinSteps = 3;

/// The default of --noise-pct: the difference between two separate runs that their steps do not
/// measure, in percent.
inline constexpr double kDefaultNoisePct = 10.0;

/// The verdict rule of a comparison of two traces for a noise of `noise_pct` percent: the floor
/// and the within-noise target both that (the target at least measure's default 3%). Throws
/// nothing.
stats::NoiseRule noise_rule(double noise_pct);

/// A speedup of one version over an earlier one, with its noise.
struct Speedup {
  stats::Interval interval;  // point: the ratio of geometric mean step times (earlier / this);
                             // lo, hi: Welch's t-interval (none with fewer than 3 steps in all)
  stats::Verdict verdict = stats::Verdict::kUndecided;
  std::string reason;  // why undecided whatever the interval: "2 steps in `a`: ...", load
  size_t steps_before = 0, steps_after = 0;
  int64_t samples_before = 0, samples_after = 0;  // samples per step, where they differ (per sample); else 0
  double noise_pct = kDefaultNoisePct;            // the rule's floor (noise_rule)
};

/// One version in the table.
struct Version {
  std::string label;  // --label, else the folder or file name
  Analysis analysis;
  double step_ms = 0;                       // the slowest rank's mean step
  std::optional<int64_t> batch_size;        // --batch-size, else read from the trace's input shapes
  std::optional<double> samples_per_s;      // batch size x ranks / step time
  std::optional<double> vs_prev, vs_first;  // speedups (step time before / now): the intervals' points
  std::optional<Speedup> prev, first;       // the same with their intervals and verdicts
  std::vector<double> step_ms_each;         // the slowest rank's step times, ms
  bool under_load = false;                  // recorded under competing load (ptune's traces say so)
  std::string load_summary;
};

/// One change between two versions: what, and by how much per step.
struct Change {
  std::string what;  // "kernel", "operator", "copy", "sync", "data loader", "verdict"
  std::string name;
  double before_ms = 0;  // per step (copies and syncs: calls per step)
  double after_ms = 0;
  std::string text;  // one line
};

/// The changes from version i-1 to i.
struct PairChanges {
  size_t from = 0, to = 0;
  std::vector<Change> changes;
};

struct Comparison {
  std::vector<Version> versions;
  std::vector<PairChanges> pairs;
  double noise_pct = kDefaultNoisePct;  // the verdicts' rule: noise_rule(noise_pct)
};

/// Options of the table.
struct CompareOptions {
  std::vector<std::string> labels;      // --label, one per path (or none)
  std::optional<int64_t> batch_size;    // --batch-size
  double noise_pct = kDefaultNoisePct;  // --noise-pct
};

/// Analyzes each of `paths` (analyze()) and compares them in order. Without --label, a version
/// is labelled by its file or folder name, and labels that would repeat by the parent folder
/// too ("run1/trace1"). Throws DataError as analyze(), and "--label given N times for M traces"
/// when the counts differ.
Comparison compare_versions(const std::vector<std::string>& paths, const AnalyzeOptions& opt,
                            const CompareOptions& copt);

/// The comparison of already analyzed versions (labels and batch sizes set). Throws nothing.
Comparison compare_analyses(std::vector<Version> versions, double noise_pct = kDefaultNoisePct);

/// The speedup of `after` over `before` from their step times (Welch's t-interval on logs; per
/// sample where both sides' samples per step are known and differ), and its verdict: undecided
/// with fewer than kMinSteps steps on a side or a side recorded under load, else
/// stats::verdict_of with noise_rule(noise_pct). Throws nothing.
Speedup speedup_between(const Version& before, const Version& after, double noise_pct = kDefaultNoisePct);

/// A speedup as one cell: "x1.19 ±6.2% faster", "x1.27 [0.970, 1.67] undecided", "x0.98 undecided"
/// (the interval as every output prints it: report::interval_text). Throws nothing.
std::string speedup_text(const Speedup& s);

/// Why a speedup reads as it does, one line: the interval's level and the steps behind it, and
/// for undecided the reason. Throws nothing.
std::string speedup_detail(const Speedup& s);

/// Renders the table in `format` ("table" | "json" | "md" | "csv"). Throws nothing.
std::string render_versions(const Comparison& c, const std::string& format);
nlohmann::ordered_json comparison_json(const Comparison& c);

/// The split columns of the table, % of the step: data loading, copies (and memsets), kernels
/// (and communication), host (CPU operators and CUDA runtime calls), idle (none of these).
struct Split {
  double data = 0, copies = 0, kernels = 0, host = 0, idle = 0;
};
Split split_of(const StepBreakdown& mean);

}  // namespace ptune::analyze
