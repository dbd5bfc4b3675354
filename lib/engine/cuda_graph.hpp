#pragma once
/// Whole-step CUDA graphs: a training step (forward, backward, optimizer update, loss scaling)
/// captured once on a side stream and replayed every step, which removes the per-kernel launch
/// cost. The step body must read its inputs from static device buffers and must not
/// synchronize with the host. Implemented in cuda_graph_cuda.cpp (CUDA builds); in CPU-only
/// builds capture() fails with a clear reason.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace ptune::engine {

class GraphStep {
 public:
  /// A graph for CUDA device `device_index` (its streams, whatever device is current).
  explicit GraphStep(int device_index = 0);
  ~GraphStep();
  GraphStep(const GraphStep&) = delete;
  GraphStep& operator=(const GraphStep&) = delete;

  /// Runs `body` eagerly on the graph's side stream, ordered after the work already queued on
  /// the current stream and before the work queued after it. Warm-up steps run here before
  /// capture, so that per-stream state (cuBLAS workspaces, cuDNN plans, optimizer buffers,
  /// allocator blocks) exists before the graph records.
  void run_eager(const std::function<void()>& body);

  /// Captures one run of `body` on the side stream into a graph (nothing executes). First the
  /// device is synchronized and the caching allocator's unused blocks are released (as
  /// torch.cuda.graph does), so the graph's private pool can take the memory other rows and
  /// streams left cached. Returns false, with failure() saying why, if capture is impossible
  /// (out of memory, an op that cannot be captured, a host synchronization inside `body`); the
  /// allocators are then restored and the device is usable for eager steps. Host-side effects
  /// of the partly run `body` stay: the caller resets its own per-step state. A graph that will
  /// be profiled needs bench::prepare_profiler_for_cuda_graphs() before its capture.
  bool capture(const std::function<void()>& body);

  /// Replays the captured step on the current stream. Requires a successful capture().
  void replay();

  bool captured() const { return captured_; }
  const std::string& failure() const { return failure_; }
  /// Peak bytes allocated on the device during the last capture (what the step needs: its
  /// activations and workspaces, which replays keep in the graph's private pool, and all that
  /// was alive then); 0 before a capture.
  int64_t capture_peak_bytes() const { return capture_peak_bytes_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool captured_ = false;
  std::string failure_;
  int64_t capture_peak_bytes_ = 0;
};

}  // namespace ptune::engine
