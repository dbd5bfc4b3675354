#include "report/figures.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ptune::report {
namespace {

std::vector<double> scaled(const std::vector<double>& ms, double factor) {
  std::vector<double> out(ms);
  for (double& v : out) v *= factor;
  return out;
}

/// A positive number with three significant digits: 16.4, 0.0600, 1234; below 0.001 or from
/// 100,000 on with an exponent (1.2e-70, 8.8e+62: an interval that says nothing, as it is).
std::string significant3(double v) {
  if (v > 0 && (v < 1e-3 || v >= 1e5)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2g", v);
    return buf;
  }
  const int magnitude = v > 0 ? static_cast<int>(std::floor(std::log10(v))) : 0;
  const int decimals = std::clamp(2 - magnitude, 0, 8);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace

namespace {

/// A log term and whose windows it averages: a row's own windows (`source`, with the sign they
/// enter the sum with) or a link's paired ratios (no source). Terms over the same windows with
/// opposite signs cancel: consecutive links measured apart share the middle row's windows.
struct Term {
  stats::LogTerm t;
  std::optional<size_t> source;
  int sign = 0;
};

std::vector<Term> link_of(const std::vector<ChainRow>& rows, size_t k, bool* loaded) {
  if (k >= rows.size() || !rows[k].compared_with || *rows[k].compared_with >= rows.size()) return {};
  const size_t b = *rows[k].compared_with;
  const ChainRow& r = rows[k];
  const ChainRow& before = rows[b];
  if (r.window_ms.empty() || before.samples_per_step <= 0 || r.samples_per_step <= 0) return {};
  // Both sides in ms per r.samples_per_step samples: the ratio is one of samples/s.
  const double factor = r.samples_per_step / before.samples_per_step;
  const bool paired = r.prev_ms.size() == r.window_ms.size();
  if (loaded) *loaded = r.under_load || (!paired && before.under_load);
  if (paired) {
    // One paired term; or, where the two sides ran in processes of their own (started for this
    // link alone), one term per side over its processes.
    const auto t =
        stats::speedup_terms(scaled(r.prev_ms, factor), r.prev_process, r.window_ms, r.window_process, true);
    std::vector<Term> terms;
    for (const auto& one : t) terms.push_back(Term{one, std::nullopt, 0});
    return terms;
  }
  if (before.window_ms.empty()) return {};
  const auto t = stats::speedup_terms(scaled(before.window_ms, factor), before.window_process, r.window_ms,
                                      r.window_process, false);
  if (t.size() != 2) return {};
  return {Term{t[0], b, +1}, Term{t[1], k, -1}};
}

/// The links from row k back to its base (the base's index in `base`); empty when one cannot be
/// formed.
std::vector<Term> chain_of(const std::vector<ChainRow>& rows, size_t k, bool* loaded, size_t* base) {
  std::vector<Term> terms;
  bool any = false;
  size_t i = k;
  for (size_t hops = 0; i < rows.size() && rows[i].compared_with && hops <= rows.size(); ++hops) {
    bool l = false;
    const auto t = link_of(rows, i, &l);
    if (t.empty()) return {};
    any = any || l;
    terms.insert(terms.end(), t.begin(), t.end());
    i = *rows[i].compared_with;
  }
  if (loaded) *loaded = any;
  if (base) *base = i;
  return terms;
}

/// The terms summed, those over the same windows combined: their means add; their spread counts
/// once per net appearance (none where they cancel).
std::vector<stats::LogTerm> combined(const std::vector<Term>& terms) {
  std::vector<stats::LogTerm> out;
  std::vector<bool> used(terms.size(), false);
  for (size_t i = 0; i < terms.size(); ++i) {
    if (used[i]) continue;
    if (!terms[i].source) {
      out.push_back(terms[i].t);
      continue;
    }
    stats::LogTerm sum{0, terms[i].t.var, terms[i].t.df};
    int net = 0;
    for (size_t j = i; j < terms.size(); ++j)
      if (!used[j] && terms[j].source == terms[i].source) {
        used[j] = true;
        sum.mean += terms[j].t.mean;
        net += terms[j].sign;
      }
    if (net == 0)
      sum.var = 0, sum.df = std::max(sum.df, 1.0);  // cancelled: a constant (scale factors)
    else
      sum.var *= static_cast<double>(net * net);
    out.push_back(sum);
  }
  return out;
}

}  // namespace

std::vector<stats::LogTerm> link_terms(const std::vector<ChainRow>& rows, size_t k, bool* loaded) {
  return combined(link_of(rows, k, loaded));
}

std::vector<stats::LogTerm> base_terms(const std::vector<ChainRow>& rows, size_t k, bool* loaded) {
  return combined(chain_of(rows, k, loaded, nullptr));
}

stats::Interval base_interval(const std::vector<ChainRow>& rows, size_t k, double level, int64_t n) {
  stats::Interval chain = stats::sum_interval(base_terms(rows, k), level, n);
  if (!chain.valid()) return chain;
  // The widest paired link's half-width on the log scale, each at its own degrees of freedom.
  double widest = 0;
  for (size_t i = k, hops = 0; i < rows.size() && rows[i].compared_with && hops <= rows.size(); ++hops) {
    if (!rows[i].window_ms.empty() && rows[i].prev_ms.size() == rows[i].window_ms.size()) {
      const stats::Interval link = stats::sum_interval(link_terms(rows, i), level);
      if (link.valid()) widest = std::max(widest, 0.5 * std::log(link.hi / link.lo));
    }
    i = *rows[i].compared_with;
  }
  if (0.5 * std::log(chain.hi / chain.lo) < widest) {
    chain.lo = chain.point * std::exp(-widest);
    chain.hi = chain.point * std::exp(widest);
  }
  return chain;
}

std::vector<stats::LogTerm> rate_terms(const std::vector<ChainRow>& rows, size_t k, bool* loaded) {
  if (k >= rows.size() || rows[k].window_ms.empty()) return {};
  size_t base = k;
  std::vector<Term> terms;
  if (rows[k].compared_with) {
    terms = chain_of(rows, k, loaded, &base);
    if (terms.empty()) return {};
  } else if (loaded) {
    *loaded = rows[k].under_load;
  }
  const ChainRow& b = rows[base];
  terms.insert(terms.begin(),
               Term{stats::rate_term(b.window_ms, 1000.0 * b.samples_per_step, b.window_process), base, -1});
  return combined(terms);
}

std::string interval_text(double point, double lo, double hi) {
  if (!(lo > 0) || !(hi >= lo) || !(point > 0)) return "";
  if (!std::isfinite(hi) || hi > kUnboundedFactor * point || lo * kUnboundedFactor < point)
    return " [unbounded]";
  const double up = hi / point - 1.0, down = 1.0 - lo / point;
  if (up >= 0 && down >= 0 && std::abs(up - down) <= 0.1 * (up + down)) {
    const double pct = 100.0 * std::max(up, down);
    char buf[32];
    std::snprintf(buf, sizeof buf, " ±%.*f%%", pct < 9.95 ? 1 : 0, pct);
    return buf;
  }
  return " [" + significant3(lo) + ", " + significant3(hi) + "]";
}

}  // namespace ptune::report
