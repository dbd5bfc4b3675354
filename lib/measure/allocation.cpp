#include "measure/allocation.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "core/numbers.hpp"

namespace ptune::measure {
namespace {

/// The pairs' log-ratios (ln a - ln b) and the index of each one's process on either side (0, 1,
/// ... in order of first appearance); pairs with a non-positive time left out.
struct Ratios {
  std::vector<double> d;
  std::vector<size_t> a, b;
  size_t ka = 0, kb = 0;
};

Ratios ratios(const std::vector<double>& a_ms, const std::vector<int>& a_process,
              const std::vector<double>& b_ms, const std::vector<int>& b_process) {
  Ratios r;
  std::map<int, size_t> ia, ib;
  for (size_t i = 0; i < a_ms.size() && i < b_ms.size(); ++i) {
    if (!(a_ms[i] > 0 && b_ms[i] > 0 && std::isfinite(a_ms[i]) && std::isfinite(b_ms[i]))) continue;
    r.d.push_back(std::log(a_ms[i]) - std::log(b_ms[i]));
    r.a.push_back(ia.emplace(a_process[i], ia.size()).first->second);
    r.b.push_back(ib.emplace(b_process[i], ib.size()).first->second);
  }
  r.ka = ia.size();
  r.kb = ib.size();
  return r;
}

/// The residual sum of squares of the additive model d = mu + alpha[a] + beta[b] (fitted by
/// alternating means: a few sweeps converge for the balanced turns ProcessGroup gives).
double residual_ss(const Ratios& r) {
  double mu = 0;
  for (double v : r.d) mu += v;
  mu /= static_cast<double>(r.d.size());
  std::vector<double> alpha(r.ka, 0), beta(r.kb, 0);
  auto fit = [&](std::vector<double>& effect, const std::vector<size_t>& of, const std::vector<double>& other,
                 const std::vector<size_t>& other_of) {
    std::vector<double> sum(effect.size(), 0), n(effect.size(), 0);
    for (size_t i = 0; i < r.d.size(); ++i) {
      sum[of[i]] += r.d[i] - mu - other[other_of[i]];
      n[of[i]] += 1;
    }
    for (size_t p = 0; p < effect.size(); ++p) effect[p] = n[p] > 0 ? sum[p] / n[p] : 0;
  };
  for (int sweep = 0; sweep < 20; ++sweep) {
    fit(alpha, r.a, beta, r.b);
    fit(beta, r.b, alpha, r.a);
  }
  double ss = 0;
  for (size_t i = 0; i < r.d.size(); ++i) {
    const double e = r.d[i] - mu - alpha[r.a[i]] - beta[r.b[i]];
    ss += e * e;
  }
  return ss;
}

/// The half-width a rule leaves room for around `m` (|log speedup|): within noise or beyond the floor.
bool decided(double m, double half_width, const stats::NoiseRule& rule) {
  return m + half_width <= std::log1p(rule.target_pct / 100.0) ||
         m - half_width >= std::log1p(rule.floor_pct / 100.0);
}

}  // namespace

double Spread::process_sd_pct() const {
  return 100.0 * std::expm1(std::sqrt(process_var * static_cast<double>(processes) / 2.0));
}

double Spread::window_sd_pct() const {
  return 100.0 * std::expm1(std::sqrt(window_var * static_cast<double>(pairs) / 2.0));
}

std::string Spread::text() const {
  return "one process's own speed varied by " + numbers::fixed(process_sd_pct(), 1) + "% and one pair's by " +
         numbers::fixed(window_sd_pct(), 1) + "% (one standard deviation)";
}

std::optional<Spread> spread_of(const std::vector<double>& a_ms, const std::vector<int>& a_process,
                                const std::vector<double>& b_ms, const std::vector<int>& b_process) {
  if (a_ms.size() != b_ms.size() || a_process.size() != a_ms.size() || b_process.size() != b_ms.size())
    return std::nullopt;
  const std::vector<stats::LogTerm> t = stats::speedup_terms(a_ms, a_process, b_ms, b_process, true);
  if (t.size() != 2 || t[0].df < 1 || t[1].df < 1) return std::nullopt;
  const Ratios r = ratios(a_ms, a_process, b_ms, b_process);
  const double n = static_cast<double>(r.d.size());
  const double residual_df = n - static_cast<double>(r.ka + r.kb) + 1;
  if (residual_df < 1) return std::nullopt;
  Spread s;
  s.log_point = t[0].mean + t[1].mean;
  const double var = t[0].var + t[1].var;
  s.df = var > 0 ? var * var / (t[0].var * t[0].var / t[0].df + t[1].var * t[1].var / t[1].df)
                 : std::min(t[0].df, t[1].df);
  // Each side's term averages its processes' mean ratios, and each of those carries the windows'
  // noise over the pairs: sigma^2 / n in either term.
  s.window_var = std::min(var, 2.0 * residual_ss(r) / residual_df / n);
  s.process_var = var - s.window_var;
  s.processes = static_cast<int64_t>(std::min(r.ka, r.kb));
  s.pairs = static_cast<int64_t>(r.d.size());
  return s;
}

Spread optimistic(const Spread& s, double confidence) {
  if (!(s.df > 0)) return s;
  double factor = 1;
  try {
    factor = s.df / stats::chi2_quantile(confidence, s.df);
  } catch (const std::exception&) {
    return s;
  }
  Spread o = s;
  o.process_var *= factor;
  o.window_var *= factor;
  return o;
}

double predicted_half_width(const Spread& s, double processes, double pairs, double level) {
  const double k0 = static_cast<double>(s.processes);
  if (!(k0 >= 2 && processes >= 2 && pairs > 0 && s.pairs > 0 && s.df > 0))
    return std::numeric_limits<double>::infinity();
  const double var = s.process_var * k0 / processes + s.window_var * static_cast<double>(s.pairs) / pairs;
  const double df = s.df * (processes - 1) / (k0 - 1);
  try {
    return stats::t_quantile(0.5 + level / 2, df) * std::sqrt(var);
  } catch (const std::exception&) {
    return std::numeric_limits<double>::infinity();
  }
}

bool more_processes_narrow(const Spread& s, double pair_ms, double start_ms, double level) {
  if (!(pair_ms > 0) || !(start_ms >= 0)) return false;
  const double k = static_cast<double>(s.processes), n = static_cast<double>(s.pairs);
  const double windows_only = predicted_half_width(s, k, n + start_ms / pair_ms, level);
  const double one_more = predicted_half_width(s, k + 1, n, level);
  return one_more < windows_only;
}

std::optional<Need> need_to_decide(const Spread& s, double pair_ms, double start_ms, double level,
                                   const stats::NoiseRule& rule, int64_t max_processes) {
  if (s.processes < 2 || !(pair_ms > 0) || !(start_ms >= 0)) return std::nullopt;
  const double m = std::fabs(s.log_point);
  constexpr double kMaxPairs = 1e6;
  std::optional<Need> best;
  for (int64_t k = s.processes; k <= max_processes; ++k) {
    const double kk = static_cast<double>(k);
    auto fits = [&](double pairs) { return decided(m, predicted_half_width(s, kk, pairs, level), rule); };
    // Two windows a side of every process at least; then the fewest pairs that decide.
    double lo = std::max(static_cast<double>(s.pairs), 2.0 * kk), hi = lo;
    if (!fits(hi)) {
      while (!fits(hi) && hi < kMaxPairs) lo = hi, hi *= 2;
      if (!fits(hi)) continue;
      while (hi - lo > 1) {
        const double mid = std::floor((lo + hi) / 2);
        (fits(mid) ? hi : lo) = mid;
      }
    }
    const double ms =
        (kk - static_cast<double>(s.processes)) * start_ms + (hi - static_cast<double>(s.pairs)) * pair_ms;
    if (!best || ms < best->ms) best = Need{k, static_cast<int64_t>(hi), ms};
    // More processes cost at least their starts: none can be cheaper past this.
    if (best && (kk + 1 - static_cast<double>(s.processes)) * start_ms >= best->ms) break;
  }
  return best;
}

namespace {

/// The change whose interval of half-width `half_width` (log) just clears the floor.
double clearing_pct(double half_width, const stats::NoiseRule& rule) {
  return 100.0 * std::expm1(std::log1p(rule.floor_pct / 100.0) + half_width);
}

}  // namespace

std::optional<double> decidable_change_pct(const Spread& s, int64_t processes, double pair_ms,
                                           double start_ms, double level, const stats::NoiseRule& rule,
                                           int64_t max_processes, double budget_ms) {
  if (!(pair_ms > 0) || !(budget_ms > 0) || processes < 2) return std::nullopt;
  double best = std::numeric_limits<double>::infinity();
  for (int64_t k = processes; k <= std::max(processes, max_processes); ++k) {
    const double pairs = (budget_ms - static_cast<double>(k - processes) * start_ms) / pair_ms;
    if (pairs < 2.0 * static_cast<double>(k)) break;  // two windows a process at least
    best = std::min(best, predicted_half_width(s, static_cast<double>(k), pairs, level));
  }
  if (!std::isfinite(best)) return std::nullopt;
  return clearing_pct(best, rule);
}

std::optional<double> decidable_change_pct(double sd_log, double pair_ms, double level,
                                           const stats::NoiseRule& rule, double budget_ms) {
  if (!(pair_ms > 0) || !(sd_log >= 0)) return std::nullopt;
  const double n = std::floor(budget_ms / pair_ms);
  if (n < 3) return std::nullopt;
  try {
    return clearing_pct(stats::t_quantile(0.5 + level / 2, n - 1) * sd_log / std::sqrt(n), rule);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace ptune::measure
