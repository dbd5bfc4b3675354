// ptune_verdict_sim: ptune's own scheduler (measure::compare, its stopping rule and its allocation
// of processes) run on simulated rows with a fake clock, to measure what its verdicts promise:
// how often an A/A row is called faster or slower, how often the interval covers the true
// speedup, and how long a real change takes to decide. Each simulated process has a speed of its
// own (a log-normal random effect drawn when it starts, `--process-pct` one standard deviation)
// and each window its own noise (`--window-pct`); starting a process costs `--start-s` of the
// budget on each side. scripts/bench/verdict-sim --processes runs it; docs/statistics.md has its
// tables.
//
//   ptune_verdict_sim [--rows N] [--budget-s S (0: automatic)] [--auto-max-s S] [--start-s S] [--window-s S]
//   [--processes K]
//                     [--max-processes M] [--seed N] [--cases grid|CHANGE:PROCESS:WINDOW,...]
//                     [--chains]
//
// With --chains, a sweep's vs-base chains instead: 2 to 6 links, all A/A or the first 10% faster,
// each row timed against the previous row's processes kept warm (as a sweep does; both grown as
// the scheduler grows them): how often vs base (report::base_interval) covers the true
// cumulative speedup and how often the plain Welch-Satterthwaite sum of the links does, how often
// an A/A chain is called faster or slower, and how often a chain is decided while every one of
// its links is undecided.

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/stats.hpp"
#include "measure/process_group.hpp"
#include "measure/schedule.hpp"
#include "report/figures.hpp"

namespace {

using ptune::measure::Deadline;
using ptune::measure::Measurement;
using ptune::measure::Progress;
using ptune::measure::RowSide;

/// The simulated machine: a fake wall clock (ms) and the random draws.
struct World {
  double now = 0;
  std::mt19937_64 rng;
  double normal(double sd) { return std::normal_distribution<double>(0.0, sd)(rng); }
};

/// One simulated process: its windows take exp(mean + its own effect + the window's noise) ms a
/// step, `steps` steps each, on the fake clock.
class SimProcess : public RowSide {
 public:
  SimProcess(World& w, double log_mean, double process_sd, double window_sd, int64_t steps)
      : w_(w), log_ms_(log_mean + w.normal(process_sd)), window_sd_(window_sd), steps_(steps) {}
  double window(const Deadline&) override {
    const double ms = std::exp(log_ms_ + w_.normal(window_sd_));
    w_.now += ms * static_cast<double>(steps_);
    windows_.push_back(ms);
    return ms;
  }
  int64_t steps_per_window() const override { return steps_; }
  size_t processes() const override { return 1; }
  Measurement result(size_t first, size_t count) override {
    Measurement m;
    const size_t end = std::min(windows_.size(), first + count);
    ptune::measure::set_windows(m, std::vector<double>(windows_.begin() + first, windows_.begin() + end), 1);
    return m;
  }
  void set_progress(const Progress&, int64_t) override {}

