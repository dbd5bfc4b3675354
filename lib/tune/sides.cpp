#include "tune/sides.hpp"

#include <memory>
#include <utility>
#include <vector>

#include "bench/bench.hpp"
#include "bench/child_side.hpp"
#include "dist/group.hpp"
#include "measure/schedule.hpp"
#include "proc/program.hpp"
#include "runtime/cuda_support.hpp"
#include "system/load.hpp"
#include "system/process.hpp"

namespace ptune::tune {

std::unique_ptr<measure::RowSide> make_side(const config::ExperimentConfig& cfg,
                                            const measure::Progress& progress,
                                            const measure::Deadline& deadline) {
  if (cfg.program.enabled()) return std::make_unique<proc::ProgramInstance>(cfg, progress, deadline);
  return std::make_unique<bench::Bench>(cfg, progress, deadline);
}

std::unique_ptr<measure::RowSide> start_process(const config::ExperimentConfig& cfg,
                                                const measure::Progress& progress,
                                                const measure::Deadline& deadline) {
  if (cfg.program.enabled()) return std::make_unique<proc::ProgramInstance>(cfg, progress, deadline);
  return std::make_unique<bench::ChildSide>(cfg, progress, deadline);
}

RowProcesses start_row_processes(const config::ExperimentConfig* prev, const config::ExperimentConfig& cfg,
                                 int64_t count, const measure::Progress& prev_progress,
                                 const measure::Progress& progress, const measure::Deadline& deadline) {
  std::vector<std::unique_ptr<measure::RowSide>> a, b;
  auto start = [&](bool row_side) {
    auto child =
        row_side ? start_process(cfg, progress, deadline) : start_process(*prev, prev_progress, deadline);
    child->pause();
    (row_side ? b : a).push_back(std::move(child));
  };
  for (int64_t i = 0; i < count; ++i) {
    // A B, then B A: neither side has the earlier starts.
    const bool prev_first = prev && i % 2 == 0;
    if (prev_first) start(false);
    start(true);
    if (prev && !prev_first) start(false);
  }
  RowProcesses r;
  if (prev) r.prev = std::make_unique<measure::ProcessGroup>(std::move(a), false);
  r.row = std::make_unique<measure::ProcessGroup>(std::move(b), true);
  return r;
}

measure::Measurement measure_row(const config::ExperimentConfig& cfg, const measure::Progress& progress) {
  measure::WindowPlan plan =
      measure::window_plan(cfg, bench::rank_max(cfg));  // the deadline counts the pipeline's construction
  const c10::Device device = dist::rank_device(cfg.device);
  const int gpu = device.is_cuda() ? device.index() : -1;
  system::LoadSampler load;  // from the row's start, as a sweep's row (time_row)
  load.start(gpu, gpu >= 0 ? runtime::cuda::device_uuid(gpu) : "");
  // Process settings: the row's pipeline in measure.processes child processes started with them.
  std::unique_ptr<measure::RowSide> side;
  if (!system::default_process(cfg.process) || cfg.program.enabled()) {
    side =
        std::move(start_row_processes(nullptr, cfg, cfg.measure.processes, {}, progress, plan.deadline).row);
    plan = measure::in_processes(plan, cfg.measure.processes);
  } else {
    side = make_side(cfg, progress, plan.deadline);
  }
  side->set_progress(progress, plan.min_pairs);
  const measure::AloneRun run = measure::measure_alone(*side, plan);
  measure::Measurement m = side->result(static_cast<size_t>(run.transient), run.ms.size());
  m.transient_windows = run.transient;
  for (auto& n : measure::run_notes(run.transient, run.ms.size(), run.stop, plan, false))
    m.notes.push_back(std::move(n));
  m.load = bench::agreed_load(load, gpu, cfg);
  if (side->processes() > 0)
    m.notes.push_back("measured in processes of its own: " + side->process_description());
  return m;
}

}  // namespace ptune::tune
