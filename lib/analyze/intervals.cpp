#include "analyze/intervals.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace ptune::analyze {

namespace {

/// A double's bits as an unsigned integer in the same order (finite values; -0 is 0).
uint64_t order_key(double v) {
  if (v == 0) v = 0;
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof b);
  return b >> 63 ? ~b : b | (uint64_t{1} << 63);
}

/// `r` in order of their starts (ties in any order): a byte of the starts at a time, from the
/// lowest, leaving out the bytes all of them share (a trace's times are close together).
void sort_by_start(Ranges& r) {
  if (std::is_sorted(r.begin(), r.end(), [](const auto& a, const auto& b) { return a.first < b.first; }))
    return;
  if (r.size() < 256) return std::sort(r.begin(), r.end());
  std::vector<uint64_t> keys(r.size());
  uint64_t same = ~uint64_t{0};
  for (size_t i = 0; i < r.size(); ++i) keys[i] = order_key(r[i].first);
  for (size_t i = 1; i < keys.size(); ++i) same &= ~(keys[i] ^ keys[0]);
  Ranges tmp(r.size());
  std::vector<uint64_t> tmp_keys(r.size());
  for (int shift = 0; shift < 64; shift += 8) {
    if (((same >> shift) & 0xff) == 0xff) continue;  // the same byte in every start
    size_t count[257] = {};
    for (uint64_t k : keys) ++count[((k >> shift) & 0xff) + 1];
    for (int b = 0; b < 256; ++b) count[b + 1] += count[b];
    for (size_t i = 0; i < r.size(); ++i) {
      const size_t at = count[(keys[i] >> shift) & 0xff]++;
      tmp[at] = r[i], tmp_keys[at] = keys[i];
    }
    r.swap(tmp), keys.swap(tmp_keys);
  }
}

}  // namespace

Ranges merge(Ranges r) {
  sort_by_start(r);
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
