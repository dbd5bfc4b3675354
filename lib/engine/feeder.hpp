#pragma once
/// Host-to-device feeding: on a CUDA device, batches from page-locked memory are copied with
/// non_blocking copies on a dedicated copy stream, so a batch's copy overlaps the previous
/// step's kernels still running on the compute stream, and the compute stream waits for the
/// copy through a CUDA event (no device-wide synchronization). On the CPU it hands batches
/// through unchanged.
///
/// Order inside next(), which the step split relies on: (1) the host pulls the batch from the
/// loader (data wait), (2) its copy is queued, (3) `before_device_wait` runs (the bench's
/// "ready" mark (bench/pipeline.hpp) on the compute stream), (4) the compute stream is made to wait for the
/// copy. Nothing blocks on the loader after (3), so the device time from the ready mark on is the copy, never
/// the wait for the next batch.

#include <functional>
#include <memory>
#include <optional>

#include <c10/core/Device.h>

#include "data/loader.hpp"

namespace ptune::engine {

/// How a host batch reaches the device. One batch is in flight at a time: start() queues its
/// copy, finish() orders the work queued afterwards on the current stream after that copy.
class DeviceCopy {
 public:
  virtual ~DeviceCopy() = default;
  /// Queues the copy of `host`; returns the device batch (not yet safe to read on the current
  /// stream).
  virtual data::Batch start(const data::Batch& host) = 0;
  /// Makes the current stream wait for the copy started last; `batch` is what start() returned.
  virtual void finish(data::Batch& batch) = 0;
};

/// The copier for `device`: a copy stream and CUDA events on a CUDA device (CUDA builds);
/// nullptr on the CPU (batches pass through).
std::unique_ptr<DeviceCopy> make_device_copy(c10::Device device);

class Feeder {
 public:
  using Source = std::function<std::optional<data::Batch>()>;
  /// `source` returns the next host batch or nullopt at the end; copies go through
  /// make_device_copy(device).
  Feeder(Source source, c10::Device device);
  /// The same with a given copier (nullptr: pass-through); tests use fakes here.
  Feeder(Source source, std::unique_ptr<DeviceCopy> copy);
  ~Feeder();
  Feeder(const Feeder&) = delete;
  Feeder& operator=(const Feeder&) = delete;

  /// The next batch on the device, ordered before any work queued after this call on the
  /// current stream; nullopt at the end. `wait_ms`, if given, receives the time the host was
  /// blocked on the source (data wait). `before_device_wait`, if given, runs once the host has
  /// the batch and its copy is queued, just before the current stream is made to wait for the
  /// copy (where a timing mark separates waiting for data from waiting for the copy).
  std::optional<data::Batch> next(double* wait_ms = nullptr,
                                  const std::function<void()>& before_device_wait = {});

 private:
  Source source_;
  std::unique_ptr<DeviceCopy> copy_;
};

}  // namespace ptune::engine
