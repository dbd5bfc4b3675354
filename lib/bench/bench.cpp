#include "bench/bench.hpp"

#include <sys/resource.h>

#include <cmath>
#include <filesystem>
#include <random>

#include <torch/torch.h>

#include "runtime/compat.hpp"
#include "dist/group.hpp"
#include "runtime/cuda_support.hpp"
#include "runtime/device.hpp"
#include "engine/feeder.hpp"
#include "system/process.hpp"
#include "engine/trainer.hpp"
#include "core/errors.hpp"
#include "core/files.hpp"
#include "models/flops.hpp"
#include "bench/child_side.hpp"
#include "bench/peak.hpp"
#include "bench/pipeline.hpp"
#include "core/ranges.hpp"
#include "core/stats.hpp"
#include "bench/trace.hpp"

namespace ptune::bench {

int64_t warmup_steps(const config::ExperimentConfig& cfg, std::string* note) {
  const int64_t needed = engine::Trainer::warmup_steps_needed(cfg);
  if (cfg.measure.mode == config::Mode::kData || cfg.measure.warmup_steps >= needed)
    return cfg.measure.warmup_steps;
  if (note) {
    *note = "measure.warmup_steps raised from " + std::to_string(cfg.measure.warmup_steps) + " to " +
            std::to_string(needed) + ": " +
            (cfg.optim.cuda_graphs ? "optim.cuda_graphs runs " + std::to_string(needed - 1) +
                                         " eager steps and captures the graph in the next"
                                   : std::string("optim.cudnn_benchmark autotunes in the first step")) +
            ", which must not be timed";
  }
  return needed;
}

bool wants_profile(const config::ExperimentConfig& cfg) {
  return cfg.measure.profile || dist::rank_device(cfg.device).is_cuda();
}

// ---------------------------------------------------------------- FLOPs and peak

namespace {

/// A train or synthetic row's model FLOPs and the machine's peak in its precision.
struct Limits {
  std::optional<models::Flops> flops;
  system::Peak peak;
};

/// The Limits of a row on `device`: none for a data row; for a model that cannot be counted a
/// note says why.
Limits count_limits(const config::ExperimentConfig& cfg, const c10::Device& device,
                    std::vector<std::string>& notes) {
  Limits l;
  if (cfg.measure.mode == config::Mode::kData) return l;
  try {
    l.flops = models::count_flops(cfg.model.arch, cfg.model.num_classes, cfg.data.image_size);
  } catch (const std::exception& e) {
    notes.push_back(std::string("no model FLOPs: ") + e.what());
    return l;
  }
  l.peak = machine_peak(device, row_precision(cfg.optim.amp, device, cfg.model.arch));
  return l;
}

/// Copies `l` into `m`; the peak of `world` ranks is theirs together.
void set_limits(measure::Measurement& m, const Limits& l, int64_t world) {
  if (!l.flops) return;
  m.model_flops_per_sample = l.flops->train();
  m.peak_precision = l.peak.precision;
  m.peak_source = l.peak.source;
  m.peak_under_load = l.peak.under_load;
  if (l.peak.flops_per_s <= 0) return;
  m.peak_flops_per_s = l.peak.flops_per_s * static_cast<double>(world);
  if (world > 1) m.peak_source += " (x" + std::to_string(world) + " ranks)";
}

}  // namespace

// ---------------------------------------------------------------- Bench

/// One timed window of a bench.
struct WindowRecord {
  double ms = 0;      // ms/step
  int64_t steps = 0;  // steps it ran
  Spans spans;        // their split
  bool cold = false;  // the last warm-up step, kept because the deadline ended the warm-up
  double faults = 0;  // minor page faults in the window (all threads)
  double sys_ms = 0;  // system time in the window (all threads)
};

/// The process's minor page faults and system time so far (all its threads).
std::pair<double, double> os_counters() {
  rusage u{};
  if (::getrusage(RUSAGE_SELF, &u) != 0) return {0, 0};
  return {static_cast<double>(u.ru_minflt),
          1e3 * static_cast<double>(u.ru_stime.tv_sec) + 1e-3 * static_cast<double>(u.ru_stime.tv_usec)};
}

struct Bench::Impl {
  config::ExperimentConfig cfg;
  c10::Device device{c10::kCPU};
  std::shared_ptr<dist::Group> group;
  int64_t world = 1;
  std::optional<Pipeline> pipeline;
  std::optional<runtime::cuda::EventMarks> marks;
  std::vector<StepMarks> step_marks;
  std::vector<WindowRecord> windows;
  std::optional<WindowRecord> pending;  // the warm-up's last step, when the deadline ended it
  double last_step_ms = 0;              // the last step's time (agreed across ranks), an estimate
  std::vector<std::string> notes;
  measure::Progress progress;
  int64_t planned = 0;

