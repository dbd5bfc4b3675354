#include "report/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>
#include <utility>

#include "core/numbers.hpp"
#include "core/stats.hpp"
#include "core/table.hpp"
#include "report/figures.hpp"
#include "report/status.hpp"

namespace ptune::report {
namespace {

std::string pct(double v, bool sign = false) { return numbers::fmt(sign ? "%+.1f%%" : "%.1f%%", v); }

/// Rows keyed by match_key and occurrence: the k-th row of a name is (key, k).
std::vector<std::pair<std::string, int>> keys_of(const std::vector<Row>& rows) {
  std::map<std::string, int> seen;
  std::vector<std::pair<std::string, int>> keys;
  for (const auto& r : rows) {
    const std::string k = match_key(r.name);
    keys.emplace_back(k, seen[k]++);
  }
  return keys;
}

/// A row's windows (the positive ones) and the processes they ran in (kept only where they give
/// one process per window).
std::pair<std::vector<double>, std::vector<int>> windows(const std::vector<double>& ms,
                                                         const std::vector<int>& process) {
  std::vector<double> w;
  std::vector<int> p;
  const bool whole = process.size() == ms.size();
  for (size_t i = 0; i < ms.size(); ++i) {
    if (!(ms[i] > 0)) continue;
    w.push_back(ms[i]);
    if (whole) p.push_back(process[i]);
  }
  if (!whole) p.clear();
  return {w, p};
}

/// Samples a step of the row processes (all ranks), from samples/s and ms/step.
std::optional<double> samples_per_step(const measure::Measurement& m) {
  if (m.samples_per_s <= 0 || m.ms_per_step <= 0) return std::nullopt;
  return m.samples_per_s * m.ms_per_step / 1000.0;
}

/// What report/figures needs of each row of a results file: its windows and what it was
/// compared with, as the sweep that wrote it had them.
std::vector<ChainRow> chain_rows(const std::vector<Row>& rows) {
  std::vector<ChainRow> out;
  for (const auto& r : rows) {
    ChainRow c;
    if (r.m) {
      c.samples_per_step = samples_per_step(*r.m).value_or(0);
      std::tie(c.window_ms, c.window_process) = windows(r.m->repeat_ms, r.m->repeat_process);
      std::tie(c.prev_ms, c.prev_process) = windows(r.prev_ms, r.prev_process);
      if (r.compared_with && *r.compared_with < rows.size()) c.compared_with = r.compared_with;
      c.under_load = r.m->load.under_load;
    }
    out.push_back(std::move(c));
  }
  return out;
}

/// A side of a comparison: one row of one results file, with the figures of that file's rows.
struct Side {
  const Row* row = nullptr;
  const std::vector<ChainRow>* chain = nullptr;
  size_t index = 0;
};

/// A measured row's samples/s, spread and interval text, as its file prints them.
void read_side(const Row& row, std::optional<double>& sps, std::optional<double>& spread,
               std::string& interval) {
  if (!row.m) return;
  sps = row.m->samples_per_s, spread = row.m->spread_pct;
  interval = interval_text(row.m->samples_per_s_ci);
}

/// The verdict of a row that is not in both runs with numbers in both (missing, failed, new,
/// not measured); false where it is and the numbers decide.
bool verdict_without_numbers(const Row* o, const Row* n, RowCheck& c) {
  if (!n) {
    c.verdict = "missing";
    c.why = "not in the new run";
    c.regression = true;
    return true;
  }
  const std::string status = n->status.text();
  if (n->status.is(RowStatus::State::kFailed)) {
    c.verdict = "failed";
    c.why = status;
    c.regression = true;
    return true;
  }
  if (!o) {
    c.verdict = "new row";
    c.why = "not in the old run";
    return true;
  }
  if (!c.new_sps) {
    c.verdict = c.old_sps ? "not measured" : "not measured in either";
    c.why = status;
    c.regression = c.old_sps.has_value();
    return true;
  }
  if (!c.old_sps || *c.old_sps <= 0) {
    c.verdict = "new row";
    c.why = "the old run has no numbers for it: " + o->status.text();
    return true;
  }
  return false;
}

/// The noise rule a change is judged by: `limit` the floor a change must clear (the default
/// where 0).
stats::NoiseRule rule_of(double limit) {
  stats::NoiseRule rule;
  rule.floor_pct = limit > 0 ? limit : rule.floor_pct;
  rule.target_pct = std::max(rule.target_pct, rule.floor_pct);
  return rule;
}

/// The verdict from both runs' timed windows: each row's samples/s as its file derives it
/// (report/figures: its base row's rate times the links to it), new over old with the 99%
/// interval of that sum (99.9% when either side was measured under competing load), judged as a
/// sweep judges its rows (the limit is the floor a change must clear). False where either side
/// has no windows or the interval is not valid.
bool verdict_of_windows(const Side& old_side, const Side& new_side, double limit, RowCheck& c) {
  bool old_loaded = false, new_loaded = false;
  std::vector<stats::LogTerm> terms = rate_terms(*new_side.chain, new_side.index, &new_loaded);
  const std::vector<stats::LogTerm> old_terms = rate_terms(*old_side.chain, old_side.index, &old_loaded);
  if (terms.empty() || old_terms.empty()) return false;
  for (stats::LogTerm t : old_terms) terms.push_back({-t.mean, t.var, t.df});
  const bool loaded = old_loaded || new_loaded;
  const stats::Interval ci = stats::sum_interval(terms, stats::speedup_level(loaded));
  if (!ci.valid()) return false;
  // The printed rates are the ones the interval is about.
  c.new_sps = stats::sum_interval(rate_terms(*new_side.chain, new_side.index), stats::kRowLevel).point;
  c.old_sps = c.new_sps.value() / ci.point;
  const double change = 100.0 * (ci.point - 1.0);
  c.change_pct = change;
  const stats::NoiseRule rule = rule_of(limit);
  const stats::Verdict v = stats::verdict_of(ci, rule);
  c.interval_pct = std::make_pair(100.0 * (ci.lo - 1.0), 100.0 * (ci.hi - 1.0));
  const std::string range =
      "[" + pct(c.interval_pct->first, true) + ", " + pct(c.interval_pct->second, true) + "]";
  c.verdict = stats::verdict_name(v);
  c.beyond_noise = v == stats::Verdict::kFaster || v == stats::Verdict::kSlower;
  c.regression = v == stats::Verdict::kSlower;
  if (c.beyond_noise)
    c.why = pct(change, true) + " " + range + " beyond " + pct(rule.floor_pct);
  else if (v == stats::Verdict::kWithinNoise)
    c.why = pct(change, true) + " " + range + " within ±" + pct(rule.target_pct);
  else
    c.why = pct(change, true) + " " + range + ": too noisy to tell";
  if (loaded)
    c.why +=
        " (measured under competing load: " + stats::level_text(stats::kSpeedupLevelUnderLoad) + " interval)";
  return true;
}

/// The verdict without windows (a file from another tool): the change against the limit and
/// the spreads.
void verdict_of_spreads(double limit, RowCheck& c) {
  const double change = 100.0 * (*c.new_sps - *c.old_sps) / *c.old_sps;
  c.change_pct = change;
  const double spread = std::max(c.old_spread.value_or(0), c.new_spread.value_or(0));
  const double noise = std::max(limit, spread);
  c.beyond_noise = std::abs(change) > limit && std::abs(change) > spread;
  const std::string bounds = pct(limit) + " and the spreads (" + pct(c.old_spread.value_or(0)) + ", " +
                             pct(c.new_spread.value_or(0)) + ")";
  if (!c.beyond_noise) {
    c.verdict = "within noise";
    c.why = pct(change, true) + " within " + pct(noise);
  } else {
    c.verdict = change < 0 ? "slower" : "faster";
    c.why = pct(change, true) + " beyond " + bounds;
    c.regression = change < 0;
  }
}

RowCheck check(const Side& old_side, const Side& new_side, double limit) {
  const Row* o = old_side.row;
  const Row* n = new_side.row;
  RowCheck c;
  c.name = (n ? n : o)->name;
  if (o) read_side(*o, c.old_sps, c.old_spread, c.old_interval);
  if (n) read_side(*n, c.new_sps, c.new_spread, c.new_interval);
  if (verdict_without_numbers(o, n, c) || verdict_of_windows(old_side, new_side, limit, c)) return c;
  verdict_of_spreads(limit, c);
  return c;
}

/// A rate with its interval as its file prints it; "-" without one.
std::string rate(const std::optional<double>& v, const std::string& interval) {
  if (!v) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f", *v);
  return buf + interval;
}

}  // namespace

std::vector<const RowCheck*> Comparison::regressions() const {
  std::vector<const RowCheck*> r;
  for (const auto& c : rows)
    if (c.regression) r.push_back(&c);
  return r;
}

namespace {

/// The architectures a run's rows measured, in order, each once ("resnet18, resnet50").
std::string archs_of(const RunFile& run) {
  std::vector<std::string> seen;
  for (const Row& row : run.results.rows)
    if (!row.arch.empty() && std::find(seen.begin(), seen.end(), row.arch) == seen.end())
      seen.push_back(row.arch);
  std::string out;
  for (const auto& a : seen) out += (out.empty() ? "" : ", ") + a;
  return out;
}

/// A warning when the two runs measured other models (files that name them, both).
std::string arch_warning(const RunFile& old, const RunFile& now) {
  const std::string a = archs_of(old), b = archs_of(now);
  if (a.empty() || b.empty() || a == b) return "";
  return "the runs measured other models: " + old.label + " " + a + ", " + now.label + " " + b +
         "; their speeds are not comparable";
}

}  // namespace

Comparison compare_runs(const RunFile& old, const RunFile& now, double limit_pct) {
  Comparison cmp;
  cmp.old_label = old.label;
  cmp.new_label = now.label;
  cmp.limit_pct = limit_pct;
  const std::vector<Row>& old_rows = old.results.rows;
  const std::vector<Row>& new_rows = now.results.rows;
  const auto old_keys = keys_of(old_rows), new_keys = keys_of(new_rows);
  const auto old_chain = chain_rows(old_rows), new_chain = chain_rows(new_rows);
  std::vector<bool> old_used(old_rows.size(), false);
  for (size_t i = 0; i < new_rows.size(); ++i) {
    Side o{nullptr, &old_chain, 0};
    for (size_t j = 0; j < old_rows.size(); ++j)
      if (old_keys[j] == new_keys[i]) {
        o = Side{&old_rows[j], &old_chain, j};
        old_used[j] = true;
        break;
      }
    cmp.rows.push_back(check(o, Side{&new_rows[i], &new_chain, i}, limit_pct));
  }
  for (size_t j = 0; j < old_rows.size(); ++j)
    if (!old_used[j]) cmp.rows.push_back(check(Side{&old_rows[j], &old_chain, j}, Side{}, limit_pct));
  if (const std::string w = arch_warning(old, now); !w.empty()) cmp.warnings.push_back(w);
  for (const RunFile* r : {&old, &now}) {
    if (r->results.status != RunStatus::kComplete)
      cmp.warnings.push_back(r->label + ": the run is " + run_status_text(r->results.status) +
                             ", not complete");
  }
  return cmp;
}

std::string render_run_comparison(const Comparison& c) {
  table::Table t{
      {{"row"}, {"old samples/s", true}, {"new samples/s", true}, {"ratio", true}, {"verdict"}, {"why"}}, {}};
  for (const auto& r : c.rows) {
    char ratio[32] = "-";
    if (r.old_sps && r.new_sps && *r.old_sps > 0)
      std::snprintf(ratio, sizeof ratio, "%.3fx", *r.new_sps / *r.old_sps);
    std::string verdict = r.verdict + (r.regression ? " (regression)" : "");
    std::string why = r.why.substr(0, r.why.find('\n'));
    std::string name = r.name;
    std::replace(name.begin(), name.end(), '\n', ' ');
    t.rows.push_back(
        {name, rate(r.old_sps, r.old_interval), rate(r.new_sps, r.new_interval), ratio, verdict, why});
  }
  std::string out =
      "comparing " + c.new_label + " (new) against " + c.old_label +
      " (old): a change is beyond noise when the " + stats::level_text(stats::kSpeedupLevel) +
      " interval of new/old samples/s (each run's rates as its table prints them, from its windows; " +
      stats::level_text(stats::kSpeedupLevelUnderLoad) +
      " where either was measured under competing load) lies beyond " +
      pct(c.limit_pct > 0 ? c.limit_pct : stats::NoiseRule{}.floor_pct) +
      " (rows without windows: the change must exceed " + pct(c.limit_pct) + " and both spreads)\n";
  out += table::text(t);
  for (const auto& w : c.warnings) out += "warning: " + w + "\n";
  const auto reg = c.regressions();
  if (reg.empty()) {
    out += "no regression: no row slower beyond noise, none missing or failed\n";
  } else {
    std::string names;
    for (const auto* r : reg) names += (names.empty() ? "" : ", ") + r->name + " (" + r->verdict + ")";
    out += std::to_string(reg.size()) + (reg.size() == 1 ? " regression: " : " regressions: ") + names + "\n";
  }
  return out;
}

}  // namespace ptune::report
