#include "analyze/name_times.hpp"

#include <algorithm>

namespace ptune::analyze {

void add_time(NameTimes& m, std::string_view name, double total_us, double self_us) {
  auto it = m.find(name);
  if (it == m.end()) it = m.emplace(std::string(name), NameTime{}).first;
  auto& n = it->second;
  n.name = name;
  ++n.count;
  n.total_us += total_us;
  n.self_us += self_us;
}

std::vector<NameTime> top_times(const NameTimes& m, bool by_self, size_t n) {
  std::vector<NameTime> v;
  for (const auto& [k, t] : m) v.push_back(t);
  std::stable_sort(v.begin(), v.end(), [&](const NameTime& a, const NameTime& b) {
    return by_self ? a.self_us > b.self_us : a.total_us > b.total_us;
  });
  if (v.size() > n) v.resize(n);
  return v;
}

}  // namespace ptune::analyze
