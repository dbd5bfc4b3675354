#pragma once
/// Measures one configuration: warm-up steps untimed, then `repeats` x `steps` timed steps,
/// with the wait for data, the copy to the device and the compute timed separately (host
/// clocks on the CPU, CUDA events on a GPU); the device is synchronized at the end of every
/// repeat, before the clock read that ends it.

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
  std::optional<double> gpu_busy_pct;     // merged kernel time / wall time over a few profiled
                                          // steps after the timed ones; none on the CPU
  std::string trace_path;                 // Chrome trace written (measure.profile), or ""
  std::vector<std::string> notes;         // what did not go as configured (e.g. a graph fallback)
};

/// Progress callback: (phase "warmup"/"measure", step done, steps in all).
using Progress = std::function<void(const std::string&, int64_t, int64_t)>;

/// Runs the row's mode (train | data | synthetic) on the resolved device. In a data-parallel
/// run (dist::process_group names a world) every rank measures its shard; ms/step is the
/// slowest rank's, the shares and the loss are the ranks' means, the peak memory their maximum.
/// After the timed steps, on a CUDA device (always) or with measure.profile (then writing
/// the Chrome trace to `trace_path`, on rank 0), measure.profile_steps more steps are recorded
/// with the profiler: the source of gpu_busy_pct.
/// Throws ConfigError for options the device cannot honour, DataError for bad data,
/// std::runtime_error when a collective fails.
Measurement measure(const config::ExperimentConfig& cfg, const Progress& progress = {},
                    const std::string& trace_path = "");

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
