#include "tune/sides.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "bench/bench.hpp"
#include "core/errors.hpp"
#include "dist/group.hpp"
#include "measure/timing.hpp"
#include "runtime/cuda_support.hpp"
#include "tune/tuner.hpp"

namespace ptune::tune {
namespace {

/// The table of kinds, asked in order: the first that matches a config is its kind. The last one
/// matches every config.
std::vector<const measure::SideKind*>& kinds() {
  static std::vector<const measure::SideKind*> table = {&program_kind(), &pipeline_kind()};
  return table;
}

class TorchRowContext : public measure::RowContext {
 public:
  std::function<double(double)> rank_max(const config::ExperimentConfig& cfg) const override {
    return bench::rank_max(cfg);
  }
  int gpu(const config::ExperimentConfig& cfg) const override {
    const c10::Device device = dist::rank_device(cfg.device);
    return device.is_cuda() ? device.index() : -1;
  }
  std::string gpu_uuid(int gpu) const override { return runtime::cuda::device_uuid(gpu); }
  system::LoadReport agreed_load(system::LoadSampler& load, int gpu,
                                 const config::ExperimentConfig& cfg) const override {
    return bench::agreed_load(load, gpu, cfg);
  }
  bool is_out_of_memory(const std::exception& e) const override { return tune::is_out_of_memory(e); }
  void free_device_memory() const override { runtime::cuda::empty_cache(); }
};

/// The progress of the other side of a comparison: its windows count as the row's pairs, so
/// progress speaks of the row, but an interruption stops them too.
measure::Progress interruption_only(const std::atomic<bool>* interrupted) {
  return [interrupted](const std::string&, int64_t, int64_t) {
    if (interrupted && interrupted->load()) throw Interrupted();
  };
}

}  // namespace

const measure::SideKind& side_kind(const config::ExperimentConfig& cfg) {
  for (const measure::SideKind* k : kinds())
    if (k->matches(cfg)) return *k;
  return pipeline_kind();
}

ExtraSideKind::ExtraSideKind(const measure::SideKind& kind) : kind_(&kind) {
  kinds().insert(kinds().begin(), kind_);
}

ExtraSideKind::~ExtraSideKind() {
  auto& table = kinds();
  table.erase(std::remove(table.begin(), table.end(), kind_), table.end());
}

const measure::RowContext& row_context() {
  static const TorchRowContext context;
  return context;
}

measure::Measurement measure_row(const config::ExperimentConfig& cfg, const measure::Progress& progress) {
  const measure::SideKind& kind = side_kind(cfg);
  measure::RowTiming t;
  t.row = {&cfg, &kind};
  t.in_processes = kind.needs_processes(cfg);
  t.progress = progress;
  return std::move(*measure::time_row(t, row_context()).m);
}

PairedTiming time_in_processes(const config::ExperimentConfig& prev, const config::ExperimentConfig& cfg,
                               const std::atomic<bool>* interrupted) {
  measure::RowTiming t;
  t.row = {&cfg, &side_kind(cfg)};
  t.prev = {&prev, &side_kind(prev)};
  t.in_processes = true;
  t.progress = interruption_only(interrupted);
  t.prev_progress = t.progress;
  measure::TimedRow r = measure::time_row(t, row_context());
  return {std::move(*r.m), std::move(r.prev_ms), std::move(r.prev_process)};
}

}  // namespace ptune::tune
