#pragma once
/// One source for every figure on a row (docs/statistics.md, "Which figure is which").
///
/// A sweep measures speedups in pairs: each row against the previous row of its mode and model,
/// their windows alternating. The figures of a row all follow from those links:
///  - vs prev: the row's own link (its pairs with the row it was compared with);
///  - vs base: the product of the links from the first row of its mode and model to it, with
///    the t-interval of the sum of their log means (a chain of one link is that link: where the
///    previous row is the base, vs prev and vs base are one measurement);
///  - samples/s: the base row's own rate (its windows' geometric mean) times vs base, with the
///    interval of that whole sum (the base's windows and every link).
/// So the ratio of any two printed rates is the speedup printed between them, inside its
/// interval. The windows each row timed stay in the results (repeat_ms_per_step,
/// prev_ms_per_step) for anyone who wants them. The CI gate (report/compare) rebuilds the same
/// sums from two results files.
///
/// And one formatter for every interval that any output prints (interval_text).

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "core/stats.hpp"

namespace ptune::report {

/// What the figures of one row are built from: the windows it timed and what it was compared
/// with. A row that was not measured has no windows.
struct ChainRow {
  double samples_per_step = 0;          // all ranks' samples in one step
  std::vector<double> window_ms;        // ms/step of each timed window
  std::vector<int> window_process;      // the process each window ran in, where several; else empty
  std::vector<double> prev_ms;          // the compared row's windows paired with window_ms; empty: apart
  std::vector<int> prev_process;        // the process each of prev_ms ran in, where several; else empty
  std::optional<size_t> compared_with;  // the row its vs-prev link is against; none for a base row
  bool under_load = false;              // measured under competing load
};

/// The log terms of row `k`'s link to the row it was compared with (paired when its prev_ms pair
/// with its windows, else the two rows' windows as independent samples), in log samples/s.
/// `loaded` (if given) is set when the link was measured under competing load. Empty for a
/// base row or a row without windows. Throws nothing.
std::vector<stats::LogTerm> link_terms(const std::vector<ChainRow>& rows, size_t k, bool* loaded = nullptr);

/// The terms of vs base for row `k`: every link from its base to it; `loaded` as for
/// link_terms (any link). Throws nothing.
std::vector<stats::LogTerm> base_terms(const std::vector<ChainRow>& rows, size_t k, bool* loaded = nullptr);

/// Row `k`'s vs base at `level` (`n`: the count recorded): sum_interval of base_terms, widened
/// where it is narrower on the log scale than any of its links measured paired (each at its own
/// level and degrees of freedom). A sum of terms with one or two degrees of freedom each gets more
/// Welch-Satterthwaite degrees of freedom than any of them, so a chain could be called faster or
/// slower on the strength of a link that is itself undecided; the chain's spread includes each
/// link's, so it is never narrower. Links measured apart share windows with their neighbours (the
/// spread cancels along the chain) and are not compared. Throws nothing.
stats::Interval base_interval(const std::vector<ChainRow>& rows, size_t k, double level, int64_t n = 0);

/// The terms of row `k`'s samples/s: its base row's own rate and base_terms. Throws nothing.
std::vector<stats::LogTerm> rate_terms(const std::vector<ChainRow>& rows, size_t k, bool* loaded = nullptr);

/// An interval reaching beyond this factor of its point on either side bounds nothing a reader
/// can use (two processes a side, one degree of freedom: t = 63.7 at 99%): printed " [unbounded]".
inline constexpr double kUnboundedFactor = 10;

/// The text of an interval around `point` as every output prints it: " ±1.8%" where the
/// interval is symmetric about the point within a tenth of its width (the larger side is
/// printed, so the text never claims less than the interval), else " [0.500, 2.00]" (three
/// significant digits); " [unbounded]" past kUnboundedFactor either way (the results keep its
/// numbers). "" without an interval (lo or hi not positive, hi < lo). Throws nothing.
std::string interval_text(double point, double lo, double hi);
inline std::string interval_text(const stats::Interval& i) {
  if (!i.valid()) return std::string();
  return i.text.empty() ? interval_text(i.point, i.lo, i.hi) : i.text;
}

}  // namespace ptune::report
