#pragma once
/// A row's sides in processes of their own, picked from its config: an instance of the user's
/// program (proc::ProgramInstance) or a pipeline in a child process (bench::ChildSide), in groups
/// timed in turn; and a row measured alone (measure_row).

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "measure/deadline.hpp"
#include "measure/measurement.hpp"
#include "measure/process_group.hpp"

namespace ptune::tune {

/// The processes of a row measured in child processes: `count` of `cfg` and, for a comparison,
/// `count` of `prev` (null: the row alone). They are started one after another, each built and
/// warmed up and then paused, alternating between the sides in the order A B B A A B ... so that
/// neither side has the earlier starts. The row's group takes shifted turns, prev's plain ones. `progress`
/// reports the row's warm-up (its processes'); `prev_progress` is called during the previous side's (it may
/// throw to stop). Throws what ChildSide's constructor throws (the processes started so far are then ended).
/// A sweep whose previous row's processes are still warm starts only the row's (prev null) and
/// restarts those in plain turns (ProcessGroup::restart).
struct RowProcesses {
  std::unique_ptr<measure::ProcessGroup> prev, row;
};
/// A row's side in this process: an instance of the user's program where `cfg` has one
/// (proc::ProgramInstance: its processes are its own still), else ptune's pipeline (bench::Bench),
/// built and warm. A side per window (a sweep's measure.interleave false) or per row. Throws what
/// their constructors throw.
std::unique_ptr<measure::RowSide> make_side(const config::ExperimentConfig& cfg,
                                            const measure::Progress& progress,
                                            const measure::Deadline& deadline);

/// One process of a row's side: an instance of the user's program where `cfg` has one
/// (proc::ProgramInstance), else a child process of ptune (ChildSide), built and warm. Throws what
/// their constructors throw.
std::unique_ptr<measure::RowSide> start_process(const config::ExperimentConfig& cfg,
                                                const measure::Progress& progress,
                                                const measure::Deadline& deadline);
RowProcesses start_row_processes(const config::ExperimentConfig* prev, const config::ExperimentConfig& cfg,
                                 int64_t count, const measure::Progress& prev_progress,
                                 const measure::Progress& progress, const measure::Deadline& deadline);

/// Measures one configuration alone (Bench + measure_alone), with the load sampled. In
/// a data-parallel run (dist::process_group names a world) every rank measures its shard;
/// ms/step is the slowest rank's, the shares and the loss are the ranks' means, the peak memory
/// their maximum. Data rows time the loader, the copy and (uint8 batches) the conversion on the
/// device: the input as the model would get it. measure.warmup_steps is raised to what the
/// config needs (Trainer::warmup_steps_needed; a note says so), so that a CUDA-graph capture
/// or cuDNN's autotuning never lands in the timed steps.
/// Throws ConfigError for options the device cannot honour, DataError for bad data,
/// std::runtime_error when a collective fails.
/// measure.max_s bounds the whole measurement, the pipeline's construction and warm-up included
/// (Deadline); the first windows' start-up transient is left out (transient_end) and noted.
measure::Measurement measure_row(const config::ExperimentConfig& cfg, const measure::Progress& progress = {});

}  // namespace ptune::tune