  /// Runs up to `n` warm-up steps, each timed; stops once `deadline` has passed, keeping the
  /// last one as a window (pending). Collective (once a step) in a data-parallel run.
  void warm_up(int64_t n, const measure::Progress& progress, const measure::Deadline& deadline);
  /// ms/step of the slowest rank.
  double slowest(double ms) const { return world > 1 ? group->max({ms})[0] : ms; }
  Limits limits;  // the model's FLOPs and the machine's peak (train and synthetic rows)
};

namespace {

/// The note of a warm-up that the deadline ended after step `done` of `n` (`step_ms` each).
std::string cut_warmup_note(double step_ms, const measure::Deadline& deadline, int64_t done, int64_t n) {
  char buf[400];
  const double step_s = step_ms / 1000.0, budget_s = deadline.limit_ms() / 1000.0;
  if (step_s > budget_s)
    std::snprintf(
        buf, sizeof buf,
        "one step alone took %.3g s, longer than the row's budget (measure.max_s, %.3g s): the row ends "
        "after it, timed once (warm-up step %lld of %lld: not warm, so likely slower than a warm step)",
        step_s, budget_s, static_cast<long long>(done), static_cast<long long>(n));
  else
    std::snprintf(buf, sizeof buf,
                  "ran out of time in its warm-up: the row's budget (measure.max_s, %.3g s) was spent at "
                  "warm-up step %lld of %lld (%.3g s); that step is its only window, not warm",
                  budget_s, static_cast<long long>(done), static_cast<long long>(n), step_s);
  return buf;
}

}  // namespace

void Bench::Impl::warm_up(int64_t n, const measure::Progress& progress, const measure::Deadline& deadline) {
  for (int64_t i = 0; i < n; ++i) {
    Spans s;
    stats::Stopwatch sw;
    pipeline->step(s);
    runtime::synchronize(device);
    s.total = sw.ms();
    last_step_ms = deadline.limited() ? slowest(s.total) : s.total;
    if (progress) progress("warmup", i + 1, n);
    // Past the deadline, this step is the row's first window (not warm: said in the notes).
    // Only past it: a fresh pipeline's first steps are the slowest, no estimate of the next.
    if (!deadline.fits(0)) {
      pending = WindowRecord{last_step_ms, 1, s, true};
      notes.push_back(cut_warmup_note(last_step_ms, deadline, i + 1, n));
      return;
    }
  }
}

Bench::Bench(const config::ExperimentConfig& cfg, const measure::Progress& progress,
             const measure::Deadline& deadline)
    : impl_(std::make_unique<Impl>()) {
  Impl& b = *impl_;
  b.cfg = cfg;
  // Data parallel when the environment names a world: this rank's device and shard, gradients
  // averaged by the trainer, and the slowest rank's time reported.
  b.device = dist::rank_device(cfg.device);
  runtime::set_cpu_threads(dist::rank_cpu_threads(cfg.cpu_threads));
  b.group = dist::process_group(cfg.dist, b.device);
  b.world = b.group->size();
  b.limits = count_limits(cfg, b.device, b.notes);  // before the loader starts: a calibration runs alone
  b.pipeline.emplace(cfg, b.device, b.group);
  // On a GPU the host does not wait for the device inside a step, so host clocks cannot split
  // it; CUDA events on the compute stream do (StepMarks).
  if (b.device.is_cuda() && cfg.measure.mode != config::Mode::kSynthetic) b.marks.emplace(b.device.index());
  std::string warm_note;
  b.warm_up(warmup_steps(cfg, &warm_note), progress, deadline);
  if (!warm_note.empty()) b.notes.insert(b.notes.begin(), warm_note);
  runtime::synchronize(b.device);
  b.group->barrier();  // every rank starts its timed windows together
  if (b.device.is_cuda()) runtime::cuda::reset_peak_memory(b.device.index());
}

Bench::~Bench() = default;

const config::ExperimentConfig& Bench::config() const { return impl_->cfg; }

int64_t Bench::steps_per_window() const { return impl_->cfg.measure.steps; }

double Bench::samples_per_step() const {
  return static_cast<double>(impl_->cfg.loader.batch_size * impl_->world);
}

void Bench::set_progress(const measure::Progress& progress, int64_t planned) {
  impl_->progress = progress;
  impl_->planned = planned;
}

void Bench::pause() { impl_->pipeline->pause(); }

void Bench::resume() {
  // Process-wide settings another bench may have changed.
  runtime::set_cpu_threads(dist::rank_cpu_threads(impl_->cfg.cpu_threads));
  if (impl_->device.is_cuda()) runtime::cuda::set_cudnn_benchmark(impl_->cfg.optim.cudnn_benchmark);
  impl_->pipeline->resume();
}

double Bench::window(const measure::Deadline& deadline) {
  Impl& b = *impl_;
  if (b.pending) {
    b.windows.push_back(*b.pending);
    b.pending.reset();
    return b.windows.back().ms;
  }
  const int64_t full = b.cfg.measure.steps;
  // Every rank runs the same steps: how many fit is agreed before the window starts.
  const int64_t steps = b.last_step_ms > 0 ? deadline.steps_that_fit(b.last_step_ms, full) : full;
  Spans s;
  if (b.marks) b.marks->clear(), b.step_marks.clear();
  const auto os_before = os_counters();
  stats::Stopwatch wall;
  const int64_t before = static_cast<int64_t>(b.windows.size());
  const int64_t total = std::max(b.planned, before + 1) * full;
  int64_t ran = 0;
  double step_start = 0;
  while (ran < steps) {
    b.pipeline->step(s, b.marks ? &*b.marks : nullptr, &b.step_marks);
    ++ran;
    // Every step reports (and so can be interrupted); the window's last one after its time.
    if (b.progress && ran < steps) b.progress("measure", before * full + ran, total);
    // A single process also stops between steps where the next one would not fit (on a GPU the
    // clock read after a step is an estimate: the window's end, after synchronizing, is not).
    if (b.world == 1 && ran < steps && deadline.limited()) {
      const double now = wall.ms();
      if (!deadline.fits(now - step_start)) break;
      step_start = now;
    }
  }
  runtime::synchronize(b.device);
  s.total = wall.ms();
  if (b.marks) {
    // The device's view: waiting for the copy (and the uint8 conversion) and computing, as
    // the events saw them; the rest of the wall time the device waited for the host.
    double copy = 0, compute = 0;
    for (const StepMarks& sm : b.step_marks) {
      copy += b.marks->elapsed_ms(sm.ready, sm.copied);
      compute += b.marks->elapsed_ms(sm.copied, sm.done);
    }
    s.h2d = std::min(copy, s.total);
    s.compute = std::min(compute, s.total - s.h2d);
    s.data = s.total - s.h2d - s.compute;
  }
  // A step takes as long as its slowest rank (they meet in the all-reduce).
  const double ms = b.slowest(s.total / static_cast<double>(ran));
  b.last_step_ms = ms;
  const auto os_after = os_counters();
  b.windows.push_back(
      WindowRecord{ms, ran, s, false, os_after.first - os_before.first, os_after.second - os_before.second});
  if (b.progress) b.progress("measure", (before + 1) * full, total);
  return ms;
}

measure::Measurement Bench::result(size_t first, size_t count) {
  Impl& b = *impl_;
  const size_t from = std::min(first, b.windows.size());
  const size_t end = from + std::min(count, b.windows.size() - from);
  if (from >= end) throw std::runtime_error("no window was timed");
  measure::Measurement m;
  m.notes = b.notes;
  m.batch_size = b.cfg.loader.batch_size;
  m.steps = b.cfg.measure.steps;
  std::vector<double> window_ms;
  Spans sum;
  int64_t short_windows = 0;
  double faults = 0, sys_ms = 0, steps = 0, wall_ms = 0;
  for (size_t i = from; i < end; ++i) {
    const WindowRecord& w = b.windows[i];
    window_ms.push_back(w.ms);
    if (!w.cold)
      faults += w.faults, sys_ms += w.sys_ms, wall_ms += w.spans.total, steps += static_cast<double>(w.steps);
    sum.data += w.spans.data;
    sum.h2d += w.spans.h2d;
    sum.total += w.spans.total;
    if (!w.cold && w.steps < b.cfg.measure.steps) ++short_windows;
  }
  measure::set_windows(m, window_ms, b.world);
  m.short_windows = short_windows;
  if (short_windows > 0)
    m.notes.push_back(measure::short_windows_note(short_windows, window_ms.size(), m.steps));
  if (b.world > 1) {
    // The shares of the step are the ranks' mean.
    auto shares = b.group->sum({sum.data, sum.h2d, sum.total});
    sum.data = shares[0];
    sum.h2d = shares[1];
    sum.total = shares[2];
  }
  if (!b.device.is_cuda() && steps > 0 && wall_ms > 0) {
    m.page_faults_per_step = faults / steps;
    m.system_time_pct = 100.0 * sys_ms / wall_ms;
  }
  if (sum.total > 0) {
    const double data = 100.0 * sum.data / sum.total, h2d = 100.0 * sum.h2d / sum.total;
    m.split = measure::Measurement::StepSplit{data, h2d, std::max(0.0, 100.0 - data - h2d)};
  }
  Pipeline& p = *b.pipeline;
  if (p.last_loss().defined())
    m.loss = b.group->sum({p.last_loss().item<double>()})[0] / static_cast<double>(b.world);
  engine::Trainer* trainer = p.trainer();
  if (b.device.is_cuda()) {
    m.device_mem_bytes = runtime::cuda::total_memory(b.device.index());
    // A CUDA-graph row allocates nothing while replaying: what its step needs was allocated
    // during the capture, into the graph's private pool.
    const int64_t peak =
        std::max(runtime::cuda::peak_memory(b.device.index()), trainer ? trainer->graph_peak_bytes() : 0);
    m.peak_mem_bytes = static_cast<int64_t>(b.group->max({static_cast<double>(peak)})[0]);
  }
  if (trainer && trainer->graph_failed())
    m.eager_fallback = trainer->graph_note();
  else if (trainer && !trainer->graph_note().empty())
    m.notes.push_back(trainer->graph_note());
  set_limits(m, b.limits, b.world);
  return m;
}

system::LoadReport agreed_load(system::LoadSampler& load, int gpu, const config::ExperimentConfig& cfg) {
  system::LoadReport r = load.stop(gpu);
  const auto group = dist::process_group(cfg.dist, dist::rank_device(cfg.device));
  if (group->size() > 1) r.under_load = group->max({r.under_load ? 1.0 : 0.0})[0] > 0;
  return r;
}

std::function<double(double)> rank_max(const config::ExperimentConfig& cfg) {
  if (system::world_size() <= 1) return {};
  return [dist_cfg = cfg.dist, device = cfg.device](double v) {
    return dist::process_group(dist_cfg, dist::rank_device(device))->max({v})[0];
  };
}

}  // namespace ptune::bench
