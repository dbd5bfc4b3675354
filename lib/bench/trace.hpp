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

namespace ptune::bench {

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

  /// Adds a top-level key to the trace, `json` its value as JSON text, as torch.profiler's
  /// add_metadata_json does (e.g. "distributedInfo": distributed_info_json(...)). Kineto writes
  /// the text as it is: it must be valid JSON.
  void add_metadata_json(const std::string& key, const std::string& json);

  /// Stops recording; writes the Chrome trace to `path` when it is not empty (folders are
  /// created; written to a temporary name, then renamed), with "traceName" naming `path` (not
  /// the temporary file Kineto wrote) and, for a recording without CUDA, without the "ERROR"
  /// key in which Kineto collects its complaints about the missing GPU. Returns the summary.
  TraceSummary finish(const std::string& path);

 private:
  bool cuda_;
  bool running_ = false;
};

/// A file-system-friendly version of a row name: lowercase letters, digits and '-'.
std::string slug(const std::string& name);

/// The file name torch.profiler.tensorboard_trace_handler gives a trace, with its default
/// worker name: "<host>_<pid>.<ns since the epoch>.pt.trace.json" (unique per process and time,
/// so that the ranks of a data-parallel run write their traces side by side in one folder).
std::string trace_file_name();

/// Whether a file name is one trace_file_name() (or tensorboard_trace_handler) gives: it ends
/// in ".pt.trace.json" (or ".pt.trace.json.gz").
bool is_trace_file_name(const std::string& name);

/// The "distributedInfo" value torch.profiler writes in a data-parallel run (JSON text):
/// {"backend": "gloo", "rank": 1, "world_size": 2}, spaced as Python's json.dumps writes it
/// (HTA finds the rank with a pattern that wants the space after the colon).
std::string distributed_info_json(const std::string& backend, int rank, int world_size);

/// Rewrites the top level of a Chrome trace as Kineto writes it: "traceName" becomes
/// `trace_name` (added if missing), and the "ERROR" key is dropped when `drop_errors`. The
/// events are copied as they are, never parsed. Returns `text` unchanged when it is not a JSON
/// object.
std::string finalize_trace_text(const std::string& text, const std::string& trace_name, bool drop_errors);

}  // namespace ptune::bench