 private:
  World& w_;
  double log_ms_, window_sd_;
  int64_t steps_;
  std::vector<double> windows_;
};

struct Settings {
  int rows = 200;
  double budget_s = 600, start_s = 8, window_s = 0.5;
  double auto_max_s = 120;  // --budget-s 0 (automatic): measure.auto_max_s
  int64_t processes = 3, max_processes = 12, steps = 5;
  uint64_t seed = 20261206;
};

struct Case {
  double change_pct = 0, process_pct = 0, window_pct = 0;
};

/// What the rows of one case gave.
struct Tally {
  int rows = 0, faster = 0, slower = 0, within = 0, undecided = 0, covered = 0, wrong = 0;
  std::vector<double> decide_s;   // the time of each row that was decided rightly
  std::vector<double> processes;  // processes a side at each row's end
};

double log_sd(double pct) { return std::log1p(pct / 100.0); }

/// A row's deadline on the simulated clock: --budget-s, or automatic (0) up to --auto-max-s.
Deadline deadline(const Settings& s, World& w) {
  Deadline d(1000.0 * s.budget_s, [&w] { return w.now; });
  d.set_auto_most(1000.0 * s.auto_max_s);
  return d;
}

/// One simulated row of `c`: B faster than A by c.change_pct.
void run_row(const Settings& s, const Case& c, uint64_t seed, Tally& t) {
  World w;
  w.rng.seed(seed);
  const double step_ms = 1000.0 * s.window_s / static_cast<double>(s.steps);
  const double a_log = std::log(step_ms), b_log = a_log - std::log1p(c.change_pct / 100.0);
  const double p_sd = log_sd(c.process_pct), w_sd = log_sd(c.window_pct);
  ptune::measure::WindowPlan plan;
  plan.deadline = deadline(s, w);
  plan.min_pairs = 3;
  plan = ptune::measure::in_processes(plan, s.processes);
  plan.max_processes = s.max_processes;
  auto start = [&](double log_mean) {
    w.now += 1000.0 * s.start_s;
    return std::make_unique<SimProcess>(w, log_mean, p_sd, w_sd, s.steps);
  };
  std::vector<std::unique_ptr<RowSide>> a, b;
  for (int64_t i = 0; i < s.processes; ++i) {
    a.push_back(start(a_log));
    b.push_back(start(b_log));
  }
  ptune::measure::ProcessGroup ga(std::move(a), false), gb(std::move(b), true);
  // An automatic budget counts from the first windows, as a program row's does.
  if (s.budget_s <= 0) plan.deadline = deadline(s, w);
  plan.process_start_ms = 2000.0 * s.start_s;
  plan.add_processes = [&]() -> std::optional<double> {
    if (static_cast<int64_t>(gb.processes()) >= s.max_processes) return std::nullopt;
    const double before = w.now;
    ga.add(start(a_log));
    gb.add(start(b_log));
    return w.now - before;
  };
  const ptune::measure::Comparison r = ptune::measure::compare(ga, gb, plan);
  ++t.rows;
  const double truth = 1.0 + c.change_pct / 100.0;
  if (r.speedup.valid() && r.speedup.lo <= truth && truth <= r.speedup.hi) ++t.covered;
  t.processes.push_back(static_cast<double>(gb.processes()));
  switch (r.verdict) {
    case ptune::stats::Verdict::kFaster:
      ++t.faster;
      break;
    case ptune::stats::Verdict::kSlower:
      ++t.slower;
      break;
    case ptune::stats::Verdict::kWithinNoise:
      ++t.within;
      break;
    case ptune::stats::Verdict::kUndecided:
      ++t.undecided;
      break;
  }
  // Right: faster for a change beyond the floor, within noise for none; a change below the
  // target may rightly be either.
  const bool right = c.change_pct == 0 ? r.verdict == ptune::stats::Verdict::kWithinNoise
                                       : r.verdict == ptune::stats::Verdict::kFaster;
  if (right) t.decide_s.push_back(w.now / 1000.0);
  const bool wrong = c.change_pct == 0 ? (r.verdict == ptune::stats::Verdict::kFaster ||
                                          r.verdict == ptune::stats::Verdict::kSlower)
                                       : r.verdict == ptune::stats::Verdict::kSlower;
  if (wrong) ++t.wrong;
}

/// What the chains of one case gave.
struct ChainTally {
  int chains = 0, covered = 0, plain_covered = 0, called = 0, decided_on_undecided = 0,
      plain_decided_on_undecided = 0;
};

/// A group of `n` simulated processes of a row whose steps take exp(`log_mean`) ms.
std::unique_ptr<ptune::measure::ProcessGroup> group(World& w, const Settings& s, int64_t n, double log_mean,
                                                    double p_sd, double w_sd, bool shifted) {
  std::vector<std::unique_ptr<RowSide>> children;
  for (int64_t i = 0; i < n; ++i) {
    w.now += 1000.0 * s.start_s;
    children.push_back(std::make_unique<SimProcess>(w, log_mean, p_sd, w_sd, s.steps));
  }
  return std::make_unique<ptune::measure::ProcessGroup>(std::move(children), shifted);
}

/// Link k of a chain: the row's processes timed against the previous row's, kept (both grown as
/// the scheduler grows them).
ptune::measure::Comparison time_link(World& w, const Settings& s, ptune::measure::ProcessGroup& prev,
                                     ptune::measure::ProcessGroup& row, double prev_log, double row_log,
                                     double p_sd, double w_sd) {
  prev.restart(false);
  ptune::measure::WindowPlan plan;
  plan.deadline = deadline(s, w);
  plan.min_pairs = 3;
  plan = ptune::measure::in_processes(plan, static_cast<int64_t>(row.processes()));
  plan.max_processes = s.max_processes;
  plan.process_start_ms = 2000.0 * s.start_s;
  plan.add_processes = [&]() -> std::optional<double> {
    if (static_cast<int64_t>(row.processes()) >= s.max_processes) return std::nullopt;
    const double before = w.now;
    w.now += 2000.0 * s.start_s;
    prev.add(std::make_unique<SimProcess>(w, prev_log, p_sd, w_sd, s.steps));
    row.add(std::make_unique<SimProcess>(w, row_log, p_sd, w_sd, s.steps));
    return w.now - before;
  };
  return ptune::measure::compare(prev, row, plan);
}

/// One chain of `links` links of case `c` (its change on the first link only).
void run_chain(const Settings& s, const Case& c, int links, uint64_t seed, ChainTally& t) {
  World w;
  w.rng.seed(seed);
  const double p_sd = log_sd(c.process_pct), w_sd = log_sd(c.window_pct);
  const double base_log = std::log(1000.0 * s.window_s / static_cast<double>(s.steps));
  const double changed_log = base_log - std::log1p(c.change_pct / 100.0);
  std::vector<ptune::report::ChainRow> rows(1);
  rows[0].samples_per_step = 1;
  rows[0].window_ms = {std::exp(base_log)};
  auto prev = group(w, s, s.processes, base_log, p_sd, w_sd, false);
  bool every_link_undecided = true;
  for (int k = 1; k <= links; ++k) {
    const int64_t count = std::max<int64_t>(s.processes, static_cast<int64_t>(prev->processes()));
    auto row = group(w, s, count, changed_log, p_sd, w_sd, true);
    const double prev_log = k == 1 ? base_log : changed_log;
    const ptune::measure::Comparison r = time_link(w, s, *prev, *row, prev_log, changed_log, p_sd, w_sd);
    every_link_undecided = every_link_undecided && r.verdict == ptune::stats::Verdict::kUndecided;
    ptune::report::ChainRow cr;
    cr.samples_per_step = 1;
    cr.window_ms = r.b_ms;
    cr.window_process = r.b_process;
    cr.prev_ms = r.a_ms;
    cr.prev_process = r.a_process;
    cr.compared_with = static_cast<size_t>(k) - 1;
    rows.push_back(cr);
    prev = std::move(row);
  }
  const size_t last = static_cast<size_t>(links);
  const double level = ptune::stats::kSpeedupLevel;
  const ptune::stats::Interval chain = ptune::report::base_interval(rows, last, level);
  const ptune::stats::Interval plain =
      ptune::stats::sum_interval(ptune::report::base_terms(rows, last), level);
  const double truth = 1.0 + c.change_pct / 100.0;
  auto decided = [](const ptune::stats::Interval& i) {
    const auto v = ptune::stats::verdict_of(i, ptune::stats::NoiseRule{});
    return v == ptune::stats::Verdict::kFaster || v == ptune::stats::Verdict::kSlower;
  };
  ++t.chains;
  if (chain.valid() && chain.lo <= truth && truth <= chain.hi) ++t.covered;
  if (plain.valid() && plain.lo <= truth && truth <= plain.hi) ++t.plain_covered;
  if (c.change_pct == 0 && decided(chain)) ++t.called;
  if (every_link_undecided && decided(chain)) ++t.decided_on_undecided;
  if (every_link_undecided && decided(plain)) ++t.plain_decided_on_undecided;
}

void print_chains(const Settings& s) {
  std::printf(
      "| first link | links | between processes | window noise | chains | vs base covers | plain sum covers "
      "| "
      "A/A chain called faster or slower | decided on undecided links | plain: decided on undecided links |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n");
  uint64_t seed = s.seed;
  for (const double change : {0.0, 10.0})
    for (const int links : {2, 3, 4, 6})
      for (const double process : {1.0, 4.0})
        for (const double window : {2.0, 5.0}) {
          const Case c{change, process, window};
          ChainTally t;
          for (int r = 0; r < s.rows; ++r) run_chain(s, c, links, seed++, t);
          auto pct = [&](int n) { return 100.0 * n / t.chains; };
          char called[16] = "-";
          if (change == 0) std::snprintf(called, sizeof called, "%.1f%%", pct(t.called));
          std::printf("| %s | %d | %g%% | %g%% | %d | %.1f%% | %.1f%% | %s | %.1f%% | %.1f%% |\n",
                      change == 0 ? "A/A" : "10% faster", links, process, window, t.chains, pct(t.covered),
                      pct(t.plain_covered), called, pct(t.decided_on_undecided),
                      pct(t.plain_decided_on_undecided));
          std::fflush(stdout);
        }
}

std::vector<Case> grid() {
  std::vector<Case> cases;
  for (double change : {0.0, 3.0, 5.0, 10.0, 20.0})
    for (double window : {1.0, 2.0, 5.0})
      for (double process : {0.5, 1.0, 2.0, 4.0}) cases.push_back({change, process, window});
  return cases;
}

std::vector<Case> parse_cases(const std::string& text) {
  if (text == "grid") return grid();
  std::vector<Case> cases;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find(',', at), text.size());
    Case c;
    if (std::sscanf(text.substr(at, end - at).c_str(), "%lf:%lf:%lf", &c.change_pct, &c.process_pct,
                    &c.window_pct) != 3)
      throw std::invalid_argument("--cases: '" + text.substr(at, end - at) +
                                  "' is not CHANGE:PROCESS:WINDOW (percentages)");
    cases.push_back(c);
    at = end + 1;
  }
  return cases;
}

