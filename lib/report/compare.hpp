#pragma once
/// Two runs compared row by row (matched by name), and the regression gate for CI: a row whose
/// samples/s fell beyond the limit by the statistics a sweep uses (compare_runs) is slower;
/// a row missing from the new run, failed there, or no longer measured is a regression too.

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "report/run_file.hpp"

namespace ptune::report {

/// One row of the comparison.
struct RowCheck {
  std::string name;                              // as the new run (or, for a missing row, the old) names it
  std::optional<double> old_sps, new_sps;        // samples/s; none without numbers
  std::optional<double> old_spread, new_spread;  // spread_pct of each; none when unknown
  std::string old_interval, new_interval;        // each samples/s's interval text (" ±1.8%"); "" without
  std::optional<double> change_pct;              // (new - old) / old, in %; with both numbers
  std::optional<std::pair<double, double>> interval_pct;  // its 99% interval, in %, from both runs' windows
  std::string verdict;        // "slower" | "faster" | "within noise" | "undecided" | "missing" | "failed" |
                              // "not measured" | "new row" | "not measured in either"
  std::string why;            // the verdict's reason, e.g. "-12.3% beyond 5% and the spreads (1.0%, 0.5%)"
  bool beyond_noise = false;  // faster or slower beyond the noise
  bool regression = false;    // slower beyond noise, missing, failed, or no longer measured
};

/// A whole comparison.
struct Comparison {
  std::string old_label, new_label;
  double limit_pct = 0;               // the --fail-if-slower percentage (0 without one)
  std::vector<RowCheck> rows;         // the new run's rows in order, then rows only the old one has
  std::vector<std::string> warnings;  // e.g. a run that did not complete
  /// The rows that are regressions.
  std::vector<const RowCheck*> regressions() const;
};

/// Compares `now` against `old`, row by row, matched by match_key (the k-th row of a name with
/// the k-th of the same name). With both rows' timed windows (repeat_ms_per_step), the change
/// is judged as a sweep judges its rows: the 99% Welch interval (99.9% when either row says
/// under_load) of new/old samples/s (time per
/// sample) gets stats::verdict_of's verdict, with `limit_pct` as the floor a change must
/// clear (0: the default floor, 1%): "slower", "faster", "within noise" or "undecided". Rows
/// without windows (files from other tools): beyond noise when the change exceeds `limit_pct`
/// and both rows' spread_pct. Other verdicts: "missing" (in old only), "failed" (the new row
/// failed), "not measured" (old has numbers, new not: skipped), "new row" (in new only), "not
/// measured in either". Regressions: slower, missing, failed, not measured. Throws nothing.
Comparison compare_runs(const RunFile& old, const RunFile& now, double limit_pct);

/// The comparison as an aligned text table, with a closing line naming the regressions.
std::string render_run_comparison(const Comparison& c);

}  // namespace ptune::report
