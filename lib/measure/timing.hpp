#pragma once
/// The one timing path: a row timed alone, a row compared with the previous row's side (kept
/// built and warm, or its processes kept warm), a row or a trial compared with fresh processes of
/// another configuration, and both sides started afresh for every window where they do not fit in
/// memory together. A sweep's rows, `ptune tune`'s trials and a row measured alone all come here.
/// No LibTorch: the sides come from their kind (side_kind.hpp), and what the run's ranks and device
/// say from a RowContext; tested with fake kinds.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "config/config.hpp"
#include "measure/measurement.hpp"
#include "measure/process_group.hpp"
#include "measure/side.hpp"
#include "measure/side_kind.hpp"

namespace ptune::measure {

/// One side of a timing: a configuration and its kind.
struct Config {
  const config::ExperimentConfig* cfg = nullptr;
  const SideKind* kind = nullptr;
};

/// What time_row() times.
struct RowTiming {
  Config row;                 // the configuration timed
  Config prev;                // the one it is compared with; cfg null: the row is timed alone
  RowSide* kept = nullptr;    // prev's side, built and warm (a sweep's previous row), where there is one
  bool in_processes = false;  // the row (and prev) in measure.processes processes a side
  Progress progress;          // the row's progress (it may throw to stop)
  Progress prev_progress;     // called during prev's windows (it may throw to stop)
  /// Frees every side kept alive outside this timing (`kept` among them), before both sides are
  /// started afresh for every window (out of memory); may be empty.
  std::function<void()> release;
};

/// A row timed.
struct TimedRow {
  std::optional<Measurement> m;   // the row's, with the notes its timing gives
  std::vector<double> prev_ms;    // prev's windows (ms/step), paired with m->repeat_ms
  std::vector<int> prev_process;  // the process each of prev_ms ran in (in processes)
  bool restarted = false;         // both sides started afresh for every window
  std::string decidable;          // a compared row: what size of change a row can decide here (decidable())
  std::unique_ptr<RowSide> side;  // the row's side, kept for the next row (null when restarted)
};

/// Times `t.row`: against `t.kept` (prev's side) where it can be reused, else against fresh
/// processes of `t.prev` (in processes) or a side of it built here, else alone. In processes
/// (`in_processes`) the row runs in measure.processes processes started with its settings
/// (ProcessGroup), paired with prev's; else in ptune's process. measure.max_s bounds it all, from the
/// start of the row's side (an automatic budget from the first windows where the kind's start-up
/// does not count). Where the two do not fit in memory together (`ctx` says an error is out of
/// memory), `release` frees every kept side and both are started afresh for every window. The
/// load is sampled from the row's start; whether it competed is asked at every look. Throws what
/// the sides throw.
TimedRow time_row(const RowTiming& t, const RowContext& ctx);

/// The processes of a row measured in processes of its own: `count` of `row` and, for a
/// comparison, `count` of `prev` (cfg null: the row alone). They are started one after another,
/// each built and warmed up and then paused, alternating between the sides in the order A B B A
/// A B ... so that neither side has the earlier starts. The row's group takes shifted turns, prev's
/// plain ones. Throws what starting a process throws (those started so far are then ended).
struct RowProcesses {
  std::unique_ptr<ProcessGroup> prev, row;
};
RowProcesses start_row_processes(const Config& prev, const Config& row, int64_t count,
                                 const Progress& prev_progress, const Progress& progress,
                                 const Deadline& deadline);

}  // namespace ptune::measure
