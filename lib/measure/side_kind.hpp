#pragma once
/// A kind of side: what a row's configuration runs as (ptune's own pipeline, the user's program),
/// with everything that differs between kinds in one type: how a side of it is started (in ptune's
/// process, or as one process of a group), what its rows are called, whether its start-up counts in
/// an automatic budget, how it is diagnosed and profiled. A row's kind is chosen once, from its
/// config (tune::side_kind, the one table of kinds); the timing path (measure/timing.hpp), the
/// sweep, the diagnosis and the notes ask the kind, never which kind it is. Also what the timing
/// path asks of the run it is in (RowContext). No LibTorch: the kinds live in tune/, fakes in tests.

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.hpp"
#include "measure/deadline.hpp"
#include "measure/diagnosis.hpp"
#include "measure/measurement.hpp"
#include "measure/side.hpp"
#include "system/cpu_info.hpp"
#include "system/load.hpp"

namespace ptune::measure {

/// Where a row's profile writes its trace, and what the trace says about the row.
struct TraceTarget {
  std::string folder;  // the row's folder (every rank writes its trace there); "": no trace
  std::string row;     // the row's name ("ptune" metadata)
  nlohmann::ordered_json changes = nlohmann::ordered_json::object();  // the row's overrides
};

class SideKind {
 public:
  virtual ~SideKind() = default;
  /// The kind's name, for messages and tests ("pipeline", "program").
  virtual std::string name() const = 0;
  /// Whether `cfg` is a row of this kind (the kinds are asked in the order of their table).
  virtual bool matches(const config::ExperimentConfig& cfg) const = 0;
  /// What the results call the row's architecture ("arch"); with the mode, the key that pairs a row
  /// with the previous row it is compared with.
  virtual std::string arch(const config::ExperimentConfig& cfg) const = 0;
  /// Whether the row must run in processes of its own (then every row of its sweep does, so that
  /// each is compared with a row measured alike).
  virtual bool needs_processes(const config::ExperimentConfig& cfg) const = 0;

  /// Start and warm up: a side in ptune's process, built and warm (a kind whose sides are always
  /// processes of their own starts one). Throws what starting it throws.
  virtual std::unique_ptr<RowSide> start_here(const config::ExperimentConfig& cfg, const Progress& progress,
                                              const Deadline& deadline) const = 0;
  /// Start and warm up one process of a row's side (ProcessGroup holds several). Throws what
  /// starting it throws.
  virtual std::unique_ptr<RowSide> start_process(const config::ExperimentConfig& cfg,
                                                 const Progress& progress,
                                                 const Deadline& deadline) const = 0;
  /// Samples one step processes (all ranks), before any side is started.
  virtual double samples_per_step(const config::ExperimentConfig& cfg) const = 0;
  /// The ranks a window's ms/step covers, for the samples/s of its Measurement (set_windows).
  virtual int64_t ranks(const config::ExperimentConfig& cfg) const = 0;

  /// How the notes name a row's processes: "this row's program", "this row's child processes".
  virtual std::string processes_name() const = 0;
  /// Whether a side's start-up counts in an automatic budget (a pipeline's build does; a program's
  /// interpreter, imports and compilation do not: its budget counts from its first windows).
  virtual bool startup_in_auto_budget() const = 0;
  /// Whether a row in processes that ran out of memory beside the previous row's processes is
  /// timed again by starting each side afresh for every window, one at a time.
  virtual bool restarts_processes_when_out_of_memory() const = 0;
  /// The row's note when both sides were started afresh for every window (out of memory).
  virtual std::string restarted_note() const = 0;

  /// The row's diagnosis (measure/diagnosis.hpp): where its step time goes and the next move.
  virtual std::string diagnose(const Measurement& m, const config::ExperimentConfig& cfg,
                               const std::vector<Tried>& tried, const system::CpuInfo& cpu) const = 0;
  /// Whether a measured row is profiled after every row is timed (a sweep's pass 2).
  virtual bool wants_profile(const config::ExperimentConfig& cfg) const = 0;
  /// Profiles the row (its windows ran at `m.ms_per_step`): adds its GPU busy, its trace
  /// (`target`) and what the trace says to `m`. Throws WriteError when the promised trace could not
  /// be written, what profiling throws otherwise.
  virtual void profile(Measurement& m, const config::ExperimentConfig& cfg, const TraceTarget& target,
                       const Progress& progress) const = 0;
  /// Before a sweep's first row (or a search's first trial) in ptune's own process: one-time
  /// initializations, and a companion side kept idle beside the first row where that is how every
  /// later row is timed (bench::prime); null where the kind needs none. Throws nothing the row's
  /// own start would not.
  virtual std::unique_ptr<RowSide> prime(const config::ExperimentConfig& cfg,
                                         const Progress& progress) const {
    return nullptr;
  }
  /// Whether the last timed row's side stays alive beside the profiled rows (as it was beside
  /// its windows).
  virtual bool profiles_beside_companion(const config::ExperimentConfig& cfg) const { return false; }
};

/// What the timing path asks of the run it is in: the ranks of a data-parallel run, the device
/// whose load it samples, and memory. One implementation with LibTorch (tune/sides.cpp), fakes in
/// tests.
class RowContext {
 public:
  virtual ~RowContext() = default;
  /// The largest of the ranks' values (a collective), for the deadline; empty in one process.
  virtual std::function<double(double)> rank_max(const config::ExperimentConfig& cfg) const = 0;
  /// The GPU index whose load is sampled (-1: none) and its UUID.
  virtual int gpu(const config::ExperimentConfig& cfg) const = 0;
  virtual std::string gpu_uuid(int gpu) const = 0;
  /// `load.stop(gpu)`, agreed across the ranks (bench::agreed_load). Collective.
  virtual system::LoadReport agreed_load(system::LoadSampler& load, int gpu,
                                         const config::ExperimentConfig& cfg) const = 0;
  /// Whether `e` is an allocation failure. Throws nothing.
  virtual bool is_out_of_memory(const std::exception& e) const = 0;
  /// Hands the device's cached memory back, after an allocation failure. Throws nothing.
  virtual void free_device_memory() const = 0;
};

}  // namespace ptune::measure
