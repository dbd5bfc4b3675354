#pragma once
/// Time ranges of a trace as sorted, disjoint [start, end) pairs (microseconds), and their algebra:
/// the step split gives each instant to one category by merging, clipping, intersecting and
/// subtracting them.

#include <utility>
#include <vector>

namespace ptune::analyze {

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
