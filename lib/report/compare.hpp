#pragma once
/// Two runs compared row by row (matched by name), and the regression gate for CI: a row whose
/// samples/s fell by more than a limit and more than both runs' spreads is slower beyond noise;
/// a row missing from the new run, failed there, or no longer measured is a regression too.

#include <optional>
#include <string>
#include <vector>

#include "report/run_file.hpp"

namespace ptune::report {

/// One row of the comparison.
struct RowCheck {
  std::string name;                     // as the new run (or, for a missing row, the old) names it
  std::optional<double> old_sps, new_sps;        // samples/s; none without numbers
  std::optional<double> old_spread, new_spread;  // spread_pct of each; none when unknown
  std::optional<double> change_pct;     // (new - old) / old, in %; with both numbers
  std::string verdict;   // "slower" | "faster" | "within noise" | "missing" | "failed" |
                         // "not measured" | "new row" | "not measured in either"
  std::string why;       // the verdict's reason, e.g. "-12.3% beyond 5% and the spreads (1.0%, 0.5%)"
  bool beyond_noise = false;  // the change exceeds the limit and both spreads
  bool regression = false;    // slower beyond noise, missing, failed, or no longer measured
};

/// A whole comparison.
struct Comparison {
  std::string old_label, new_label;
  double limit_pct = 0;             // the --fail-if-slower percentage (0 without one)
  std::vector<RowCheck> rows;       // the new run's rows in order, then rows only the old one has
  std::vector<std::string> warnings;  // e.g. a run that did not complete
  /// The rows that are regressions.
  std::vector<const RowCheck*> regressions() const;
};

/// Compares `now` against `old`, row by row, matched by match_key (the k-th row of a name with
/// the k-th of the same name). A change is beyond noise when its size in % exceeds `limit_pct`
/// and both rows' spread_pct (absent spreads count as 0). Verdicts: with numbers on both sides
/// "slower" / "faster" beyond noise, else "within noise"; "missing" (in old only), "failed"
/// (the new row failed), "not measured" (old has numbers, new not: skipped), "new row" (in new
/// only), "not measured in either". Regressions: slower beyond noise, missing, failed, not
/// measured. Throws nothing.
Comparison compare_runs(const RunFile& old, const RunFile& now, double limit_pct);

/// The comparison as an aligned text table, with a closing line naming the regressions.
std::string render_comparison(const Comparison& c);

}  // namespace ptune::report
