#pragma once
/// The sweep runner: each row of the config measured in turn, cumulative, each row's failure
/// (an unsupported option, out of memory) recorded in its status while the sweep goes on.

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "report/results.hpp"

namespace ptune::tune {

struct SweepOptions {
  /// Called after every finished row (e.g. to rewrite --out atomically).
  std::function<void(const report::Results&)> on_row;
  /// Called while a row runs: (row index, row name, phase, step, of steps, samples per step).
  std::function<void(size_t, const std::string&, const std::string&, int64_t, int64_t, int64_t)> on_progress;
  /// Set (e.g. by a SIGINT handler) to stop after the current step; the sweep then ends
  /// with status "interrupted" and throws ptune::Interrupted.
  const std::atomic<bool>* interrupted = nullptr;
  /// The rows to run (0-based indices into the sweep, ascending; parse_rows); empty = all. A
  /// row not run still applies its overrides to the rows after it (the sweep is cumulative); a
  /// row left out because it cannot help here (engine::cannot_help_here) does not.
  std::vector<size_t> rows;
  /// stderr is a terminal someone watches: the sweep says there, once its first compared row is
  /// timed, what size of change its rows can decide (it is also that row's note).
  bool live = false;
};

/// Parses a --rows list: comma-separated 0-based indices and inclusive ranges ("7", "0,3",
/// "5-7") of a sweep with `n` rows. Returns the indices ascending, without repeats. Throws
/// UsageError naming the bad part and the allowed range.
std::vector<size_t> parse_rows(const std::string& spec, size_t n);

/// The environment the results record (LibTorch version, device, threads).
report::Environment environment(const config::ExperimentConfig& cfg);

/// Runs every row of cfg's sweep (or the config itself when it has none) and returns the
/// results. Two passes: every row is timed first (time_row), then the rows that want it
/// (bench::wants_profile: GPU busy on CUDA, traces with measure.profile) are profiled, so no
/// timed step ever runs with the profiler's CUPTI attached; diagnoses are completed then.
/// Throws ConfigError for an invalid base config; per-row problems go in row status (a
/// CUDA-graph row that fell back to eager steps: "eager fallback: ..."). On interruption, `out`
/// holds the finished rows and Interrupted is thrown.
void run_sweep(const config::ExperimentConfig& cfg, const SweepOptions& options, report::Results& out);

}  // namespace ptune::tune
