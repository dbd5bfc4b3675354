#pragma once
/// What a timed row reports (Measurement), the figures made from its windows, and the Measurement
/// as JSON and back (a child process sends its result to the parent). No LibTorch.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/stats.hpp"
#include "system/load.hpp"

namespace ptune::measure {

/// What a measured row reports.
struct Measurement {
  int64_t batch_size = 0;            // per rank (process)
  int64_t steps = 0;                 // timed steps per window
  double ms_per_step = 0;            // geometric mean over the windows (of the slowest rank's ms/step)
  double samples_per_s = 0;          // world_size * batch_size / ms_per_step
  stats::Interval samples_per_s_ci;  // samples/s with its 95% t-interval over the windows
  std::vector<double> repeat_ms;     // ms/step of each timed window kept, in order
  std::vector<int> repeat_process;   // the process (0, 1, ...) each of those windows ran in, where
                                     // they ran in several (ProcessGroup); empty: all in one
  int64_t transient_windows = 0;     // windows (pairs, for a compared row) timed before those and
                                     // left out as the start-up transient (notes say so)
  int64_t short_windows = 0;         // of the windows kept, those the row's budget ended before
                                     // measure.steps steps (short_windows_note says so)
  double spread_pct = 0;             // (max - min) / median over the windows, in %
  system::LoadReport load;           // what else ran while the windows were timed
  // The step split, % of step time (none: not measured, as in a results file of another
  // program). On the CPU from host clocks; on a GPU from CUDA events on the compute stream (the
  // host does not wait for the device inside a step):
  struct StepSplit {
    double data_wait_pct = 0;  // CPU: host blocked waiting for a batch; GPU: the device idle
                               // between steps, waiting for the host (the batch)
    double h2d_pct = 0;        // host-to-device copy (and uint8 normalize); GPU: the compute
                               // stream waiting for the copy stream + normalize
    double compute_pct = 0;    // forward, backward, update
  };
  std::optional<StepSplit> split;
  std::optional<double> loss;               // loss after the measured steps (train, synthetic)
  std::optional<int64_t> peak_mem_bytes;    // CUDA caching allocator peak; none on the CPU
  std::optional<int64_t> device_mem_bytes;  // the GPU's total memory; none on the CPU
  std::optional<double> gpu_busy_pct;       // bench::profile(): merged kernel time per profiled step over
                                            // the timed ms/step; none on the CPU or unprofiled
  std::string trace_path;                   // Chrome trace written by bench::profile(), or ""
  std::string eager_fallback;               // optim.cuda_graphs: why the capture failed and every
                                            // step ran eagerly; "" otherwise
  std::vector<std::string> notes;           // what did not go as configured (e.g. a graph fallback)
  // How far from the limit (train and synthetic rows; none on a data row):
  std::optional<double> model_flops_per_sample;  // forward + backward FLOPs of one sample (models/flops.hpp)
  std::optional<double> peak_flops_per_s;        // the machine's peak in the row's precision, all ranks
                                                 // (bench/peak.hpp); none when it could not be had
  std::string peak_precision;                    // fp32 | tf32 | bf16 | fp16
  std::string peak_source;                       // where the peak came from, one line
  bool peak_under_load = false;                  // the peak was calibrated under competing load: no
                                                 // ceiling, so the row's % peak is left out
  // The operating system's share (CPU rows): minor page faults per step (pages the allocator
  // handed back to the kernel and took again), and the time the process spent in the kernel per
  // step, in % of the step's wall time (all its threads' system time: it can pass 100).
  std::optional<double> page_faults_per_step;
  std::optional<double> system_time_pct;
  // A program row (config's `program`), seen from outside its processes: the cores its process
  // tree kept busy over the timed windows (CPU time / wall time), and its resident memory at the
  // highest (the sum of each of its processes' own peak).
  std::optional<double> cpu_cores_busy;
  std::optional<int64_t> peak_rss_bytes;
  // With measure.profile, a program row's trace (proc::profile_program): `ptune analyze`'s
  // verdict on it, one line; "" unprofiled.
  std::string trace_verdict;
};

/// Progress callback: (phase "warmup"/"measure", step done, steps in all). While measuring,
/// "steps in all" is the planned minimum; measuring may go on beyond it (the interval is not
/// tight yet), and then the count grows past it.
using Progress = std::function<void(const std::string&, int64_t, int64_t)>;

/// Sets `m`'s window figures from `window_ms` (ms/step per window) and the processes they ran in
/// (`process`, one per window; empty: one process): repeat_ms, repeat_process, the geometric
/// mean ms/step (over several processes: of the process means) and samples/s (`world` ranks of
/// m.batch_size) with its 95% interval (mean_interval), the spread, and a note naming outlying
/// windows. Throws std::invalid_argument when `process` is neither empty nor one per window.
void set_windows(Measurement& m, const std::vector<double>& window_ms, int64_t world,
                 const std::vector<int>& process = {});

/// The note of a row `short_count` of whose `kept` windows ran fewer than `steps` (measure.steps)
/// steps, the budget having ended them. Throws nothing.
std::string short_windows_note(int64_t short_count, size_t kept, int64_t steps);

/// The speedup of `b` over `a` in samples/s from their windows measured apart (two runs, two
/// trials): stats::welch_speedup on time per sample, or over processes where a side ran in
/// several (speedup_interval), at speedup_level(either was measured under competing load).
/// Throws nothing.
stats::Interval speedup_between(const Measurement& a, const Measurement& b);

/// A Measurement as JSON and back, whole but for the load (which the parent observes itself): a
/// child process sends its result to the parent. One list of members (measurement.cpp) drives
/// both directions, each member written and read by its type. measurement_from_json throws
/// std::invalid_argument for a document without one of them, nlohmann's errors for a value of
/// another type.
nlohmann::json measurement_json(const Measurement& m);
Measurement measurement_from_json(const nlohmann::json& j);

}  // namespace ptune::measure
