#include "measure/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <random>

#include "core/numbers.hpp"
#include "core/stats.hpp"

namespace ptune::measure {

WindowPlan window_plan(const config::ExperimentConfig& cfg, std::function<double(double)> max_over_ranks) {
  WindowPlan p;
  p.min_pairs = cfg.measure.repeats;
  p.deadline = Deadline(1000.0 * cfg.measure.max_s);
  p.deadline.set_auto_most(1000.0 * cfg.measure.auto_max_s);
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

/// The confidence of the optimistic end of a spread (allocation.hpp, optimistic) that keeps a
/// row's automatic budget growing where the estimate says a verdict costs more than its most.
constexpr double kHopeLevel = 0.9;

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

/// The processes of the kept windows on the side with fewer: 0 where a side is in one process.
int64_t processes_a_side(const Comparison& c) {
  if (c.a_process.empty() || c.b_process.empty()) return 0;
  auto distinct = [](std::vector<int> p) {
    std::sort(p.begin(), p.end());
    return static_cast<int64_t>(std::unique(p.begin(), p.end()) - p.begin());
  };
  return std::min(distinct(c.a_process), distinct(c.b_process));
}

/// Whether to start one more process a side after a look at `c` that did not stop the row: the
/// plan can add them, every process has timed two windows since the last were added (`since`:
/// pairs), the model says a process narrows the interval more than the pairs its start would
/// buy, and the time left fits its start and two windows of each process after it.
bool grow_now(const Comparison& c, const std::vector<double>& a_scaled, const WindowPlan& plan,
              const Deadline& deadline, int64_t since) {
  if (!plan.add_processes || c.no_more_processes) return false;
  if (static_cast<int64_t>(c.b_ms.size()) < plan.min_pairs) return false;
  const int64_t k = processes_a_side(c);
  if (k < 2 || since < 2 * k) return false;
  const std::optional<Spread> s = spread_of(a_scaled, c.a_process, c.b_ms, c.b_process);
  if (!s) return false;
  const double start_ms = c.process_start_ms;
  if (!more_processes_narrow(*s, c.pair_ms, start_ms, stats::speedup_level(c.under_load))) return false;
  return deadline.fits(start_ms + 2.0 * static_cast<double>(k + 1) * c.pair_ms);
}

/// What deciding the row needs from now (ms) at the spread measured so far: in processes,
/// need_to_decide (up to measure.max_processes where they can grow); in one process each,
/// pairs_to_decide. With `hope`, at the spread's optimistic end (allocation.hpp, optimistic;
/// kHopeLevel). None where it cannot be told or no verdict is in reach.
std::optional<double> need_ms(const Comparison& c, const std::vector<double>& a_scaled,
                              const WindowPlan& plan, bool hope) {
  const double level = c.speedup.level;
  if (!c.a_process.empty() && !c.b_process.empty()) {
    std::optional<Spread> s = spread_of(a_scaled, c.a_process, c.b_ms, c.b_process);
    if (!s) return std::nullopt;
    if (hope) s = optimistic(*s, kHopeLevel);
    const int64_t most = plan.add_processes ? plan.max_processes : s->processes;
    const std::optional<Need> need =
        need_to_decide(*s, c.pair_ms, c.process_start_ms, level, plan.rule, most);
    return need ? std::optional<double>(need->ms) : std::nullopt;
  }
  const std::vector<stats::LogTerm> terms = stats::paired_terms(a_scaled, c.b_ms);
  if (terms.empty() || terms.front().df < 2) return std::nullopt;
  const double df = terms.front().df, pairs = df + 1;
  const double var = terms.front().var * (hope ? df / stats::chi2_quantile(kHopeLevel, df) : 1.0);
  const int64_t n =
      stats::pairs_to_decide(std::log(c.speedup.point), std::sqrt(var * pairs), level, plan.rule);
  if (n <= 0) return std::nullopt;
  return std::max(0.0, static_cast<double>(n) - pairs) * c.pair_ms;
}

/// An automatic budget raised, at a look that left the row undecided, to what deciding it needs
/// (need_ms, with a tenth and two pairs to spare) where that fits measure.auto_max_s
/// (Deadline::grow_to). Where it does not, the spread measured so far may still be far from the
/// truth (few processes or pairs: few degrees of freedom): a verdict the spread's optimistic end
/// puts within measure.auto_max_s grows the budget to that most; a row whose verdict would cost
/// more even there keeps the budget it has.
void grow_budget(Comparison& c, const std::vector<double>& a_scaled, const WindowPlan& plan,
                 Deadline& deadline) {
  if (!deadline.can_grow() || c.verdict != stats::Verdict::kUndecided || !(c.pair_ms > 0) ||
      static_cast<int64_t>(c.b_ms.size()) < plan.min_pairs || !c.speedup.valid())
    return;
  const auto limit = [&](const std::optional<double>& need) {
    return need ? deadline.elapsed_ms() + 1.1 * *need + 2.0 * c.pair_ms
                : std::numeric_limits<double>::infinity();
  };
  double want = limit(need_ms(c, a_scaled, plan, false));
  bool hope = false;
  if (want > deadline.auto_most_ms() && limit(need_ms(c, a_scaled, plan, true)) <= deadline.auto_most_ms())
    want = deadline.auto_most_ms(), hope = true;
  if (std::isfinite(want) && deadline.grow_to(want)) {
    c.budget_grown = true;
    c.budget_hope = hope;
    c.limit_ms = deadline.limit_ms();
  }
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
  // The pairs' wall time on the deadline's clock, less the time spent starting processes.
  const double start = deadline.elapsed_ms();
  c.start_ms = start;
  double growth_ms = 0;
  int64_t since_growth = 0;
  c.process_start_ms = plan.process_start_ms;
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
    c.pair_ms = (deadline.elapsed_ms() - start - growth_ms) / static_cast<double>(pairs);
    ++since_growth;
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
    if (grow_now(c, a_scaled, plan, deadline, since_growth)) {
      // The processes start with both sides paused: a running one would slow their warm-up.
      if (alt.active) alt.active->pause();
      alt.active = nullptr;
      const double before = deadline.elapsed_ms();
      const std::optional<double> cost = plan.add_processes();
      growth_ms += deadline.elapsed_ms() - before;
      if (cost) {
        ++c.processes_added;
        c.process_start_ms = *cost;
        since_growth = 0;
      } else {
        c.no_more_processes = true;
      }
    }
    grow_budget(c, a_scaled, plan, deadline);
  }
  if (alt.active) alt.active->pause();
  return c;
}

namespace {

/// The budget a row would need in all, `more_ms` from now: measure.max_s's words.
std::string budget_text(const WindowPlan& plan, double more_ms) {
  const double total_s = std::ceil((plan.deadline.elapsed_ms() + more_ms) / 1000.0);
  if (total_s < 120) return numbers::fixed(total_s, 0) + " s";
  return numbers::fixed(std::ceil(total_s / 60.0), 0) + " min";
}

/// undecided_note for sides in several processes: what a verdict would need of more processes and
/// time at the spread measured (allocation.hpp), or that none would do at a change this close to
/// the noise floor.
std::string undecided_processes_note(const Comparison& c, const WindowPlan& plan) {
  const std::optional<Spread> s = spread_of(c.a_ms, c.a_process, c.b_ms, c.b_process);
  if (!s) return "";
  const double change_pct = 100.0 * std::fabs(c.speedup.point - 1.0);
  const std::string spread = s->text() + ", " + std::to_string(s->processes) + " processes a side";
  Spread at = *s;
  at.log_point = std::log(c.speedup.point);
  constexpr int64_t kMostProcesses = 64;  // measure.max_processes' most
  const std::optional<Need> need =
      need_to_decide(at, c.pair_ms, c.process_start_ms, c.speedup.level, plan.rule, kMostProcesses);
  if (!need)
    return "undecided in its time: a change this small (" + numbers::fixed(change_pct, 1) +
           "%) would need more than " + std::to_string(kMostProcesses) +
           " processes a side (measure.max_processes' most) to decide here; " + spread;
  const std::string keys =
      need->processes > plan.max_processes
          ? "measure.max_processes " + std::to_string(need->processes) + ", measure.max_s "
          : "measure.max_s ";
  return "undecided in its time: a change this small (" + numbers::fixed(change_pct, 1) + "%) needs about " +
         std::to_string(need->processes) + " processes a side here, about " + budget_text(plan, need->ms) +
         " in all (" + keys + numbers::fixed(std::ceil((plan.deadline.elapsed_ms() + need->ms) / 1000.0), 0) +
         "); " + spread;
}

}  // namespace

std::string undecided_note(const Comparison& c, const WindowPlan& plan) {
  if (c.stop == StopRule::kDecided || c.verdict != stats::Verdict::kUndecided || c.b_ms.size() < 3 ||
      !c.speedup.valid())
    return "";
  // Sides in processes: what narrows their interval is more processes, under load or not, and
  // however the row stopped.
  if (!c.a_process.empty() && !c.b_process.empty()) return undecided_processes_note(c, plan);
  if (c.under_load || c.stop != StopRule::kBudget) return "";
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

std::optional<Decidable> decidable(const Comparison& c, const config::ExperimentConfig& cfg) {
  const double budget_s = cfg.measure.max_s > 0 ? cfg.measure.max_s : cfg.measure.auto_max_s;
  const double budget_ms = 1000.0 * budget_s - c.start_ms;
  const stats::NoiseRule rule = noise_rule(cfg);
  const double level = stats::speedup_level(c.under_load);
  std::optional<double> pct;
  std::string spread;
  if (!c.a_process.empty() && !c.b_process.empty()) {
    const std::optional<Spread> s = spread_of(c.a_ms, c.a_process, c.b_ms, c.b_process);
    if (!s) return std::nullopt;
    pct = decidable_change_pct(*s, cfg.measure.processes, c.pair_ms, c.process_start_ms, level, rule,
                               cfg.measure.max_processes, budget_ms);
    spread =
        s->text() + "; up to measure.max_processes " + std::to_string(cfg.measure.max_processes) + " a side";
  } else if (c.a_process.empty() && c.b_process.empty()) {
    const std::vector<stats::LogTerm> t = stats::paired_terms(c.a_ms, c.b_ms);
    if (t.empty() || t.front().df < 2) return std::nullopt;
    const double sd = std::sqrt(t.front().var * (t.front().df + 1));
    pct = decidable_change_pct(sd, c.pair_ms, level, rule, budget_ms);
    spread = "one pair's speedup varied by " + numbers::fixed(100.0 * std::expm1(sd), 1) + "%";
  }
  if (!pct) return std::nullopt;
  const std::string budget = cfg.measure.max_s > 0 ? "measure.max_s " + numbers::shortest(budget_s)
                                                   : "measure.auto_max_s " + numbers::shortest(budget_s);
  return Decidable{*pct, "a change of about " + numbers::fixed(*pct, 1) +
                             "% or more is called faster or slower in " + numbers::shortest(budget_s) +
                             " s a row (" + budget + "), at the spread measured: " + spread};
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
