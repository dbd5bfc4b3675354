#pragma once
/// Host-to-device feeding: on a CUDA device, batches from page-locked memory are copied with
/// non_blocking copies on a dedicated copy stream, the next batch's copy is issued while the
/// current one trains, and the compute stream waits for a copy through a CUDA event (no
/// device-wide synchronization). On the CPU it hands batches through unchanged.

#include <functional>
#include <memory>
#include <optional>

#include <c10/core/Device.h>

#include "data/loader.hpp"
#include "measure/stats.hpp"

namespace ptune::engine {

namespace detail {
/// The next batch straight from `source`, with the time the host was blocked on it; runs
/// `then` (if given) when there is a batch.
inline std::optional<data::Batch> pull(const std::function<std::optional<data::Batch>()>& source,
                                       double* wait_ms, const std::function<void()>& then = {}) {
  measure::Stopwatch sw;
  std::optional<data::Batch> b = source();
  if (wait_ms) *wait_ms = sw.ms();
  if (b && then) then();
  return b;
}
}  // namespace detail

class Feeder {
 public:
  /// `source` returns the next host batch or nullopt at the end.
  Feeder(std::function<std::optional<data::Batch>()> source, c10::Device device);
  ~Feeder();
  Feeder(const Feeder&) = delete;
  Feeder& operator=(const Feeder&) = delete;

  /// The next batch on the device, ordered before any work queued after this call on the
  /// current stream; nullopt at the end. `wait_ms`, if given, receives the time the host was
  /// blocked on the source (data wait). `before_device_wait`, if given, runs once the host has
  /// the batch and just before the current stream is made to wait for its copy (where a
  /// timing mark separates waiting for data from waiting for the copy).
  std::optional<data::Batch> next(double* wait_ms = nullptr, const std::function<void()>& before_device_wait = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ptune::engine
