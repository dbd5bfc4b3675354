#include "tune/sweep.hpp"

#include <torch/version.h>

#include "dist/env.hpp"
#include "dist/group.hpp"
#include "engine/cuda_support.hpp"
#include "engine/device.hpp"
#include "errors.hpp"
#include "measure/diagnosis.hpp"
#include "measure/probe.hpp"
#include "measure/trace.hpp"
#include "tune/tuner.hpp"

namespace ptune::tune {
namespace {

}  // namespace

report::Environment environment(const config::ExperimentConfig& cfg) {
  report::Environment e;
  e.torch = TORCH_VERSION;
  c10::Device device(c10::kCPU);
  try {
    device = engine::resolve_device(cfg.device);
  } catch (const ConfigError&) {
  }
  // What each rank uses (a data-parallel rank gets its share of the cores); measure() sets it.
  e.device = engine::device_name(device);
  e.device_kind = device.is_cuda() ? "cuda" : "cpu";
  e.cuda = engine::cuda::version();
  e.cpu_threads = dist::rank_cpu_threads(cfg.cpu_threads);
  e.world_size = dist::world_size();
  return e;
}

void run_sweep(const config::ExperimentConfig& cfg, const SweepOptions& options, report::Results& out) {
  out.config = config::to_json(cfg);
  out.environment = environment(cfg);
  out.status = "running";
  engine::resolve_device(cfg.device);  // a bad device fails the whole sweep, not each row
  const auto rows = config::expand_sweep(cfg);
  std::optional<double> base_loss;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& [spec, row_cfg] = rows[i];
    report::Row row;
    row.name = spec.name;
    row.changes = spec.set;
    row.num_workers = row_cfg.loader.num_workers;
    row.mode = row_cfg.measure.mode;
    measure::Progress progress = [&](const std::string& phase, int64_t step, int64_t total) {
      if (options.interrupted && options.interrupted->load()) throw Interrupted();
      if (options.on_progress)
        options.on_progress(i, spec.name, phase, step, total, row_cfg.loader.batch_size * out.environment.world_size);
    };
    try {
      char index[8];
      std::snprintf(index, sizeof index, "%02zu-", i);
      const std::string trace = row_cfg.measure.out_dir + "/" + measure::slug(cfg.name) + "/" + index +
                                measure::slug(spec.name) + "/trace.json";
      row.m = measure::measure(row_cfg, progress, trace);
      row.notes = row.m->notes;
      if (row_cfg.measure.convergence_steps > 0 && row.mode == "train") {
        if (progress) progress("convergence", 0, row_cfg.measure.convergence_steps);
        row.loss_curve = measure::loss_curve(row_cfg, row_cfg.measure.convergence_steps);
      }
      row.diagnosis = measure::diagnose(*row.m, row_cfg);
    } catch (const Interrupted&) {
      out.status = "interrupted";
      if (options.on_row) options.on_row(out);
      throw;
    } catch (const ConfigError& e) {
      row.status = std::string("skipped: ") + e.what();
    } catch (const std::exception& e) {
      row.status = is_out_of_memory(e) ? "failed: out of memory" : "failed: " + message_of(e);
    }
    out.rows.push_back(std::move(row));
    report::Row& r = out.rows.back();
    report::compute_speedups(out.rows);
    if (r.m && r.m->loss && r.mode == "train") {
      if (!base_loss) base_loss = r.m->loss;  // the first row is the reference, not noted
      else report::note_semantics(r, base_loss);
    }
    if (!r.loss_curve.empty()) {
      const report::Row* first = nullptr;
      for (const auto& other : out.rows)
        if (!other.loss_curve.empty()) { first = &other; break; }
      if (first != &r) r.notes.push_back(measure::compare_convergence(r.loss_curve, first->loss_curve).text);
    }
    if (options.on_row) options.on_row(out);
  }
  out.status = "complete";
  if (options.on_row) options.on_row(out);
}

}  // namespace ptune::tune
