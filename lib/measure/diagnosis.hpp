#pragma once
/// A one-line verdict per measured row: where the step time goes and the next move.

#include <string>

#include "config/config.hpp"
#include "measure/probe.hpp"
#include "measure/rules.hpp"

namespace ptune::measure {

/// Thresholds (percent of step time) for the verdicts; the defaults are the rule table's
/// (measure/rules.hpp), which `ptune analyze` shares.
struct DiagnosisThresholds {
  double input_bound_pct = rule(RuleId::kInputBound).threshold;  // data wait at or above this: input-bound
  double copy_bound_pct = rule(RuleId::kCopyBound).threshold;    // host-to-device copy at or above this: copy-bound
  double launch_bound_busy_pct = rule(RuleId::kLaunchBound).threshold;  // GPU busy below this (and not
                                                                       // input/copy-bound): launch-bound
  double low_memory_pct = rule(RuleId::kLowMemory).threshold;  // peak device memory below this share:
                                                               // room for a bigger batch
};

/// The verdict for a measurement taken with `cfg`, e.g.
/// "input-bound (62% waiting for data): raise loader.num_workers (now 0)".
std::string diagnose(const Measurement& m, const config::ExperimentConfig& cfg,
                     const DiagnosisThresholds& t = {});

}  // namespace ptune::measure
