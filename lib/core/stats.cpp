#include "core/stats.hpp"

#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <random>
#include <stdexcept>

#include <boost/math/distributions/chi_squared.hpp>
#include <boost/math/distributions/students_t.hpp>

namespace ptune::stats {
namespace {

struct Moments {
  double mean = 0, var = 0;  // sample variance (n - 1)
  int64_t n = 0;
};

Moments moments(const std::vector<double>& x) {
  Moments m;
  m.n = static_cast<int64_t>(x.size());
  if (m.n == 0) return m;
  m.mean = std::accumulate(x.begin(), x.end(), 0.0) / static_cast<double>(m.n);
  if (m.n < 2) return m;
  double ss = 0;
  for (double v : x) ss += (v - m.mean) * (v - m.mean);
  m.var = ss / static_cast<double>(m.n - 1);
  return m;
}

std::vector<double> logs_of_positive(const std::vector<double>& values) {
  std::vector<double> out;
  out.reserve(values.size());
  for (double v : values)
    if (v > 0 && std::isfinite(v)) out.push_back(std::log(v));
  return out;
}

/// exp(mean +- t * se) as an Interval.
Interval from_log(double mean, double se, double df, int64_t n, double level) {
  Interval r;
  r.point = std::exp(mean);
  r.n = n;
  if (df <= 0 || !std::isfinite(se)) {
    r.lo = r.hi = r.point;
    return r;
  }
  const double h = t_quantile(0.5 + level / 2, df) * se;
  r.lo = std::exp(mean - h);
  r.hi = std::exp(mean + h);
  r.level = level;
  return r;
}

double quantile_sorted(const std::vector<double>& s, double q) {
  // Linear interpolation between order statistics (type 7, as numpy's default).
  const double pos = q * static_cast<double>(s.size() - 1);
  const size_t i = static_cast<size_t>(std::floor(pos));
  const double f = pos - static_cast<double>(i);
  return i + 1 < s.size() ? s[i] + f * (s[i + 1] - s[i]) : s[i];
}

}  // namespace

double t_quantile(double p, double df) {
  if (!(p > 0 && p < 1)) throw std::domain_error("t_quantile: p must be in (0, 1)");
  if (!(df > 0)) throw std::domain_error("t_quantile: df must be positive");
  return boost::math::quantile(boost::math::students_t_distribution<double>(df), p);
}

double chi2_quantile(double p, double df) {
  if (!(p > 0 && p < 1)) throw std::domain_error("chi2_quantile: p must be in (0, 1)");
  if (!(df > 0)) throw std::domain_error("chi2_quantile: df must be positive");
  return boost::math::quantile(boost::math::chi_squared_distribution<double>(df), p);
}

double Interval::half_width_pct() const {
  if (!valid()) return 0;
  return 100.0 * (std::sqrt(hi / lo) - 1.0);
}

Interval log_mean_interval(const std::vector<double>& values, double level) {
  const std::vector<double> l = logs_of_positive(values);
  const Moments m = moments(l);
  if (m.n == 0) return {};
  if (m.n < 2) return from_log(m.mean, 0, 0, m.n, level);
  return from_log(m.mean, std::sqrt(m.var / static_cast<double>(m.n)), static_cast<double>(m.n - 1), m.n,
                  level);
}

std::vector<LogTerm> paired_terms(const std::vector<double>& a_ms, const std::vector<double>& b_ms) {
  if (a_ms.size() != b_ms.size()) throw std::invalid_argument("paired_terms: the two sides differ in length");
  std::vector<double> d;
  for (size_t i = 0; i < a_ms.size(); ++i)
    if (a_ms[i] > 0 && b_ms[i] > 0) d.push_back(std::log(a_ms[i]) - std::log(b_ms[i]));
  const Moments m = moments(d);
  if (m.n == 0) return {};
  const double n = static_cast<double>(m.n);
  return {LogTerm{m.mean, m.n > 1 ? m.var / n : 0.0, n - 1}};
}

std::vector<LogTerm> welch_terms(const std::vector<double>& a_ms, const std::vector<double>& b_ms) {
  const Moments a = moments(logs_of_positive(a_ms)), b = moments(logs_of_positive(b_ms));
  if (a.n == 0 || b.n == 0) return {};
  if (a.n + b.n < 3) return {LogTerm{a.mean, 0, 0}, LogTerm{-b.mean, 0, 0}};
  // A side with one window has no spread of its own: it borrows the other side's, with the
  // degrees of freedom it came with.
  const double va = a.n > 1 ? a.var : b.var, vb = b.n > 1 ? b.var : a.var;
  const double dfa = static_cast<double>(a.n > 1 ? a.n - 1 : b.n - 1);
  const double dfb = static_cast<double>(b.n > 1 ? b.n - 1 : a.n - 1);
  return {LogTerm{a.mean, va / static_cast<double>(a.n), dfa},
          LogTerm{-b.mean, vb / static_cast<double>(b.n), dfb}};
}

LogTerm rate_term(const std::vector<double>& window_ms, double per_window, const std::vector<int>& process) {
  if (per_window <= 0) return {};
  if (!process.empty()) {
    if (process.size() != window_ms.size() || logs_of_positive(window_ms).empty()) return {};
    const LogTerm t = process_term(window_ms, process);
    return LogTerm{std::log(per_window) - t.mean, t.var, t.df};
  }
  const Moments m = moments(logs_of_positive(window_ms));
  if (m.n == 0) return {};
  const double n = static_cast<double>(m.n);
  return LogTerm{std::log(per_window) - m.mean, m.n > 1 ? m.var / n : 0.0, n - 1};
}

LogTerm process_term(const std::vector<double>& ms, const std::vector<int>& process) {
  if (ms.size() != process.size())
    throw std::invalid_argument("process_term: the windows and their processes differ in length");
  std::map<int, std::vector<double>> by_process;
  for (size_t i = 0; i < ms.size(); ++i)
    if (ms[i] > 0 && std::isfinite(ms[i])) by_process[process[i]].push_back(std::log(ms[i]));
  std::vector<double> means;
  for (const auto& [p, logs] : by_process) means.push_back(moments(logs).mean);
  const Moments m = moments(means);
  if (m.n == 0) return {};
  const double k = static_cast<double>(m.n);
  return LogTerm{m.mean, m.n > 1 ? m.var / k : 0.0, k - 1};
}

namespace {

/// The mean of each group's values.
std::vector<double> group_means(const std::map<int, std::vector<double>>& groups) {
  std::vector<double> means;
  for (const auto& [id, values] : groups) means.push_back(moments(values).mean);
  return means;
}

/// speedup_terms for pairs in several processes on both sides.
std::vector<LogTerm> paired_process_terms(const std::vector<double>& a_ms, const std::vector<int>& a_process,
                                          const std::vector<double>& b_ms,
                                          const std::vector<int>& b_process) {
  if (a_ms.size() != b_ms.size())
    throw std::invalid_argument("speedup_terms: the two sides differ in length");
  std::vector<double> d;
  std::map<int, std::vector<double>> by_a, by_b;
  for (size_t i = 0; i < a_ms.size(); ++i) {
    if (!(a_ms[i] > 0 && b_ms[i] > 0 && std::isfinite(a_ms[i]) && std::isfinite(b_ms[i]))) continue;
    const double r = std::log(a_ms[i]) - std::log(b_ms[i]);
    d.push_back(r);
    by_a[a_process[i]].push_back(r);
    by_b[b_process[i]].push_back(r);
  }
  if (d.empty()) return {};
  const Moments ra = moments(group_means(by_a)), rb = moments(group_means(by_b));
  auto spread = [](const Moments& m) {
    const double k = static_cast<double>(m.n);
    return LogTerm{0, m.n > 1 ? m.var / k : 0.0, k - 1};
  };
  LogTerm a = spread(ra);
  a.mean = moments(d).mean;
  return {a, spread(rb)};
}

/// A side of one process beside one of several: one more draw of a process, with the other
/// side's spread of a process mean (k times its term's variance) and degrees of freedom.
LogTerm one_process_term(const std::vector<double>& ms, const LogTerm& several) {
  const Moments m = moments(logs_of_positive(ms));
  return LogTerm{m.mean, several.var * (several.df + 1), several.df};
}

}  // namespace

std::vector<LogTerm> speedup_terms(const std::vector<double>& a_ms, const std::vector<int>& a_process,
                                   const std::vector<double>& b_ms, const std::vector<int>& b_process,
                                   bool paired) {
  if ((!a_process.empty() && a_process.size() != a_ms.size()) ||
      (!b_process.empty() && b_process.size() != b_ms.size()))
    throw std::invalid_argument("speedup_terms: a side's windows and their processes differ in length");
  if (a_process.empty() && b_process.empty())
    return paired ? paired_terms(a_ms, b_ms) : welch_terms(a_ms, b_ms);
  if (logs_of_positive(a_ms).empty() || logs_of_positive(b_ms).empty()) return {};
  if (paired && !a_process.empty() && !b_process.empty())
    return paired_process_terms(a_ms, a_process, b_ms, b_process);
  const LogTerm a = a_process.empty() ? LogTerm{} : process_term(a_ms, a_process);
  const LogTerm b = b_process.empty() ? LogTerm{} : process_term(b_ms, b_process);
  const LogTerm ta = a_process.empty() ? one_process_term(a_ms, b) : a;
  const LogTerm tb = b_process.empty() ? one_process_term(b_ms, a) : b;
  return {ta, LogTerm{-tb.mean, tb.var, tb.df}};
}

Interval speedup_interval(const std::vector<double>& a_ms, const std::vector<int>& a_process,
                          const std::vector<double>& b_ms, const std::vector<int>& b_process, bool paired,
                          double level) {
  const std::vector<LogTerm> t = speedup_terms(a_ms, a_process, b_ms, b_process, paired);
  if (t.empty()) return {};
  const bool by_pairs = paired && a_process.empty() && b_process.empty();
  const int64_t n = by_pairs
                        ? static_cast<int64_t>(t.front().df + 1)
                        : static_cast<int64_t>(logs_of_positive(a_ms).size() + logs_of_positive(b_ms).size());
  return sum_interval(t, level, n);
}

Interval mean_interval(const std::vector<double>& ms, const std::vector<int>& process, double level) {
  if (process.empty()) return log_mean_interval(ms, level);
  const LogTerm t = process_term(ms, process);
  const auto n = static_cast<int64_t>(logs_of_positive(ms).size());
  if (n == 0) return {};
  return sum_interval({t}, level, n);
}

Interval sum_interval(const std::vector<LogTerm>& terms, double level, int64_t n) {
  if (terms.empty()) return {};
  double mean = 0, var = 0, denom = 0;
  bool spread = true;
  for (const LogTerm& t : terms) {
    mean += t.mean;
    var += t.var;
    if (t.df <= 0)
      spread = false;
    else
      denom += t.var * t.var / t.df;
  }
  if (!spread) return from_log(mean, 0, 0, n, level);
  // Welch-Satterthwaite; with no spread at all, the smallest df (the interval has zero width).
  double df = denom > 0 ? var * var / denom : terms.front().df;
  if (denom <= 0)
    for (const LogTerm& t : terms) df = std::min(df, t.df);
  return from_log(mean, std::sqrt(var), df, n, level);
}

Interval paired_speedup(const std::vector<double>& a_ms, const std::vector<double>& b_ms, double level) {
  const std::vector<LogTerm> t = paired_terms(a_ms, b_ms);
  if (t.empty()) return {};
  return sum_interval(t, level, static_cast<int64_t>(t.front().df + 1));
}

Interval welch_speedup(const std::vector<double>& a_ms, const std::vector<double>& b_ms, double level) {
  const std::vector<LogTerm> t = welch_terms(a_ms, b_ms);
  if (t.empty()) return {};
  const int64_t n = static_cast<int64_t>(logs_of_positive(a_ms).size() + logs_of_positive(b_ms).size());
  return sum_interval(t, level, n);
}

Interval bootstrap_mean(const std::vector<double>& values, double level, int resamples, uint64_t seed) {
  Interval r;
  const Moments m = moments(values);
  if (m.n == 0) return r;
  r.point = m.mean;
  r.lo = r.hi = m.mean;
  r.n = m.n;
  if (m.n < 2 || resamples < 2) return r;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, values.size() - 1);
  std::vector<double> means(static_cast<size_t>(resamples));
  for (int k = 0; k < resamples; ++k) {
    double t = 0;
    for (size_t i = 0; i < values.size(); ++i) t += values[pick(rng)];
    means[static_cast<size_t>(k)] = t / static_cast<double>(values.size());
  }
  std::sort(means.begin(), means.end());
  r.lo = quantile_sorted(means, (1 - level) / 2);
  r.hi = quantile_sorted(means, (1 + level) / 2);
  r.level = level;
  return r;
}

