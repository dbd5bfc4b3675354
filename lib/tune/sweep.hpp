#pragma once
/// The sweep runner: each row of the config measured in turn, cumulative, each row's failure
/// (an unsupported option, out of memory) recorded in its status while the sweep goes on.

#include <atomic>
#include <functional>
#include <string>

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
};

/// The environment the results record (LibTorch version, device, threads).
report::Environment environment(const config::ExperimentConfig& cfg);

/// Runs every row of cfg's sweep (or the config itself when it has none) and returns the
/// results. Throws ConfigError for an invalid base config; per-row problems go in row status.
/// On interruption, `out` holds the finished rows and Interrupted is thrown.
void run_sweep(const config::ExperimentConfig& cfg, const SweepOptions& options, report::Results& out);

}  // namespace ptune::tune
