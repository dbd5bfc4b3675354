#pragma once
/// What the scheduler times: a Side, a window at a time, and a sweep row's side (RowSide), which
/// also gives the row's Measurement. No LibTorch: the kinds of side live in bench/ and proc/.

#include <cstddef>
#include <cstdint>
#include <string>

#include "measure/deadline.hpp"
#include "measure/measurement.hpp"

namespace ptune::measure {

/// Something that can be timed a window at a time: a bench::Bench, or a fake in tests.
class Side {
 public:
  virtual ~Side() = default;
  /// Times one window of steps_per_window() steps, fewer where `deadline` would pass first (at
  /// least one); returns its ms/step. Throws what measuring throws.
  virtual double window(const Deadline& deadline) = 0;
  /// Steps in a full window.
  virtual int64_t steps_per_window() const { return 1; }
  /// Samples one step processes (all ranks): speedups compare time per sample, so that rows
  /// with different batch sizes compare by throughput.
  virtual double samples_per_step() const { return 1; }
  /// Called before another side's window / before this side's window after another's.
  virtual void pause() {}
  virtual void resume() {}
  /// The process the last window ran in, for a side timed in several processes in turn
  /// (ProcessGroup: 0, 1, ...); -1 for a side in one process.
  virtual int last_process() const { return -1; }
};

/// A sweep row's side: a Side that also gives the row's Measurement. The sweep takes every kind
/// through this interface: a pipeline in ptune's process (bench::Bench), a pipeline in a child
/// process (bench::ChildSide), an instance of the user's program (proc::ProgramInstance), or several
/// processes of either timed in turn (ProcessGroup).
class RowSide : public Side {
 public:
  /// Processes the side is timed in: 0 for a side in ptune's own process.
  virtual size_t processes() const { return 0; }
  /// Whether the side, kept from the previous row, can be the other side of a comparison of
  /// `count` processes a side (ProcessGroup::reusable). Throws nothing.
  virtual bool reusable(size_t count) const { return false; }
  /// Starts a new comparison with the same processes, in plain or `shifted` turns
  /// (ProcessGroup::restart); its errors then speak of the previous row's processes.
  virtual void restart(bool shifted) {}
  /// What the side's processes reported of themselves, one line; "" in ptune's own process.
  virtual std::string process_description() const { return ""; }
  /// From now on the side is the previous row's (kept as a later row's other side).
  virtual void mark_previous() {}
  /// The Measurement of `count` windows from the `first` one timed (all by default): the point,
  /// its interval, the split, the loss, memory and notes. Throws std::runtime_error when that
  /// leaves no window.
  virtual Measurement result(size_t first = 0, size_t count = SIZE_MAX) = 0;
  /// Sets the progress callback (phase "measure": windows done, of `planned`).
  virtual void set_progress(const Progress& progress, int64_t planned) = 0;
};

}  // namespace ptune::measure