double median(std::vector<double> v) { return v.empty() ? NAN : ptune::stats::median(std::move(v)); }

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  std::string cases = "grid";
  bool chains = false;
  try {
    for (int i = 1; i < argc; i += 2) {
      const std::string k = argv[i];
      if (k == "--chains") {
        chains = true;
        --i;
        continue;
      }
      if (i + 1 >= argc) throw std::invalid_argument(k + " needs a value");
      const std::string v = argv[i + 1];
      const std::map<std::string, std::function<void()>> options = {
          {"--rows", [&] { s.rows = std::stoi(v); }},
          {"--budget-s", [&] { s.budget_s = std::stod(v); }},
          {"--auto-max-s", [&] { s.auto_max_s = std::stod(v); }},
          {"--start-s", [&] { s.start_s = std::stod(v); }},
          {"--window-s", [&] { s.window_s = std::stod(v); }},
          {"--processes", [&] { s.processes = std::stoll(v); }},
          {"--max-processes", [&] { s.max_processes = std::stoll(v); }},
          {"--seed", [&] { s.seed = std::stoull(v); }},
          {"--cases", [&] { cases = v; }}};
      const auto option = options.find(k);
      if (option == options.end()) throw std::invalid_argument("unknown option " + k);
      option->second();
    }
    if (chains) {
      print_chains(s);
      return 0;
    }
    std::printf(
        "| change | between processes | window noise | rows | faster | slower | within noise | undecided | "
        "wrong | covered | decided rightly | median time to decide (s) | processes a side (median) |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    uint64_t seed = s.seed;
    for (const Case& c : parse_cases(cases)) {
      Tally t;
      for (int r = 0; r < s.rows; ++r) run_row(s, c, seed++, t);
      auto pct = [&](int n) { return 100.0 * n / t.rows; };
      std::printf(
          "| %g%% | %g%% | %g%% | %d | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.0f | "
          "%.0f |\n",
          c.change_pct, c.process_pct, c.window_pct, t.rows, pct(t.faster), pct(t.slower), pct(t.within),
          pct(t.undecided), pct(t.wrong), pct(t.covered), 100.0 * t.decide_s.size() / t.rows,
          median(t.decide_s), median(t.processes));
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ptune_verdict_sim: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
