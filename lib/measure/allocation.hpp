#pragma once
/// Where a row timed in processes spends its next seconds: more windows of the processes it has,
/// or one more process on each side. After Kalibera and Jones ("Rigorous Benchmarking in
/// Reasonable Time", ISMM 2013): the spread of a comparison in processes has a part more windows
/// average away (the windows' own noise) and a part only more processes do (each process's own
/// speed, where its memory landed); with few processes the interval's t factor, set by their count
/// (two a side: one degree of freedom a side, t = 63.7 at 99%), dominates both. The model predicts
/// the interval's half-width for either choice from what the row measured so far, and what a
/// verdict would need. No LibTorch; docs/statistics.md, "How many processes".

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/stats.hpp"

namespace ptune::measure {

/// A comparison in processes, its spread split by level (logs of samples/s).
struct Spread {
  double log_point = 0;    // the speedup's log
  double process_var = 0;  // the speedup's variance from the processes' own speeds: falls as 1/processes
  double window_var = 0;   // ... from the windows' own noise: falls as 1/pairs
  double df = 0;           // the degrees of freedom of the speedup's variance now
  int64_t processes = 0;   // processes a side now (the smaller side's count)
  int64_t pairs = 0;       // pairs kept
  /// The process-level spread as one process's speed varies (one standard deviation, %), the
  /// window-level as one pair's log-ratio does: what a person reads in a note.
  double process_sd_pct() const;
  double window_sd_pct() const;
  /// Both, as every note says them: "one process's own speed varied by 2.1% and one pair's by
  /// 0.8% (one standard deviation)".
  std::string text() const;
};

/// The spread of a paired comparison whose sides ran in several processes each (`a_ms` scaled to
/// time per sample as B's; each window's process in `a_process`, `b_process`): the speedup's
/// variance (stats::speedup_terms) split into a window part, from the pairs' residual spread once
/// each process's own effect is taken out (an additive model of the two sides' process effects),
/// and the rest, the processes'. None with fewer than two processes a side or no residual degrees
/// of freedom. Throws nothing.
std::optional<Spread> spread_of(const std::vector<double>& a_ms, const std::vector<int>& a_process,
                                const std::vector<double>& b_ms, const std::vector<int>& b_process);

/// `s` at the optimistic end of what it measured: both parts of its variance at their lower
/// bound at `confidence` (each times df / chi-squared's `confidence` quantile at its degrees of
/// freedom): with few processes the spread is itself known only roughly, and a verdict that
/// needs too much at the estimate may not at this bound. Throws nothing; `s` where it has no
/// degrees of freedom.
Spread optimistic(const Spread& s, double confidence);

/// The half-width (log) of the speedup's interval at `level` predicted for `processes` a side and
/// `pairs` pairs from `s`: each part of the variance scaled by its count, the degrees of freedom
/// by the processes' (a process adds one a side). Throws nothing; infinity where there are none.
double predicted_half_width(const Spread& s, double processes, double pairs, double level);

/// Whether starting one more process a side (`start_ms` of wall time for both) narrows the
/// interval more than the pairs (`pair_ms` each) the same time would time in the processes at
/// hand. Throws nothing.
bool more_processes_narrow(const Spread& s, double pair_ms, double start_ms, double level);

/// What a verdict would need: the processes a side, the pairs and the time from now.
struct Need {
  int64_t processes = 0;
  int64_t pairs = 0;
  double ms = 0;  // from now, starting the processes and timing the pairs
};

/// The least costly way to a verdict under `rule` from `s`: over every count of processes a side
/// from those at hand up to `max_processes`, the fewest pairs (at least two windows a process) at
/// which the predicted interval around the speedup measured so far is within noise or beyond the
/// noise floor, the count whose starts and pairs take least time. None where no count reaches it
/// (a change about the size of the floor). Throws nothing.
std::optional<Need> need_to_decide(const Spread& s, double pair_ms, double start_ms, double level,
                                   const stats::NoiseRule& rule, int64_t max_processes);

/// The smallest change (%) a row with the spread `s` can call faster or slower in `budget_ms` of
/// timing from its first window, starting with `processes` a side: the narrowest interval that
/// budget buys (pairs of those processes, or more processes up to `max_processes` a side, each
/// start `start_ms`), beyond the noise floor. None where the budget buys no interval. Throws
/// nothing.
std::optional<double> decidable_change_pct(const Spread& s, int64_t processes, double pair_ms,
                                           double start_ms, double level, const stats::NoiseRule& rule,
                                           int64_t max_processes, double budget_ms);

/// The same for a row in one process each side, whose pairs' log-ratios vary by `sd_log` (one
/// pair's): the interval of the pairs `budget_ms` buys. Throws nothing.
std::optional<double> decidable_change_pct(double sd_log, double pair_ms, double level,
                                           const stats::NoiseRule& rule, double budget_ms);

}  // namespace ptune::measure
