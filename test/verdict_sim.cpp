// ptune_verdict_sim: ptune's own scheduler (measure::compare, its stopping rule and its allocation
// of processes) run on simulated rows with a fake clock, to measure what its verdicts promise:
// how often an A/A row is called faster or slower, how often the interval covers the true
// speedup, and how long a real change takes to decide. Each simulated process has a speed of its
// own (a log-normal random effect drawn when it starts, `--process-pct` one standard deviation)
// and each window its own noise (`--window-pct`); starting a process costs `--start-s` of the
// budget on each side. scripts/bench/verdict-sim --processes runs it; docs/statistics.md has its
// tables.
//
//   ptune_verdict_sim [--rows N] [--budget-s S] [--start-s S] [--window-s S] [--processes K]
//                     [--max-processes M] [--seed N] [--cases grid|CHANGE:PROCESS:WINDOW,...]

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/stats.hpp"
#include "measure/process_group.hpp"
#include "measure/schedule.hpp"

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

/// One simulated row of `c`: B faster than A by c.change_pct.
void run_row(const Settings& s, const Case& c, uint64_t seed, Tally& t) {
  World w;
  w.rng.seed(seed);
  const double step_ms = 1000.0 * s.window_s / static_cast<double>(s.steps);
  const double a_log = std::log(step_ms), b_log = a_log - std::log1p(c.change_pct / 100.0);
  const double p_sd = log_sd(c.process_pct), w_sd = log_sd(c.window_pct);
  ptune::measure::WindowPlan plan;
  plan.deadline = Deadline(1000.0 * s.budget_s, [&w] { return w.now; });
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
  try {
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string k = argv[i], v = argv[i + 1];
      if (k == "--rows")
        s.rows = std::stoi(v);
      else if (k == "--budget-s")
        s.budget_s = std::stod(v);
      else if (k == "--start-s")
        s.start_s = std::stod(v);
      else if (k == "--window-s")
        s.window_s = std::stod(v);
      else if (k == "--processes")
        s.processes = std::stoll(v);
      else if (k == "--max-processes")
        s.max_processes = std::stoll(v);
      else if (k == "--seed")
        s.seed = std::stoull(v);
      else if (k == "--cases")
        cases = v;
      else
        throw std::invalid_argument("unknown option " + k);
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
