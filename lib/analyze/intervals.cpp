#include "analyze/intervals.hpp"

#include <algorithm>
#include <functional>

namespace ptune::analyze {

Ranges merge(Ranges r) {
  sort_runs(r.begin(), r.end(), std::less<>());
  Ranges out;
  for (const auto& [s, e] : r) {
    if (e <= s) continue;
    if (!out.empty() && s <= out.back().second)
      out.back().second = std::max(out.back().second, e);
    else
      out.emplace_back(s, e);
  }
  return out;
}

Ranges clip(const Ranges& r, double s, double e) {
  Ranges out;
  auto it = std::upper_bound(r.begin(), r.end(), s, [](double v, const auto& x) { return v < x.second; });
  for (; it != r.end() && it->first < e; ++it)
    out.emplace_back(std::max(it->first, s), std::min(it->second, e));
  return out;
}

Ranges intersect(const Ranges& a, const Ranges& b) {
  Ranges out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double s = std::max(a[i].first, b[j].first), e = std::min(a[i].second, b[j].second);
    if (s < e) out.emplace_back(s, e);
    (a[i].second < b[j].second) ? ++i : ++j;
  }
  return out;
}

Ranges subtract(const Ranges& a, const Ranges& b) {
  Ranges out;
  if (a.empty()) return out;
  // The first of `b` that ends after `a` starts (a short `a` against a long `b`: a sync's wait
  // against a trace's device work).
  size_t j = static_cast<size_t>(std::upper_bound(b.begin(), b.end(), a.front().first,
                                                  [](double v, const auto& x) { return v < x.second; }) -
                                 b.begin());
  for (auto [s, e] : a) {
    while (j < b.size() && b[j].second <= s) ++j;
    size_t k = j;
    while (k < b.size() && b[k].first < e) {
      if (b[k].first > s) out.emplace_back(s, b[k].first);
      s = std::max(s, b[k].second);
      ++k;
    }
    if (s < e) out.emplace_back(s, e);
  }
  return out;
}

double total(const Ranges& r) {
  double t = 0;
  for (const auto& [s, e] : r) t += e - s;
  return t;
}

}  // namespace ptune::analyze
