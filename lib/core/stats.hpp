#pragma once
/// Statistics of timed windows: intervals, the verdict a speedup earns, and a monotonic
/// stopwatch. One place decides what "beyond noise" means for a sweep row, a tune trial and
/// the CI gate (report/compare), so the three always agree.
///
/// The method (docs/statistics.md): every figure is a ratio of times, so the statistics work on
/// logarithms. A configuration's windows (ms/step of `measure.steps` steps each) give a
/// geometric mean and Student's t-interval of the mean log; a speedup measured interleaved
/// (A B B A ...) is the geometric mean of the pairs' ratios with the t-interval of their mean
/// log-ratio (a paired design: drift and other programs hit both sides of a pair alike); two
/// independent runs compare by Welch's t-interval on logs; a chain of speedups (the cumulative
/// column) by the t-interval of the sum of its links' log terms (sum_interval).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ptune::stats {

/// Median of the values (mean of the middle two for an even count); 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Milliseconds since construction or the last reset (steady clock).
class Stopwatch {
 public:
  Stopwatch() : start_(Clock::now()) {}
  void reset() { start_ = Clock::now(); }
  double ms() const { return std::chrono::duration<double, std::milli>(Clock::now() - start_).count(); }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_;
};

/// The confidence level of a row's samples/s interval.
inline constexpr double kRowLevel = 0.95;
/// The confidence level of a speedup's interval, from which its verdict is read: higher than a
/// row's because a sweep makes one comparison per row (docs/statistics.md has the false-call
/// rates this gives with the stopping rule of kEarlyStopLevel).
inline constexpr double kSpeedupLevel = 0.99;
/// The level a quiet row's speedup interval must clear at a look before its budget to end the
/// row as faster or slower (a Haybittle-Peto boundary): looking after every pair at
/// kSpeedupLevel would give chance that many tries, and an A/A row would be called faster or
/// slower 2-4% of the time on noisy windows instead of about 1%. At the budget the verdict is
/// read at kSpeedupLevel, as reported (docs/statistics.md).
inline constexpr double kEarlyStopLevel = 0.999;
/// The level for a speedup measured under competing load (LoadReport::under_load on either
/// side): another program's bursts are not the independent noise a t-interval assumes, so such
/// a speedup needs stronger evidence to be called faster or slower (docs/statistics.md).
inline constexpr double kSpeedupLevelUnderLoad = 0.999;
/// kSpeedupLevelUnderLoad when `under_load`, else kSpeedupLevel.
inline constexpr double speedup_level(bool under_load) {
  return under_load ? kSpeedupLevelUnderLoad : kSpeedupLevel;
}
/// A level as every text says it: "95%", "99%", "99.9%". Throws nothing.
std::string level_text(double level);

/// The p-quantile of Student's t distribution with `df` degrees of freedom (Boost.Math).
/// Throws std::domain_error for p outside (0, 1) or df <= 0.
double t_quantile(double p, double df);

/// The p-quantile of the chi-squared distribution with `df` degrees of freedom (Boost.Math).
/// Throws std::domain_error for p outside (0, 1) or df <= 0.
double chi2_quantile(double p, double df);

/// An estimate with its interval; `n` is the number of observations behind it.
struct Interval {
  double point = 0, lo = 0, hi = 0;
  int64_t n = 0;
  double level = 0;  // confidence level, e.g. 0.95; 0 when there is no interval (n < 2)
  std::string text;  // read back from a results file: its text as printed then (" ±1.8%"), which
                     // report::interval_text gives again; "" otherwise
  /// Whether an interval was computed (n >= 2 and finite bounds).
  bool valid() const { return level > 0 && lo > 0 && hi >= lo; }
  /// The interval's half-width as a percentage of the point, on the log scale
  /// (100 * (sqrt(hi / lo) - 1)); 0 without an interval.
  double half_width_pct() const;
};

/// Geometric mean of positive `values` with the t-interval of their mean log at `level`
/// (n < 2: point only). Values <= 0 are ignored. Throws nothing.
Interval log_mean_interval(const std::vector<double>& values, double level = kRowLevel);

/// The speedup of B over A from paired times (a_ms[i], b_ms[i]) (ms per step; B faster gives
/// a speedup > 1): the geometric mean of a/b with the t-interval of the mean log-ratio at
/// `level`. Pairs with a non-positive time are ignored. Throws std::invalid_argument when the
/// sizes differ.
Interval paired_speedup(const std::vector<double>& a_ms, const std::vector<double>& b_ms,
                        double level = kSpeedupLevel);

