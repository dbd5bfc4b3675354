#pragma once
/// The lists of a breakdown by name (kernels, operators, stalls, ...): times summed per name, and
/// the largest.

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "analyze/breakdown.hpp"

namespace ptune::analyze {

using NameTimes = std::map<std::string, NameTime, std::less<>>;

/// Adds one call of `name` (`total_us`, of which `self_us` its own) to `m`.
void add_time(NameTimes& m, std::string_view name, double total_us, double self_us);

/// The `n` largest of `m` by self time (`by_self`) or total time.
std::vector<NameTime> top_times(const NameTimes& m, bool by_self, size_t n);

}  // namespace ptune::analyze
