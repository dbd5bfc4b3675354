#include "tune/search.hpp"

#include "report/figures.hpp"

#include <algorithm>
#include <cstdio>

namespace ptune::tune {

/// The config a trial measures: `cfg` without its sweep, with at least `min_repeats` repeats.
config::ExperimentConfig measured(config::ExperimentConfig cfg, int64_t min_repeats) {
  cfg.sweep.clear();
  cfg.measure.repeats = std::max(cfg.measure.repeats, min_repeats);
  return cfg;
}

/// "[-1.2%, +3.4%]": a speedup's interval as gains; "" without one.
std::string interval_text(const stats::Interval& i) {
  if (!i.valid()) return "";
  if (i.hi > report::kUnboundedFactor * i.point || i.lo * report::kUnboundedFactor < i.point)
    return "[unbounded]";
  return fmt("[%+.1f%%, ", 100 * (i.lo - 1)) + fmt("%+.1f%%]", 100 * (i.hi - 1));
}

/// Budget and interruption: the reason to stop before the next trial, if any.
std::optional<StopReason> stop_before_next(const ClockFn& clock, double start, double budget_s,
                                           const std::atomic<bool>* interrupted) {
  if (interrupted && interrupted->load()) return StopReason{StopReason::Kind::kInterrupted};
  if (budget_s > 0 && clock() - start >= budget_s) return StopReason{StopReason::Kind::kBudget};
  return std::nullopt;
}

}  // namespace ptune::tune
