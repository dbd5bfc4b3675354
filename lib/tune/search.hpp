#pragma once
/// What the batch-size finder and the greedy search share (tune/ only): the config a trial
/// measures, when to stop before the next trial, the hooks a search calls out to, and the number
/// formats of their notes.

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "config/config.hpp"
#include "core/numbers.hpp"
#include "core/stats.hpp"
#include "runtime/cuda_support.hpp"
#include "core/table.hpp"
#include "tune/tuner.hpp"

namespace ptune::tune {

using numbers::fmt;  // `v` printed with a printf format of one double

/// The config a trial measures: `cfg` without its sweep, with at least `min_repeats` repeats.
config::ExperimentConfig measured(config::ExperimentConfig cfg, int64_t min_repeats);

/// "[-1.2%, +3.4%]": a speedup's interval as gains; "" without one.
std::string interval_text(const stats::Interval& i);

/// Budget and interruption: the reason to stop before the next trial, if any.
std::optional<StopReason> stop_before_next(const ClockFn& clock, double start, double budget_s,
                                           const std::atomic<bool>* interrupted);

/// What a search calls out to: its options' hooks, or the real ones where unset.
struct Hooks {
  MeasureFn measure;
  ClockFn clock;
  std::function<void()> on_oom;
};

template <class Options>
Hooks hooks_of(const Options& o) {
  return {o.measure ? o.measure : default_measure(), o.clock ? o.clock : default_clock(),
          o.on_oom ? o.on_oom : [] { runtime::cuda::empty_cache(); }};
}

}  // namespace ptune::tune