/// The speedup of B over A from independent windows (two runs): the ratio of geometric means
/// with Welch's t-interval on logs (Welch-Satterthwaite degrees of freedom); when one side has
/// a single window, its spread is taken as the other side's. Both sides need at least one
/// window, and together three (else: point only). Throws nothing.
Interval welch_speedup(const std::vector<double>& a_ms, const std::vector<double>& b_ms,
                       double level = kSpeedupLevel);

/// One term of a sum of log means (a figure built from several sets of windows): the mean of
/// some logarithms, the variance of that mean (s^2 / n) and the degrees of freedom of that
/// variance (n - 1; 0 when there is no spread of its own, a single value).
struct LogTerm {
  double mean = 0, var = 0, df = 0;
};

/// The terms of a paired speedup of B over A (one term: the mean log-ratio ln a - ln b).
/// Pairs with a non-positive time are ignored. Throws std::invalid_argument when the sizes
/// differ.
std::vector<LogTerm> paired_terms(const std::vector<double>& a_ms, const std::vector<double>& b_ms);

/// The terms of a speedup of B over A from independent windows (two terms: +mean ln a,
/// -mean ln b); a side with one window borrows the other side's spread and degrees of freedom,
/// as welch_speedup does. Empty when a side has no positive window. Throws nothing.
std::vector<LogTerm> welch_terms(const std::vector<double>& a_ms, const std::vector<double>& b_ms);

/// The term of a rate from its windows: ln(`per_window` / window) averaged over `window_ms`
/// (e.g. samples/s from ms/step windows with per_window = 1000 * samples per step); over
/// several processes (`process`, one per window; empty: one process) with process_term's
/// spread. Throws nothing; a mean of 0 and df 0 without windows or with a process list of
/// another length.
LogTerm rate_term(const std::vector<double>& window_ms, double per_window,
                  const std::vector<int>& process = {});

/// The term of mean ln(ms) over windows timed in several processes started alike, `process[i]`
/// being the process window i ran in (any ids): each process's mean log, then the mean of those.
/// A process's own speed (where its memory landed) is a random effect that more windows of the
/// same processes do not average away, so the variance is that of the process means over their
/// count (s^2 / k), with k - 1 degrees of freedom. One process: its mean with df 0 (no spread).
/// Windows with a non-positive time are ignored. Throws std::invalid_argument when the sizes
/// differ.
LogTerm process_term(const std::vector<double>& ms, const std::vector<int>& process);

/// The terms of a speedup of B over A (in log samples/s: ln a - ln b) from each side's windows
/// and the processes they ran in (`a_process`, `b_process`; empty: all in one process, ptune's
/// own or a single child). Both sides in one process each: paired_terms when `paired` (a_ms[i]
/// timed beside b_ms[i]), else welch_terms. Both in several processes and paired: the mean
/// log-ratio of the pairs, whose spread is that of the pairs' mean log-ratio by A's process
/// (over their count) plus that by B's process (over theirs), each with its count less one
/// degrees of freedom: what happened to the machine during a pair cancels in its ratio, and each
/// side's processes count as draws (B's processes must meet several of A's: ProcessGroup's
/// shifted turns). Several processes, apart: each side's process_term. A side in one process
/// beside one in several is one more draw of a process, its mean over its windows with the other
/// side's spread of a process mean (k times its term's variance) and degrees of freedom. Empty
/// when a side has no positive window. Throws std::invalid_argument when a side's process list
/// is neither empty nor as long as its windows, or paired sides differ in length.
std::vector<LogTerm> speedup_terms(const std::vector<double>& a_ms, const std::vector<int>& a_process,
                                   const std::vector<double>& b_ms, const std::vector<int>& b_process,
                                   bool paired);

/// sum_interval of speedup_terms at `level`, its count the windows of both sides (the pairs when
/// paired and in one process each). Throws as speedup_terms.
Interval speedup_interval(const std::vector<double>& a_ms, const std::vector<int>& a_process,
                          const std::vector<double>& b_ms, const std::vector<int>& b_process, bool paired,
                          double level);

