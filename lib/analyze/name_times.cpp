#include "analyze/name_times.hpp"

#include <algorithm>

namespace ptune::analyze {

NameTime& NameTimes::at(std::string_view name) {
  const Place place{name.data(), name.size()};
  if (auto it = by_place_.find(place); it != by_place_.end()) return *it->second;
  auto it = by_name_.find(name);
  if (it == by_name_.end()) {
    it = by_name_.emplace(std::string(name), NameTime{}).first;
    it->second.name = it->first;
  }
  by_place_.emplace(place, &it->second);
  return it->second;
}

void add_time(NameTimes& m, std::string_view name, double total_us, double self_us) {
  NameTime& n = m.at(name);
  ++n.count;
  n.total_us += total_us;
  n.self_us += self_us;
}

std::vector<NameTime> top_times(const NameTimes& m, bool by_self, size_t n) {
  std::vector<NameTime> v;
  for (const auto& [k, t] : m.all()) v.push_back(t);
  std::stable_sort(v.begin(), v.end(), [&](const NameTime& a, const NameTime& b) {
    return by_self ? a.self_us > b.self_us : a.total_us > b.total_us;
  });
  if (v.size() > n) v.resize(n);
  return v;
}

}  // namespace ptune::analyze
