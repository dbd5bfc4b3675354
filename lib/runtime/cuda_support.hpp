#pragma once
/// CUDA queries and actions that the rest of ptune needs, behind a header that compiles
/// everywhere. Implemented in cuda_support_cuda.cpp against a CUDA LibTorch, and by
/// cuda_support_none.cpp (every query answers "no CUDA") against a CPU-only LibTorch.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ptune::runtime::cuda {

/// True when this build can use CUDA and at least one device is visible.
bool available();
/// Number of visible CUDA devices (0 without CUDA).
int device_count();
/// The device's marketing name, e.g. "NVIDIA H100 80GB HBM3"; "" without CUDA.
std::string device_name(int index);
/// The device's UUID as 8-4-4-4-12 lowercase hex digits, as nvidia-smi shows it after "GPU-"
/// (or "MIG-" for a MIG instance); "" without CUDA or for an index out of range. Never throws.
std::string device_uuid(int index);
/// The CUDA runtime version LibTorch was built with, e.g. "13.0"; "" without CUDA.
std::string version();
/// Blocks until all work queued on the device has finished.
void synchronize(int index);
/// Resets the caching allocator's peak-memory counter for the device.
void reset_peak_memory(int index);
/// Peak bytes allocated on the device since the last reset.
int64_t peak_memory(int index);
/// Total memory of the device in bytes.
int64_t total_memory(int index);
/// Releases the caching allocators' unused cached blocks, the device's and the page-locked
/// host memory's (after an out-of-memory error); a no-op without CUDA. Never throws.
void empty_cache();
/// Turns cuDNN's algorithm autotuning on or off (process-wide).
void set_cudnn_benchmark(bool on);

/// Timing marks on a CUDA device's current stream (CUDA events with timing enabled): they
/// split the device's time into phases without synchronizing inside a step. Events are
/// reused after clear(). Without CUDA, record() counts marks and elapsed_ms() is 0.
class EventMarks {
 public:
  explicit EventMarks(int device_index);
  ~EventMarks();
  EventMarks(const EventMarks&) = delete;
  EventMarks& operator=(const EventMarks&) = delete;

  /// Records a mark on the device's current stream; returns its index (0, 1, ...).
  size_t record();
  /// Milliseconds of device time from mark `from` to mark `to`; call after the device has
  /// passed both (e.g. after synchronize).
  double elapsed_ms(size_t from, size_t to) const;
  /// Forgets the marks; the next record() returns 0 again.
  void clear();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ptune::runtime::cuda
