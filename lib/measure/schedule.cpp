#include "measure/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>

#include "core/stats.hpp"

namespace ptune::measure {

WindowPlan window_plan(const config::ExperimentConfig& cfg, std::function<double(double)> max_over_ranks) {
  WindowPlan p;
  p.min_pairs = cfg.measure.repeats;
  p.deadline = Deadline(1000.0 * cfg.measure.max_s);
  // Asked only while measuring, when the row's group is joined.
  if (max_over_ranks) p.deadline.agree_with(std::move(max_over_ranks));
  p.rule = noise_rule(cfg);
  return p;
}

stats::NoiseRule noise_rule(const config::ExperimentConfig& cfg) {
  stats::NoiseRule rule;
  rule.target_pct = cfg.measure.target_ci_pct;
  rule.floor_pct = cfg.measure.noise_pct;
  return rule;
}

WindowPlan in_processes(WindowPlan plan, int64_t processes) {
  plan.processes = processes;
  plan.min_pairs = std::max(plan.min_pairs, 2 * processes);
  return plan;
}

namespace {

/// Switches between the sides of a comparison: the idle one paused.
struct Alternation {
  Side* active = nullptr;
  double run(Side& s, const Deadline& d) {
    if (active != &s) {
      if (active) active->pause();
      s.resume();
      active = &s;
    }
    return s.window(d);
  }
};

/// The kept part of `all`: from `k` on.
template <class T>
std::vector<T> from(const std::vector<T>& all, int64_t k) {
  return std::vector<T>(all.begin() + std::min<int64_t>(k, static_cast<int64_t>(all.size())), all.end());
}

/// Adds the process `s` timed its last window in to `to`, for a side timed in several.
void note_process(const Side& s, std::vector<int>& to) {
  if (s.last_process() >= 0) to.push_back(s.last_process());
}

/// Every pair of a comparison, the transient included: A's and B's windows, and for sides in
/// several processes the process of each.
struct TimedPairs {
  std::vector<double> a, b;
  std::vector<int> proc_a, proc_b;

