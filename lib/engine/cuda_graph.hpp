#pragma once
/// Whole-step CUDA graphs: a training step (forward, backward, optimizer update, loss scaling)
/// captured once on a side stream and replayed every step, which removes the per-kernel launch
/// cost. The step body must read its inputs from static device buffers and must not
/// synchronize with the host. Implemented in cuda_graph_cuda.cpp (CUDA builds); in CPU-only
/// builds capture() fails with a clear reason.

#include <functional>
#include <memory>
#include <string>

namespace ptune::engine {

class GraphStep {
 public:
  GraphStep();
  ~GraphStep();
  GraphStep(const GraphStep&) = delete;
  GraphStep& operator=(const GraphStep&) = delete;

  /// Runs `body` `warmup` times eagerly on a side stream (cuDNN and allocator warm-up, lazily
  /// created optimizer state), then captures one run of it into a graph. Returns false, with
  /// failure() saying why, if capture is impossible (an op that cannot be captured, a host
  /// synchronization inside `body`); the device is then left usable for eager steps.
  bool capture(const std::function<void()>& body, int warmup = 3);

  /// Replays the captured step on the current stream. Requires a successful capture().
  void replay();

  bool captured() const { return captured_; }
  const std::string& failure() const { return failure_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool captured_ = false;
  std::string failure_;
};

}  // namespace ptune::engine