Verdict verdict_of(const Interval& s, const NoiseRule& rule) {
  if (!s.valid()) return Verdict::kUndecided;
  const double up = 1.0 + rule.floor_pct / 100.0, down = 1.0 / up;
  if (s.lo > up) return Verdict::kFaster;
  if (s.hi < down) return Verdict::kSlower;
  const double margin = 1.0 + rule.target_pct / 100.0;
  if (s.lo >= 1.0 / margin && s.hi <= margin) return Verdict::kWithinNoise;
  return Verdict::kUndecided;
}

int64_t pairs_to_decide(double mean_log, double sd_log, double level, const NoiseRule& rule) {
  if (!(sd_log >= 0) || !std::isfinite(mean_log) || !std::isfinite(sd_log) || !(level > 0 && level < 1))
    return 0;
  const double m = std::fabs(mean_log);
  // The room the half-width has: inside +-target around 1 (within noise), beyond +-floor.
  const double room =
      std::max(std::log1p(rule.target_pct / 100.0) - m, m - std::log1p(rule.floor_pct / 100.0));
  if (!(room > 0)) return 0;
  if (sd_log == 0) return 2;
  constexpr int64_t kMax = 100000;
  // The half-width falls with n: double up to a bound, then bisect.
  auto fits = [&](int64_t n) {
    return t_quantile(0.5 + level / 2, static_cast<double>(n - 1)) * sd_log /
               std::sqrt(static_cast<double>(n)) <=
           room;
  };
  int64_t hi = 2;
  while (!fits(hi)) {
    if (hi >= kMax) return 0;
    hi = std::min(kMax, hi * 2);
  }
  int64_t lo = hi / 2;  // does not fit (or is 1)
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? hi : lo) = mid;
  }
  return std::max<int64_t>(2, hi);
}

