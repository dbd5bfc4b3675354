#pragma once
/// The kinds of side and the one place a row's kind is chosen (side_kind: the table of kinds), the
/// run's context with LibTorch (row_context), and the timing path's two entry points for a search:
/// a configuration measured alone (measure_row) and one timed against another in processes of
/// their own (time_in_processes). A kind of side is one file (tune/pipeline_kind.cpp,
/// tune/program_kind.cpp) plus its line in side_kind's table.

#include <atomic>
#include <vector>

#include "config/config.hpp"
#include "measure/measurement.hpp"
#include "measure/side_kind.hpp"

namespace ptune::tune {

/// The kind of side `cfg` runs as: the first of the table's kinds that matches it (ptune's
/// pipeline matches every config). Throws nothing.
const measure::SideKind& side_kind(const config::ExperimentConfig& cfg);

/// The kinds of the table (tune/sides.cpp), one a file.
const measure::SideKind& program_kind();   // the user's own program (config's `program`)
const measure::SideKind& pipeline_kind();  // ptune's own pipeline (bench::Bench, bench::ChildSide)

/// A kind put at the front of the table while the object lives (a test's fake kind). Not thread-safe.
class ExtraSideKind {
 public:
  explicit ExtraSideKind(const measure::SideKind& kind);
  ~ExtraSideKind();
  ExtraSideKind(const ExtraSideKind&) = delete;
  ExtraSideKind& operator=(const ExtraSideKind&) = delete;

 private:
  const measure::SideKind* kind_;
};

/// The run as the timing path sees it with LibTorch: the ranks of a data-parallel run
/// (bench::rank_max, bench::agreed_load), the row's device (dist::rank_device), out of memory
/// (is_out_of_memory) and the device's cache (runtime::cuda::empty_cache).
const measure::RowContext& row_context();

/// Measures one configuration alone, through the timing path (measure::time_row): in ptune's
/// process, or in measure.processes processes of its own where its kind needs them (process
/// settings), with the load sampled. In a data-parallel run (dist::process_group names a world)
/// every rank measures its shard; ms/step is the slowest rank's, the shares and the loss are the
/// ranks' means, the peak memory their maximum. Data rows time the loader, the copy and (uint8
/// batches) the conversion on the device: the input as the model would get it.
/// measure.warmup_steps is raised to what the config needs (Trainer::warmup_steps_needed; a note
/// says so), so that a CUDA-graph capture or cuDNN's autotuning never lands in the timed steps.
/// Throws ConfigError for options the device cannot honour, DataError for bad data,
/// std::runtime_error when a collective fails. measure.max_s bounds the whole measurement, the
/// pipeline's construction and warm-up included (Deadline); the first windows' start-up transient
/// is left out (transient_end) and noted.
measure::Measurement measure_row(const config::ExperimentConfig& cfg, const measure::Progress& progress = {});

/// One configuration timed against another in alternating windows, both in processes of their own.
struct PairedTiming {
  measure::Measurement m;         // the second configuration's, with the notes its sweep row gets
  std::vector<double> prev_ms;    // the first's windows (ms/step), paired with m.repeat_ms
  std::vector<int> prev_process;  // the process each of prev_ms ran in
};

/// Times `cfg` against `prev` as a sweep times the rows of a sweep with process-level settings:
/// each in measure.processes fresh processes started with its own process settings, their
/// windows alternating, within `cfg`'s measure.max_s. `interrupted` (may be null), once set,
/// stops it with ptune::Interrupted. Throws ConfigError for settings this machine cannot start,
/// and what a process reports.
PairedTiming time_in_processes(const config::ExperimentConfig& prev, const config::ExperimentConfig& cfg,
                               const std::atomic<bool>* interrupted);

}  // namespace ptune::tune
