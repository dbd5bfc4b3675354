#pragma once
/// Time ranges of a trace as sorted, disjoint [start, end) pairs (microseconds), and their algebra:
/// the step split gives each instant to one category by merging, clipping, intersecting and
/// subtracting them.

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace ptune::analyze {

/// Sorts [first, last) by `less` (a strict total order: the result is std::sort's). A trace's
/// events come in runs already in time order (Kineto writes each thread's and each stream's
/// events in the order they ran), so a few sorted runs are merged one with the next, in about
/// n log(runs) steps; many runs are sorted outright.
template <typename It, typename Less>
void sort_runs(It first, It last, Less less) {
  std::vector<It> runs{first};
  for (It i = first; i != last && std::next(i) != last; ++i)
    if (less(*std::next(i), *i)) {
      runs.push_back(std::next(i));
      if (runs.size() > 64) return std::sort(first, last, less);
    }
  runs.push_back(last);
  while (runs.size() > 2) {
    std::vector<It> merged{first};
    for (size_t k = 0; k + 1 < runs.size(); k += 2) {
      const It end = k + 2 < runs.size() ? runs[k + 2] : runs[k + 1];
      if (k + 2 < runs.size()) std::inplace_merge(runs[k], runs[k + 1], end, less);
      merged.push_back(end);
    }
    runs = std::move(merged);
  }
}

using Ranges = std::vector<std::pair<double, double>>;  // sorted, disjoint after merge()

/// `r` sorted and merged: empty ranges dropped, overlapping and touching ones joined.
Ranges merge(Ranges r);

/// The part of merged ranges `r` inside [s, e).
Ranges clip(const Ranges& r, double s, double e);

/// Where merged `a` and `b` both are.
Ranges intersect(const Ranges& a, const Ranges& b);

/// Merged `a` less merged `b`.
Ranges subtract(const Ranges& a, const Ranges& b);

/// The length of merged ranges `r`.
double total(const Ranges& r);

}  // namespace ptune::analyze
