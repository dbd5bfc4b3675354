#pragma once
/// A row's profiler trace: recorded after every timed window of the process.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.hpp"
#include "measure/measurement.hpp"
#include "measure/side_kind.hpp"
#include "system/load.hpp"

namespace ptune::bench {

/// What profile() adds to a measured row.
struct ProfileResult {
  std::optional<double> gpu_busy_pct;  // CUDA: merged kernel time per recorded step over
                                       // `timed_ms_per_step`, at most 100; none on the CPU
  std::string trace_path;              // this rank's Chrome trace, or "" when none was written
};

/// Where profile() writes a row's trace, and what the trace says about the row.
using TraceTarget = measure::TraceTarget;

/// The trace's "ptune" metadata (JSON text), which tells ptune's traces from others: {"version",
/// "experiment", "row", "changes", "mode", "device" (the device the rank ran on, e.g. "cuda:0"),
/// "batch_size" (per rank), "profile_steps", "warmup_steps"}, and with `load` "load":
/// {"under_load", "summary"}, the load seen while the steps were recorded.
std::string trace_identity_json(const config::ExperimentConfig& cfg, const TraceTarget& target,
                                const std::string& device, const system::LoadReport* load = nullptr);

/// Profiles a row: builds it afresh, runs its warm-up, then records measure.profile_steps
/// steps with the profiler (kernels on a GPU), each inside a "ProfilerStep#<n>" range with
/// the ranges of core/ranges.hpp in it. GPU busy is the recorded steps' merged kernel time
/// per step over `timed_ms_per_step` (the row's measured ms/step): kernel durations come from
/// the device and are not slowed by recording, while the recorded steps' wall time is.
/// With measure.profile on and a `target.folder`, every rank writes its Chrome trace there as
/// trace_file_name() names it, with "distributedInfo" in a data-parallel run and "ptune"
/// (trace_identity_json) as metadata; the traces an earlier run left in the folder (files
/// named so, and the trace.json of older ptune versions) are removed first, by the first rank
/// of each machine, before any rank records. Run it after every timed measurement of the process: CUPTI stays
/// attached. Throws as Bench's constructor, and std::runtime_error when the folder cannot be written.
ProfileResult profile(const config::ExperimentConfig& cfg, double timed_ms_per_step,
                      const TraceTarget& target = {}, const measure::Progress& progress = {});

}  // namespace ptune::bench
