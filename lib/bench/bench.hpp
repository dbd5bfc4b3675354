#pragma once
/// One configuration's pipeline timed in ptune's own process (Bench): warm-up steps untimed, then
/// windows of measure.steps steps, with the wait for data, the copy to the device and the compute
/// timed separately (host clocks on the CPU, CUDA events on a GPU); the device is synchronized at
/// the end of every window, before the clock read that ends it. Also the warm-up a row needs, the
/// load agreed across ranks and the ranks' deadline agreement (rank_max). The profiler never runs
/// in a timed window: bench::profile() records a row separately, after the timed steps of every
/// row (CUPTI, once attached, stays attached and would slow every later timed step).

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "measure/deadline.hpp"
#include "measure/measurement.hpp"
#include "measure/side.hpp"
#include "system/load.hpp"

namespace ptune::bench {

/// One configuration's pipeline (trainer, loader, feeder), built and warmed up once, then timed
/// in windows of measure.steps steps. Two benches interleave their windows (compare()): both
/// are built and warm, the idle one's loader paused.
class Bench : public measure::RowSide {
 public:
  /// Builds the pipeline and runs its warm-up steps (untimed), stopping early once `deadline`
  /// has passed: then the last warm-up step is kept as the bench's first window (one step, not
  /// warm) and its notes say so. Throws ConfigError for options
  /// the device cannot honour, DataError for bad data, std::runtime_error (out of memory, a
  /// failing collective).
  explicit Bench(const config::ExperimentConfig& cfg, const measure::Progress& progress = {},
                 const measure::Deadline& deadline = {});
  ~Bench() override;
  Bench(const Bench&) = delete;
  Bench& operator=(const Bench&) = delete;

  /// Times measure.steps steps, synchronizing the device before the clock read that ends the
  /// window; returns ms/step (in a data-parallel run, the slowest rank's: every rank gets the
  /// same value, so decisions taken on it agree across ranks). Where `deadline` would pass first
  /// the window is cut short between steps (at least one) and kept: its ms/step is over the
  /// steps it ran. The ranks of a data-parallel run agree before the window how many of its
  /// steps fit (by the slowest rank's last ms/step), so that every rank stops at the same step;
  /// a single process also checks between steps. The window the warm-up left (see the
  /// constructor) is returned first, without running a step.
  double window(const measure::Deadline& deadline) override;
  int64_t steps_per_window() const override;
  double samples_per_step() const override;
  /// Holds the loader's workers (and sets the process-wide settings back on resume()).
  void pause() override;
  void resume() override;
  /// RowSide::result; collective in a data-parallel run.
  measure::Measurement result(size_t first = 0, size_t count = SIZE_MAX) override;
  void set_progress(const measure::Progress& progress, int64_t planned) override;
  const config::ExperimentConfig& config() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// `load.stop(gpu)`, with `under_load` agreed across the ranks of a data-parallel run (true when
/// any rank's is): what a rank decides by it, every rank decides alike. Collective in a
/// data-parallel run (every rank calls it at the same point). Throws what the collective throws.
system::LoadReport agreed_load(system::LoadSampler& load, int gpu, const config::ExperimentConfig& cfg);

/// The warm-up steps a row runs: measure.warmup_steps, raised to
/// engine::Trainer::warmup_steps_needed (data rows excepted); when raised, `note` (if given)
/// says "measure.warmup_steps raised from N to M: <why>, which must not be timed".
int64_t warmup_steps(const config::ExperimentConfig& cfg, std::string* note = nullptr);

/// Whether a measured row gets profile(): on a CUDA device (GPU busy) or with measure.profile.
bool wants_profile(const config::ExperimentConfig& cfg);

/// In a data-parallel run (system::world_size() > 1), the largest of the ranks' values, a collective
/// over the row's process group (for measure::window_plan's deadline); empty in one process.
std::function<double(double)> rank_max(const config::ExperimentConfig& cfg);

}  // namespace ptune::bench
