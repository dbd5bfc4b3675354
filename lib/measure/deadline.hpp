#pragma once
/// A row's time budget on the wall clock (measure.max_s).

#include <cstdint>
#include <functional>

namespace ptune::measure {

/// A row's time budget on the wall clock (measure.max_s), counted from the row's start: building
/// its pipeline, its warm-up and the windows of both sides of a comparison all spend it. Measuring
/// stops between steps where the next step would end past it. A copy keeps the same start.
class Deadline {
 public:
  /// Milliseconds on a monotonic clock.
  using Clock = std::function<double()>;
  /// No limit (on a steady clock: elapsed_ms() still counts).
  Deadline();
  /// `budget_ms` from now; 0 or less: automatic (kAutoBudgetMs at most; settle() then lowers it).
  /// `clock` is a steady clock unless one is given (tests give a fake one).
  explicit Deadline(double budget_ms, Clock clock = {});
  /// Answers alike on every rank of a data-parallel run: `max_over_ranks` returns the largest of
  /// the ranks' values (a collective); the deadline is then the group's, as seen by the rank with
  /// the least time left. Every question below becomes a collective.
  void agree_with(std::function<double(double)> max_over_ranks);
  /// A deadline `elapsed_ms` into a limit of `limit_ms` from the row's start (kNone: no limit), whose
  /// budget was configured as `budget_s` (0: automatic, already settled): a row's child process
  /// continues its parent's deadline with it.
  static Deadline continuing(double limit_ms, double elapsed_ms, double budget_s);
  /// Whether there is a limit at all.
  bool limited() const { return limit_ms_ < kNone; }
  /// Whether `next_ms` more milliseconds of work end by the deadline. Throws what the collective
  /// throws.
  bool fits(double next_ms) const;
  /// How many steps of `step_ms` fit in the time left: between 1 and `max_steps`. Throws what the
  /// collective throws.
  int64_t steps_that_fit(double step_ms, int64_t max_steps) const;
  /// A copy for the first of `windows` windows that must share the time left: it ends once
  /// kShareFraction of the time left over `windows` is spent (so the step counts of
  /// steps_that_fit shrink to fit). Itself where `windows` is 1 or less, or there is no limit.
  Deadline share(int64_t windows) const;
  /// An automatic budget, once the row's first measure.repeats windows (pairs) are timed: at most
  /// kAutoBudgetFactor times the row's time so far (and kAutoBudgetMs in all). Only the first call
  /// counts; a fixed budget is left as it is.
  void settle();
  /// The most an automatic budget may grow to (measure.auto_max_s), ms from the row's start.
  void set_auto_most(double ms) { auto_most_ms_ = ms; }
  double auto_most_ms() const { return auto_most_ms_; }
  /// Raises a settled automatic budget to `limit_ms` from the row's start, where that is within
  /// its most (set_auto_most): what deciding the row needs, at the spread measured so far. A fixed
  /// budget, one not settled yet, or one agreed across ranks (each rank measures its own spread)
  /// is left as it is. Returns whether the limit rose.
  bool grow_to(double limit_ms);
  /// Whether grow_to() can raise the limit at all.
  bool can_grow() const { return automatic_ && settled_ && !max_over_ranks_; }
  /// Milliseconds since the row's start, on this rank.
  double elapsed_ms() const;
  /// The budget as configured, seconds (0: automatic).
  double budget_s() const { return budget_s_; }
  /// The limit now, ms from the row's start (kAutoBudgetMs for an automatic one not settled yet).
  double limit_ms() const { return limit_ms_; }

  static constexpr double kAutoBudgetMs = 30000;  // measure.max_s 0: never more than this
  static constexpr double kAutoBudgetFactor = 4;  // ... nor more than 4x the first windows' time
  static constexpr double kNone = 1e300;
  /// share(): what the windows get of the time left; the rest is for the time between them
  /// (switching the sides, starting the next window).
  static constexpr double kShareFraction = 0.9;

 private:
  double left_ms() const;  // on this rank
  Clock clock_;
  double start_ms_ = 0, limit_ms_ = kNone, budget_s_ = 0;
  double auto_most_ms_ = kAutoBudgetMs;
  bool automatic_ = false, settled_ = false;
  std::function<double(double)> max_over_ranks_;
};

}  // namespace ptune::measure
