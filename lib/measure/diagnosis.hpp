#pragma once
/// A one-line verdict per measured row: where the step time goes and the next move.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.hpp"
#include "system/cpu_info.hpp"
#include "measure/measurement.hpp"
#include "measure/rules.hpp"

namespace ptune::measure {

/// Thresholds (percent of step time) for the verdicts; the defaults are the rule table's
/// (measure/rules.hpp), which `ptune analyze` shares.
struct DiagnosisThresholds {
  double input_bound_pct = rule(RuleId::kInputBound).threshold;  // data wait at or above this: input-bound
  double copy_bound_pct =
      rule(RuleId::kCopyBound).threshold;  // host-to-device copy at or above this: copy-bound
  double launch_bound_busy_pct = rule(RuleId::kLaunchBound).threshold;  // GPU busy below this (and not
                                                                        // input/copy-bound): launch-bound
  double low_memory_pct = rule(RuleId::kLowMemory).threshold;  // peak device memory below this share:
                                                               // room for a bigger batch
};

/// An optimization an earlier row of the sweep measured: its key, value, row and verdict.
struct Tried {
  std::string key;               // e.g. "optim.amp"
  nlohmann::ordered_json value;  // what the row set it to
  size_t index = 0;              // the row's index
  std::string row;               // the row's name
  std::string verdict;           // faster | slower | within noise | undecided
  double speedup = 1.0;          // its speedup over the row before it
  bool trial = false;            // a trial of `ptune tune` (named without an index), not a sweep row
};

/// The verdict for a measurement of ptune's own pipeline taken with `cfg`, e.g.
/// "input-bound (62% waiting for data): raise loader.num_workers (now 0)". A move that `tried`
/// shows measured as within noise or slower on this machine is not recommended: the verdict
/// names that row and goes on to the next move of the rule ("optim.amp measured within noise
/// here (row 7 'bf16 autocast'); try model.channels_last"). On the CPU, optim.amp (bf16) is
/// advised only where `cpu` has native bf16 arithmetic that oneDNN uses (CpuInfo::bf16_native:
/// not where ONEDNN_MAX_CPU_ISA caps it), and the verdict says why not otherwise. Throws nothing.
std::string diagnose(const Measurement& m, const config::ExperimentConfig& cfg,
                     const std::vector<Tried>& tried, const DiagnosisThresholds& t,
                     const system::CpuInfo& cpu);

/// diagnose() on the CPU that system::read_cpu_facts() describes (/proc/cpuinfo and the caps in
/// the environment), or, with `cpu_bf16`, on one whose bf16 is native or not (for tests).
std::string diagnose(const Measurement& m, const config::ExperimentConfig& cfg,
                     const std::vector<Tried>& tried = {}, const DiagnosisThresholds& t = {},
                     std::optional<bool> cpu_bf16 = std::nullopt);

/// The verdict for a row of the user's own program (config's `program`): `ptune analyze`'s on the
/// trace it wrote (measure.profile, Measurement::trace_verdict), with the allocator rule's finding
/// from outside where it fires (a trace does not show page faults); or else from outside its
/// processes: the allocator rule, its processes' GPU busy share (NVML) where known, or how many of
/// the cores it may use its process tree kept busy, its system time and its memory. Throws nothing.
std::string diagnose_program(const Measurement& m, const config::ExperimentConfig& cfg,
                             const std::vector<Tried>& tried = {}, const DiagnosisThresholds& t = {});

/// The peak rule's thresholds, % of the machine's peak in the row's precision (bench/peak.hpp).
inline constexpr double kNearPeakPct = 60;     // at or above: the next gains from settings are small
inline constexpr double kFarFromPeakPct = 10;  // below: far from the limit

/// The peak rule, applied after diagnose(): a compute-bound verdict (`diagnosis` starts with
/// "compute-bound") at or above kNearPeakPct of the peak gets "; at 72% of the bf16 peak the
/// next gains from settings are small ...", one below kFarFromPeakPct gets what holds it back;
/// any other verdict, or no `pct_of_peak`, is returned as it is. `pct_of_peak` is the row's
/// printed figure (report::pct_of_peak). Throws nothing.
std::string with_peak(const std::string& diagnosis, std::optional<double> pct_of_peak,
                      const std::string& precision);

}  // namespace ptune::measure