/// The interval of the geometric mean of `ms` at `level`: log_mean_interval for windows of one
/// process (`process` empty), else that of their process_term. Throws as process_term.
Interval mean_interval(const std::vector<double>& ms, const std::vector<int>& process, double level);

/// exp(sum of the terms' means) with the t-interval of the sum at `level`: the variance is the
/// sum of the terms' variances, the degrees of freedom Welch-Satterthwaite's. One paired term
/// gives paired_speedup's interval exactly, two Welch terms welch_speedup's, so a chain of one
/// link is the link itself. `n` is recorded as the interval's count. A term without spread
/// information (df 0) makes it point-only. Throws nothing.
Interval sum_interval(const std::vector<LogTerm>& terms, double level, int64_t n = 0);

/// Percentile bootstrap interval of the mean of `values` (for tests and small tools):
/// deterministic for a given `seed`. n < 2: point only. Throws nothing.
Interval bootstrap_mean(const std::vector<double>& values, double level = 0.95, int resamples = 4000,
                        uint64_t seed = 0x5EEDULL);

/// What a speedup's interval says.
enum class Verdict { kFaster, kSlower, kWithinNoise, kUndecided };

/// The thresholds of a verdict (measure.target_ci_pct, measure.noise_pct).
struct NoiseRule {
  double target_pct = 3.0;  // within noise: the interval lies within 1.00x +- this
  double floor_pct = 1.0;   // differences smaller than this are never called faster or slower
};

/// The verdict of a speedup interval:
///  - faster: the whole interval lies above 1 + floor; slower: below 1 / (1 + floor);
///  - within noise: neither, and the whole interval lies within [1/(1+target), 1+target]: any
///    real difference is smaller than the target, too small to act on (an equivalence test: an
///    interval such as [1.009, 1.06] is not within noise, however narrow, but undecided);
///  - undecided: none of these (too few windows, or too noisy for the time the row had).
/// Throws nothing.
Verdict verdict_of(const Interval& speedup, const NoiseRule& rule);

/// How many pairs a paired speedup whose log-ratios have mean `mean_log` and standard deviation
/// `sd_log` (one pair's) would need for its interval at `level` to earn a verdict under `rule`:
/// the fewest n at which the half-width t(level, n - 1) * sd / sqrt(n) fits inside 1.00x
/// +-target around the mean (within noise) or stays beyond +-floor (faster or slower), whichever
/// comes first (with target > floor there is always room on one side). 0 past 100,000 pairs or
/// on bad input. An estimate: the mean and the spread are themselves measured. Throws nothing.
int64_t pairs_to_decide(double mean_log, double sd_log, double level, const NoiseRule& rule);

/// "faster" | "slower" | "within noise" | "undecided". Throws nothing.
const char* verdict_name(Verdict v);

/// The confidence level of the start-up transient test (transient_end): on stationary noise a
/// series loses its first window with probability 1 - kTransientLevel (docs/statistics.md).
inline constexpr double kTransientLevel = 0.995;

/// How many windows at the front of `values` (ms/step, in the order timed) are the pipeline's
/// start-up transient, to be left out of every figure. The reference is the series' later half
/// (the last n - n/2 windows, taken as warm); on logs, its one-sided upper prediction bound at
/// `level` is mean + t(level, m - 1) * sd * sqrt(1 + 1/m) (m windows): where a new window of the
/// same distribution falls below with probability `level`. Windows are dropped from the front
/// while the leading one lies above that bound, never beyond the first half. Needs 5 windows or
/// more (a reference of 3); fewer, or any value <= 0: 0. On stationary normal noise the first
/// window is dropped with probability exactly 1 - level (it is independent of the reference),
/// and nothing else is dropped unless it is. Throws nothing.
int64_t transient_end(const std::vector<double>& values, double level = kTransientLevel);

/// The transient of a paired comparison, in pairs: the larger of transient_end() of each side's
/// windows (`a_ms`, `b_ms`, in the order timed), so that pairs stay pairs. Throws nothing.
int64_t transient_pairs(const std::vector<double>& a_ms, const std::vector<double>& b_ms,
                        double level = kTransientLevel);

/// Indices of outlying values: further from the median than 3.5 scaled median absolute
/// deviations (1.4826 * MAD; the modified z-score of Iglewicz and Hoaglin), and by more than
/// 5% of the median. Needs 5 or more values. Throws nothing.
std::vector<size_t> outliers(const std::vector<double>& values);

}  // namespace ptune::stats
