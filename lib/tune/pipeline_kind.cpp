// ptune's own pipeline as a kind of side: a bench::Bench in ptune's process, or a bench::ChildSide
// in a child process started with the row's process settings.

#include "bench/bench.hpp"
#include "bench/child_side.hpp"
#include "bench/profile.hpp"
#include "system/process.hpp"
#include "system/rendezvous.hpp"
#include "tune/sides.hpp"

namespace ptune::tune {
namespace {

class PipelineKind : public measure::SideKind {
 public:
  std::string name() const override { return "pipeline"; }
  bool matches(const config::ExperimentConfig&) const override { return true; }
  std::string arch(const config::ExperimentConfig& cfg) const override { return cfg.model.arch; }
  bool needs_processes(const config::ExperimentConfig& cfg) const override {
    return !system::default_process(cfg.process);
  }
  std::unique_ptr<measure::RowSide> start_here(const config::ExperimentConfig& cfg,
                                               const measure::Progress& progress,
                                               const measure::Deadline& deadline) const override {
    return std::make_unique<bench::Bench>(cfg, progress, deadline);
  }
  std::unique_ptr<measure::RowSide> start_process(const config::ExperimentConfig& cfg,
                                                  const measure::Progress& progress,
                                                  const measure::Deadline& deadline) const override {
    return std::make_unique<bench::ChildSide>(cfg, progress, deadline);
  }
  double samples_per_step(const config::ExperimentConfig& cfg) const override {
    return static_cast<double>(cfg.loader.batch_size * system::world_size());
  }
  int64_t ranks(const config::ExperimentConfig&) const override { return system::world_size(); }
  std::string processes_name() const override { return "this row's child processes"; }
  bool startup_in_auto_budget() const override { return true; }
  bool restarts_processes_when_out_of_memory() const override { return false; }
  std::string restarted_note() const override {
    return "interleaved by rebuilding both pipelines for every window: the two did not fit in memory at once";
  }
  std::string diagnose(const measure::Measurement& m, const config::ExperimentConfig& cfg,
                       const std::vector<measure::Tried>& tried, const system::CpuInfo& cpu) const override {
    return measure::diagnose(m, cfg, tried, {}, cpu);
  }
  bool wants_profile(const config::ExperimentConfig& cfg) const override { return bench::wants_profile(cfg); }
  /// In a child process started with the row's process settings where it has any.
  void profile(measure::Measurement& m, const config::ExperimentConfig& cfg,
               const measure::TraceTarget& target, const measure::Progress& progress) const override {
    const bench::ProfileResult p =
        system::default_process(cfg.process)
            ? bench::profile(cfg, m.ms_per_step, target, progress)
            : bench::ChildSide(cfg, progress, measure::Deadline(), false).profile(m.ms_per_step, target);
    m.gpu_busy_pct = p.gpu_busy_pct;
    m.trace_path = p.trace_path;
  }
  std::unique_ptr<measure::RowSide> prime(const config::ExperimentConfig& cfg,
                                          const measure::Progress& progress) const override {
    return bench::prime(cfg, progress);
  }
  bool profiles_beside_companion(const config::ExperimentConfig& cfg) const override {
    return bench::times_beside_companion(cfg);
  }
};

}  // namespace

const measure::SideKind& pipeline_kind() {
  static const PipelineKind kind;
  return kind;
}

}  // namespace ptune::tune
