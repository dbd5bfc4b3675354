#pragma once
/// Profiler traces of a few training steps (LibTorch's Kineto profiler): a Chrome-trace JSON
/// that Perfetto and TensorBoard's profiler view open, and the GPU-busy figure derived from the
/// recorded kernels (merged kernel time over wall time, as the PyTorch profiler's TensorBoard
/// plugin defines GPU utilization).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ptune::measure {

/// The fraction of [begin, end) covered by the union of the intervals (start, end) (same time
/// unit), in [0, 1]. Overlapping kernels (several streams) count once.
double busy_fraction(std::vector<std::pair<int64_t, int64_t>> intervals, int64_t begin, int64_t end);

/// What a finished recording tells.
struct TraceSummary {
  std::optional<double> gpu_busy_pct;  // merged kernel time / recorded wall time (0 without
                                       // kernels); none without CUDA
  double kernel_ms = 0;                // merged kernel time (several streams counted once)
  int64_t cpu_ops = 0;                 // host operators recorded
};

/// Initializes the profiler's CUDA tracing (CUPTI) with an empty session, once per process, as
/// PyTorch does before capturing graphs that will be profiled (CUPTI set up after a capture can
/// miss or break the graph's kernels). It stays attached afterwards, so call it only where
/// nothing timed follows. Best effort; never throws.
void prepare_profiler_for_cuda_graphs();

/// Records host operators (and CUDA kernels when `cuda`) from construction to finish().
/// One recording at a time per process.
class TraceRecorder {
 public:
  /// Starts the profiler. Throws std::runtime_error if a recording is already running.
  explicit TraceRecorder(bool cuda);
  /// Stops a recording that was not finished (its events are discarded).
  ~TraceRecorder();
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  /// Stops recording; writes the Chrome trace to `path` when it is not empty (folders are
  /// created; written to a temporary name, then renamed). Returns the summary.
  TraceSummary finish(const std::string& path);

 private:
  bool cuda_;
  bool running_ = false;
};

/// A file-system-friendly version of a row name: lowercase letters, digits and '-'.
std::string slug(const std::string& name);

}  // namespace ptune::measure