  void add(double a_ms, double b_ms, const Side& side_a, const Side& side_b) {
    a.push_back(a_ms);
    b.push_back(b_ms);
    note_process(side_a, proc_a);
    note_process(side_b, proc_b);
  }
};

/// A look at the pairs so far: `c`'s kept pairs (the transient left out), whether the row is
/// under competing load, its speedup and verdict. Returns A's kept windows scaled by `scale` (time
/// per sample).
std::vector<double> look(Comparison& c, const TimedPairs& all, double scale, const WindowPlan& plan) {
  c.transient = stats::transient_pairs(all.a, all.b);
  c.a_ms = from(all.a, c.transient);
  c.b_ms = from(all.b, c.transient);
  c.a_process = from(all.proc_a, c.transient);
  c.b_process = from(all.proc_b, c.transient);
  std::vector<double> a_scaled = c.a_ms;
  for (double& v : a_scaled) v *= scale;
  const int64_t kept = static_cast<int64_t>(c.b_ms.size());
  // Is the row under competing load so far (only from the first look on)? Once seen, it stays:
  // the figures since the row's start may dilute a burst later on.
  if (kept >= plan.min_pairs && plan.under_load && !c.under_load) c.under_load = plan.under_load();
  c.speedup = stats::speedup_interval(a_scaled, c.a_process, c.b_ms, c.b_process, true,
                                      stats::speedup_level(c.under_load));
  c.verdict = stats::verdict_of(c.speedup, plan.rule);
  return a_scaled;
}

/// Why measuring stops after a look at `c` (`a_scaled`: look()'s), or none to time another pair;
/// `time_left`: the budget fits another pair. Until measure.repeats pairs are kept only the
/// budget stops it. Then within noise ends the row at any look. Faster or slower ends it before
/// the budget only when an interval at kEarlyStopLevel says so too: each look is another chance
/// for noise to cross the line, so the early looks ask for strong evidence and the verdict at
/// the budget is read as reported. Under load there are no early looks at all: another
/// program's bursts are not the independent noise the interval assumes.
std::optional<StopRule> stop_after_look(const Comparison& c, const std::vector<double>& a_scaled,
                                        const WindowPlan& plan, bool time_left) {
  if (static_cast<int64_t>(c.b_ms.size()) < plan.min_pairs)
    return time_left ? std::nullopt : std::optional<StopRule>(StopRule::kBudget);
  if (c.verdict == stats::Verdict::kWithinNoise) return StopRule::kDecided;
  if (!time_left) return StopRule::kBudget;
  if (c.verdict != stats::Verdict::kUndecided && !c.under_load &&
      stats::verdict_of(
          stats::speedup_interval(a_scaled, c.a_process, c.b_ms, c.b_process, true, stats::kEarlyStopLevel),
          plan.rule) == c.verdict)
    return StopRule::kDecided;
  return std::nullopt;
}

}  // namespace

Comparison compare(Side& a, Side& b, const WindowPlan& plan,
                   const std::function<void(const Comparison&)>& on_pair) {
  Comparison c;
  Deadline deadline = plan.deadline;
  Alternation alt;
  const int64_t max_pairs = std::max<int64_t>(plan.max_pairs, plan.min_pairs);
  // Time per sample: A's windows scaled by B's samples per step over A's.
  const double scale = b.samples_per_step() / a.samples_per_step();
  TimedPairs all;
  std::mt19937 order(kPairOrderSeed);
  bool a_first = true;
  stats::Stopwatch wall;
  for (int64_t pairs = 1; pairs <= max_pairs; ++pairs) {
    // A block of two pairs: a drawn order, then the other.
    a_first = pairs % 2 == 1 ? (order() & 1u) == 0 : !a_first;
    Side& first = a_first ? a : b;
    Side& second = a_first ? b : a;
    // Until measure.repeats pairs are kept, each window gets its share of the time left, so that
    // they all fit: a slow step makes shorter windows rather than fewer pairs.
    const int64_t windows_due = 2 * (plan.min_pairs - static_cast<int64_t>(c.b_ms.size()));
    const double t1 = alt.run(first, deadline.share(windows_due));
    // The pair's second window needs one step of its side; without it the first is left out.
    if (pairs > 1 && !deadline.fits((a_first ? all.b : all.a).back())) {
      c.stop = StopRule::kBudget;
      c.unpaired = true;
      break;
    }
    const double t2 = alt.run(second, deadline.share(windows_due - 1));
    all.add(a_first ? t1 : t2, a_first ? t2 : t1, a, b);
    c.pair_ms = wall.ms() / static_cast<double>(pairs);
    const std::vector<double> a_scaled = look(c, all, scale, plan);
    if (on_pair) on_pair(c);
    const bool kept_enough = static_cast<int64_t>(c.b_ms.size()) >= plan.min_pairs;
    if (kept_enough) deadline.settle();
    // Another pair needs one step of each side at least.
    const bool time_left = deadline.fits(all.a.back() + all.b.back());
    if (const std::optional<StopRule> stop = stop_after_look(c, a_scaled, plan, time_left)) {
      c.stop = *stop;
      break;
    }
  }
  if (alt.active) alt.active->pause();
  return c;
}

namespace {

/// undecided_note for sides in several processes: their spread, which more time hardly narrows.
std::string undecided_processes_note(const Comparison& c) {
  const std::vector<stats::LogTerm> t = stats::speedup_terms(c.a_ms, c.a_process, c.b_ms, c.b_process, true);
  if (t.size() != 2 || t[0].df < 1 || t[1].df < 1) return "";
  const stats::LogTerm &a = t[0], &b = t[1];
  // A process's own speed (the spread of the pairs' mean ratio by process), pooled over the sides.
  const double pooled = (a.var * (a.df + 1) * a.df + b.var * (b.df + 1) * b.df) / (a.df + b.df);
  char text[400];
  std::snprintf(
      text, sizeof text,
      "undecided in its time: a process's own speed varied by %.1f%% (one standard deviation) between "
      "processes started alike, %.0f a side; more processes (measure.processes) narrow the interval, "
      "more time hardly does",
      100.0 * (std::exp(std::sqrt(pooled)) - 1.0), a.df + 1);
  return text;
}

}  // namespace

std::string undecided_note(const Comparison& c, const WindowPlan& plan) {
  if (c.stop != StopRule::kBudget || c.verdict != stats::Verdict::kUndecided || c.b_ms.size() < 3 ||
      !c.speedup.valid())
    return "";
  // Sides in processes: what narrows their interval is more processes, under load or not.
  if (!c.a_process.empty() && !c.b_process.empty()) return undecided_processes_note(c);
  if (c.under_load) return "";
  // One pair's spread from the paired term: its variance is that of the mean, s^2 / n.
  const std::vector<stats::LogTerm> terms = stats::paired_terms(c.a_ms, c.b_ms);
  if (terms.empty() || terms.front().df < 2) return "";
  const size_t pairs = static_cast<size_t>(terms.front().df) + 1;
  const double sd = std::sqrt(terms.front().var * static_cast<double>(pairs));
  // The speedup's own point (its log), which scales A to B's samples per step.
  const int64_t n = stats::pairs_to_decide(std::log(c.speedup.point), sd, c.speedup.level, plan.rule);
  char text[400];
  const double spread_pct = 100.0 * (std::exp(sd) - 1.0);
  if (n <= 0 || n <= static_cast<int64_t>(pairs)) {
    std::snprintf(
        text, sizeof text,
        "undecided in its time: one pair's speedup varied by %.1f%% (one standard deviation) over %zu pairs",
        spread_pct, pairs);
    return text;
  }
  const double seconds = c.pair_ms * static_cast<double>(n + c.transient) / 1000.0;
  std::snprintf(
      text, sizeof text,
      "undecided in its time: one pair's speedup varied by %.1f%% (one standard deviation) over %zu pairs; "
      "at that spread about %lld pairs, about %.0f s of timing (measure.max_s), would decide it",
      spread_pct, pairs, static_cast<long long>(n), std::ceil(seconds));
  return text;
}

AloneRun measure_alone(Side& s, const WindowPlan& plan,
                       const std::function<void(const std::vector<double>&)>& on_window) {
  AloneRun r;
  Deadline deadline = plan.deadline;
  std::vector<double> all;  // every window, the transient included
  std::vector<int> processes;
  s.resume();
  const int64_t max_windows = std::max<int64_t>(plan.max_pairs, plan.min_pairs);
  for (int64_t n = 1; n <= max_windows; ++n) {
    // Until measure.repeats windows are kept, each gets its share of the time left.
    all.push_back(s.window(deadline.share(plan.min_pairs - static_cast<int64_t>(r.ms.size()))));
    note_process(s, processes);
    r.transient = stats::transient_end(all);
    r.ms = from(all, r.transient);
    r.process = from(processes, r.transient);
    if (on_window) on_window(r.ms);
    const bool enough = static_cast<int64_t>(r.ms.size()) >= plan.min_pairs;
    if (enough) deadline.settle();
    const bool time_left = deadline.fits(all.back());  // another step at least
    const stats::Interval i = stats::mean_interval(r.ms, r.process, stats::kRowLevel);
    if (enough && i.valid() && i.half_width_pct() <= plan.rule.target_pct) {
      r.stop = StopRule::kDecided;
      break;
    }
    if (!time_left) {
      r.stop = StopRule::kBudget;
      break;
    }
  }
  s.pause();
  return r;
}

std::vector<std::string> run_notes(int64_t transient, size_t kept, StopRule stop, const WindowPlan& plan,
                                   bool paired) {
  const int64_t min_pairs = plan.min_pairs;
  const Deadline& deadline = plan.deadline;
  std::vector<std::string> notes;
  const std::string unit = paired ? "pair" : "window";
  auto count = [&](int64_t n) { return std::to_string(n) + " " + unit + (n == 1 ? "" : "s"); };
  if (transient > 0)
    notes.push_back("warm-up: the first " + (transient == 1 ? unit : count(transient)) +
                    " still ran slower (the pipeline's start-up: above the " +
                    stats::level_text(stats::kTransientLevel) +
                    " prediction bound of the later windows): left out of every figure" +
                    (paired ? ", on both sides" : ""));
  if (stop == StopRule::kBudget && static_cast<int64_t>(kept) < min_pairs) {
    char budget[160];
    if (deadline.budget_s() > 0)
      std::snprintf(budget, sizeof budget, "measure.max_s, %.3g s", deadline.budget_s());
    else
      std::snprintf(budget, sizeof budget, "measure.max_s 0: automatic, %.3g s",
                    deadline.limit_ms() / 1000.0);
    notes.push_back(std::string("ran out of time: the row's budget (") + budget +
                    ", warm-up included) ended it after " + count(static_cast<int64_t>(kept)) + " of the " +
                    std::to_string(min_pairs) +
                    (plan.processes > 0 ? " planned (measure.repeats, and two for each of its " +
                                              std::to_string(plan.processes) + " processes)"
                                        : " measure.repeats asks for") +
                    "; its figures are those of what was timed");
  }
  return notes;
}

}  // namespace ptune::measure