std::string level_text(double level) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%g%%", std::round(1000.0 * level) / 10.0);
  return buf;
}

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kFaster:
      return "faster";
    case Verdict::kSlower:
      return "slower";
    case Verdict::kWithinNoise:
      return "within noise";
    case Verdict::kUndecided:
      break;
  }
  return "undecided";
}

std::vector<size_t> outliers(const std::vector<double>& values) {
  std::vector<size_t> out;
  if (values.size() < 5) return out;
  const double med = median(values);
  std::vector<double> dev;
  for (double v : values) dev.push_back(std::fabs(v - med));
  const double mad = 1.4826 * median(dev);
  for (size_t i = 0; i < values.size(); ++i) {
    const double d = std::fabs(values[i] - med);
    if (d > 0.05 * std::fabs(med) && (mad <= 0 || d / mad > 3.5)) out.push_back(i);
  }
  return out;
}

int64_t transient_end(const std::vector<double>& values, double level) {
  const size_t n = values.size(), half = n / 2;
  if (n < 5) return 0;
  for (double v : values)
    if (!(v > 0) || !std::isfinite(v)) return 0;
  std::vector<double> warm;
  for (size_t i = half; i < n; ++i) warm.push_back(std::log(values[i]));
  const Moments r = moments(warm);
  const double m = static_cast<double>(r.n);
  const double bound = r.mean + t_quantile(level, m - 1) * std::sqrt(r.var) * std::sqrt(1 + 1 / m);
  int64_t k = 0;
  while (static_cast<size_t>(k) < half && std::log(values[static_cast<size_t>(k)]) > bound) ++k;
  return k;
}

int64_t transient_pairs(const std::vector<double>& a_ms, const std::vector<double>& b_ms, double level) {
  return std::max(transient_end(a_ms, level), transient_end(b_ms, level));
}

}  // namespace ptune::stats
