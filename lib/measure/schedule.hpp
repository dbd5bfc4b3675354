#pragma once
/// How long a row is timed and how two sides are compared: the window plan, the interleaved
/// comparison (compare), a side timed alone (measure_alone) and the notes their ends give. No
/// LibTorch: tested with fake sides.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "core/stats.hpp"
#include "measure/allocation.hpp"
#include "measure/deadline.hpp"
#include "measure/measurement.hpp"
#include "measure/side.hpp"

namespace ptune::measure {

/// How long a row is measured (from its config's measure section).
struct WindowPlan {
  int64_t min_pairs = 3;      // measure.repeats: windows of each side, after the start-up
                              // transient, before any decision
  Deadline deadline;          // measure.max_s, from the row's start
  stats::NoiseRule rule;      // measure.target_ci_pct, measure.noise_pct
  int64_t max_pairs = 1000;   // a hard stop for very short windows
  int64_t processes = 0;      // sides in child processes: this many a side (in_processes())
  int64_t max_processes = 0;  // ... and at most this many (measure.max_processes; add_processes)
  /// Asked at every look of compare() (after each pair from min_pairs on) until it says yes:
  /// whether the row has run under competing load so far. From then on the interval is read at
  /// kSpeedupLevelUnderLoad, and faster or slower no longer ends the row early: it is read
  /// once, when the budget is spent (within noise still ends it). Unset: never under load.
  std::function<bool()> under_load;
  /// Sides in processes whose count may grow (measure.max_processes): starts one more process of
  /// each side (built, warmed up, paused, added to its side's turns) and returns the wall time that
  /// took (ms); none where no more can start (the bound, memory). Asked at a look where
  /// more_processes_narrow() says one more process a side narrows the interval more than the pairs
  /// its start would time. Unset: the processes stay as they started.
  std::function<std::optional<double>()> add_processes;
  double process_start_ms = 0;  // what starting one process of each side cost at the row's start
};

/// The plan for `cfg`; its deadline starts now (make it at the row's start, before the pipeline
/// is built): measure.max_s > 0 is the budget; 0 (auto) is at most 30 s, and at most 4x what
/// the row took to time its first measure.repeats windows (pairs). In a data-parallel run the
/// deadline is agreed across the ranks through `max_over_ranks` (Deadline::agree_with;
/// bench::rank_max gives it): make the plan on every rank.
WindowPlan window_plan(const config::ExperimentConfig& cfg, std::function<double(double)> max_over_ranks);

/// The thresholds `cfg`'s verdicts use (measure.target_ci_pct, measure.noise_pct). Throws nothing.
stats::NoiseRule noise_rule(const config::ExperimentConfig& cfg);

/// `plan` for sides in `processes` child processes each (measure.processes): min_pairs at least
/// two windows for each process. Throws nothing.
WindowPlan in_processes(WindowPlan plan, int64_t processes);

/// Why timing a row stopped: a verdict (or a tight enough interval alone) was reached, the
/// row's budget was spent, or WindowPlan::max_pairs.
enum class StopRule { kDecided, kBudget, kMaxPairs };

/// A speedup measured interleaved.
struct Comparison {
  std::vector<double> a_ms, b_ms;         // the pairs' windows (ms/step), the transient left out
  std::vector<int> a_process, b_process;  // the process each of those ran in, for sides timed in
                                          // several (Side::last_process); else empty
  int64_t transient = 0;                  // pairs left out at the front: the start-up transient
                                          // (transient_pairs); each side's windows timed in the
                                          // comparison are [transient, transient + b_ms.size())
  stats::Interval speedup;                // of B over A in samples/s, at speedup_level(under_load)
  stats::Verdict verdict = stats::Verdict::kUndecided;
  bool under_load = false;              // plan.under_load said so at a look (it then stays so)
  StopRule stop = StopRule::kMaxPairs;  // why measuring stopped
  bool unpaired = false;                // the budget ran out between a pair's two windows: the first
                                        // was timed (the last of its side's) and left out
  double pair_ms = 0;                   // wall time of a pair, on average over every pair timed
  int64_t processes_added = 0;          // processes started on each side while timing (add_processes)
  bool no_more_processes = false;       // add_processes said none could start
  double process_start_ms = 0;          // what starting one process of each side cost, last seen
  double start_ms = 0;                  // the row's time before its first window (its sides' start)
  bool budget_grown = false;            // an automatic budget grew to what deciding needed (grow_to)
  bool budget_hope = false;  // ... to its most, at the optimistic end of the spread (allocation.hpp)
  double limit_ms = 0;       // ... to this, ms from the row's start
};

/// The note of a row left undecided by its budget on a quiet machine: how much one pair's
/// speedup varied, and about how many pairs (and how long) that spread would need for a verdict
/// (pairs_to_decide), so that the user can raise measure.max_s or steady the machine. For sides
/// in processes (however the row stopped, under load too): the processes a side and the time a
/// verdict would need at the spread measured (need_to_decide; its pair and start costs from
/// `c`), or that the change is too close to the noise floor for any. Empty where it does not
/// apply (decided, fewer than 3 pairs kept). Throws nothing.
std::string undecided_note(const Comparison& c, const WindowPlan& plan);

/// What a sweep's row can decide, from a comparison's spread: the smallest change it can call
/// faster or slower in its budget (measure.max_s; automatic: measure.auto_max_s) less what its
/// sides took to start, and one line saying so with the spread it rests on; none where the
/// comparison gives no spread. Throws nothing.
struct Decidable {
  double change_pct = 0;
  std::string text;  // "a change of about 4.1% in 60 s a row (...)"
};
std::optional<Decidable> decidable(const Comparison& c, const config::ExperimentConfig& cfg);

/// Times `a` and `b` interleaved, in blocks of two pairs, A B then B A or B A then A B, each
/// block's order drawn from a fixed-seed generator (kPairOrderSeed: the same for every row and
/// run). Within a block a linear drift cancels, as in ABBA; and no periodic disturbance (the
/// scheduler sharing the cores with another program in a rhythm of a few windows) can line up
/// with one side, as it can with a fixed ABBA ABBA order. The first pairs that transient_pairs()
/// calls the start-up transient are left out of every figure (recomputed at every pair). Until
/// at least plan.min_pairs pairs after the transient and then until plan.deadline leaves no time
/// for another pair (one step of each side, at their last ms/step), or earlier at a look (after
/// each pair) that decides: within noise; or faster or slower when the interval at
/// kEarlyStopLevel says so too, never under load (WindowPlan::under_load). The first pair is
/// always timed, whatever the deadline; a pair's second window only when one step of it fits
/// (else the first is left out: Comparison::unpaired). The verdict is read from the interval at
/// speedup_level(under_load) of the pairs kept.
/// `on_pair` (if set) is called after every pair with the comparison so far (progress; it may
/// throw to stop). Throws what the sides throw.
Comparison compare(Side& a, Side& b, const WindowPlan& plan,
                   const std::function<void(const Comparison&)>& on_pair = {});

inline constexpr uint32_t kPairOrderSeed = 20261125;

/// What measure_alone() timed.
struct AloneRun {
  std::vector<double> ms;    // the windows' ms/step, the transient left out
  std::vector<int> process;  // the process each ran in (Side::last_process); empty: one process
  int64_t transient = 0;     // windows left out at the front (transient_end)
  StopRule stop = StopRule::kMaxPairs;
};

/// Times `s` alone until at least plan.min_pairs windows after the start-up transient and its 95%
/// interval's half-width is at most plan.rule.target_pct, or plan.deadline leaves no time for
/// another step (the first window is always timed).
AloneRun measure_alone(Side& s, const WindowPlan& plan,
                       const std::function<void(const std::vector<double>&)>& on_window = {});

/// The notes a timed row gets from how its measuring ended: the start-up transient left out
/// (`transient` windows, or pairs when `paired`), and a row that ran out of its time (`stop`
/// kBudget) with fewer than plan.min_pairs windows (pairs) kept. Throws nothing.
std::vector<std::string> run_notes(int64_t transient, size_t kept, StopRule stop, const WindowPlan& plan,
                                   bool paired);

}  // namespace ptune::measure
