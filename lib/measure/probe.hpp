#pragma once
/// Measures one configuration: warm-up steps untimed, then `repeats` x `steps` timed steps,
/// with the wait for data, the copy to the device and the compute timed separately (host
/// clocks on the CPU, CUDA events on a GPU); the device is synchronized at the end of every
/// repeat, before the clock read that ends it. The profiler never runs in measure(): profile()
/// records a row separately, after the timed steps of every row (CUPTI, once attached, stays
/// attached and would slow every later timed step).

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace ptune::measure {

/// What a measured row reports.
struct Measurement {
  int64_t batch_size = 0;            // per rank (process)
  int64_t steps = 0;                 // timed steps per repeat
  double ms_per_step = 0;            // median over repeats (of the slowest rank's ms/step)
  double samples_per_s = 0;          // world_size * batch_size / ms_per_step
  std::vector<double> repeat_ms;     // ms/step of each repeat
  double spread_pct = 0;             // (max - min) / median over repeats, in %
  // The step split, % of step time. On the CPU from host clocks; on a GPU from CUDA events on
  // the compute stream (the host does not wait for the device inside a step):
  double data_wait_pct = 0;          // CPU: host blocked waiting for a batch; GPU: the device
                                     // idle between steps, waiting for the host (the batch)
  double h2d_pct = 0;                // host-to-device copy (and uint8 normalize); GPU: the
                                     // compute stream waiting for the copy stream + normalize
  double compute_pct = 0;            // forward, backward, update
  std::optional<double> loss;        // loss after the measured steps (train, synthetic)
  std::optional<int64_t> peak_mem_bytes;  // CUDA caching allocator peak; none on the CPU
  std::optional<int64_t> device_mem_bytes;  // the GPU's total memory; none on the CPU
  std::optional<double> gpu_busy_pct;     // profile(): merged kernel time per profiled step over
                                          // the timed ms/step; none on the CPU or unprofiled
  std::string trace_path;                 // Chrome trace written by profile(), or ""
  std::string eager_fallback;             // optim.cuda_graphs: why the capture failed and every
                                          // step ran eagerly; "" otherwise
  std::vector<std::string> notes;         // what did not go as configured (e.g. a graph fallback)
};

/// Progress callback: (phase "warmup"/"measure", step done, steps in all).
using Progress = std::function<void(const std::string&, int64_t, int64_t)>;

/// Runs the row's mode (train | data | synthetic) on the resolved device, with no profiler. In
/// a data-parallel run (dist::process_group names a world) every rank measures its shard;
/// ms/step is the slowest rank's, the shares and the loss are the ranks' means, the peak memory
/// their maximum. Data rows time the loader, the copy and (uint8 batches) the conversion on the
/// device: the input as the model would get it. measure.warmup_steps is raised to what the
/// config needs (Trainer::warmup_steps_needed; a note says so), so that a CUDA-graph capture
/// or cuDNN's autotuning never lands in the timed steps.
/// Throws ConfigError for options the device cannot honour, DataError for bad data,
/// std::runtime_error when a collective fails.
Measurement measure(const config::ExperimentConfig& cfg, const Progress& progress = {});

/// What profile() adds to a measured row.
struct ProfileResult {
  std::optional<double> gpu_busy_pct;  // CUDA: merged kernel time per recorded step over
                                       // `timed_ms_per_step`, at most 100; none on the CPU
  std::string trace_path;              // this rank's Chrome trace, or "" when none was written
};

/// Where profile() writes a row's trace, and what the trace says about the row.
struct TraceTarget {
  std::string folder;       // the row's folder (every rank writes its trace there); "": no trace
  std::string row;          // the row's name ("ptune" metadata)
  nlohmann::ordered_json changes = nlohmann::ordered_json::object();  // the row's overrides
};

/// The trace's "ptune" metadata (JSON text), which tells ptune's traces from others: {"version",
/// "experiment", "row", "changes", "mode", "device" (the device the rank ran on, e.g. "cuda:0"),
/// "batch_size" (per rank), "profile_steps", "warmup_steps"}.
std::string trace_identity_json(const config::ExperimentConfig& cfg, const TraceTarget& target,
                                const std::string& device);

/// Profiles a row: builds it afresh, runs its warm-up, then records measure.profile_steps
/// steps with the profiler (kernels on a GPU), each inside a "ProfilerStep#<n>" range with
/// the ranges of measure/ranges.hpp in it. GPU busy is the recorded steps' merged kernel time
/// per step over `timed_ms_per_step` (the row's measured ms/step): kernel durations come from
/// the device and are not slowed by recording, while the recorded steps' wall time is.
/// With measure.profile on and a `target.folder`, every rank writes its Chrome trace there as
/// trace_file_name() names it, with "distributedInfo" in a data-parallel run and "ptune"
/// (trace_identity_json) as metadata; the traces an earlier run left in the folder (files
/// named so, and the trace.json of older ptune versions) are removed first, by the first rank
/// of each machine, before any rank records. Run it after every timed measurement of the process: CUPTI stays
/// attached. Throws as measure(), and std::runtime_error when the folder cannot be written.
ProfileResult profile(const config::ExperimentConfig& cfg, double timed_ms_per_step,
                      const TraceTarget& target = {}, const Progress& progress = {});

/// The warm-up steps a row runs: measure.warmup_steps, raised to
/// engine::Trainer::warmup_steps_needed (data rows excepted); when raised, `note` (if given)
/// says "measure.warmup_steps raised from N to M: <why>, which must not be timed".
int64_t warmup_steps(const config::ExperimentConfig& cfg, std::string* note = nullptr);

/// Whether a measured row gets profile(): on a CUDA device (GPU busy) or with measure.profile.
bool wants_profile(const config::ExperimentConfig& cfg);

/// Trains a fresh model (seeded as every row) for `steps` steps and returns the loss of each
/// step (in a data-parallel run, the mean over ranks). Used to compare convergence.
std::vector<double> loss_curve(const config::ExperimentConfig& cfg, int64_t steps);

/// Compares a loss curve with a reference one over the last quarter of the shorter: the
/// verdict "unchanged" when their mean losses there differ by at most `tolerance` (relative),
/// else "altered"; `text` says it with the numbers.
struct ConvergenceVerdict {
  bool altered = false;
  double mean_loss = 0, reference_mean_loss = 0;
  std::string text;
};
ConvergenceVerdict compare_convergence(const std::vector<double>& curve, const std::vector<double>& reference,
                                       double tolerance = 0.10);

}  // namespace ptune::measure
