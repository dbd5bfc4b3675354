#pragma once
/// The lists of a breakdown by name (kernels, operators, stalls, ...): times summed per name, and
/// the largest.

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "analyze/breakdown.hpp"

namespace ptune::analyze {

/// Times summed per name. A name is found by its text once per place its characters are kept in
/// (an event's name is interned in its trace's pool, so every event of that name has the same
/// place), then by that place: the texts given must stay where they are, unchanged, as long as
/// the NameTimes lives (a trace's pool, a literal).
class NameTimes {
 public:
  /// The sums of `name`, new (zero) if it is not there yet.
  NameTime& at(std::string_view name);
  const std::map<std::string, NameTime, std::less<>>& all() const { return by_name_; }
  bool empty() const { return by_name_.empty(); }

 private:
  struct Place {
    const char* data;
    size_t size;
    bool operator==(const Place& o) const { return data == o.data && size == o.size; }
  };
  struct PlaceHash {
    size_t operator()(const Place& p) const { return std::hash<const void*>{}(p.data) ^ (p.size * 31); }
  };
  std::map<std::string, NameTime, std::less<>> by_name_;
  std::unordered_map<Place, NameTime*, PlaceHash> by_place_;  // map nodes do not move
};

/// Adds one call of `name` (`total_us`, of which `self_us` its own) to `m`.
void add_time(NameTimes& m, std::string_view name, double total_us, double self_us);

/// The `n` largest of `m` by self time (`by_self`) or total time.
std::vector<NameTime> top_times(const NameTimes& m, bool by_self, size_t n);

}  // namespace ptune::analyze
