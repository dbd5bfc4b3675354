#include "measure/probe.hpp"

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
#include "measure/child_side.hpp"
#include "measure/peak.hpp"
#include "core/ranges.hpp"
#include "core/stats.hpp"
#include "measure/trace.hpp"

namespace ptune::measure {
namespace {

/// Cycles through epochs: the next batch, starting a new epoch when one ends.
class EndlessBatches {
 public:
  explicit EndlessBatches(data::Loader& loader) : loader_(loader) {
    if (loader_.batches_per_epoch() == 0)
      throw ConfigError("loader.batch_size: " + std::to_string(loader_.options().batch_size) +
                        " is larger than the dataset's " + std::to_string(loader_.dataset().size()) +
                        " samples with drop_last; lower it or raise data.num_samples");
    loader_.start_epoch(epoch_);
  }
  data::Batch next() {
    auto b = loader_.next();
    if (!b) {
      loader_.start_epoch(++epoch_);
      b = loader_.next();
    }
    return std::move(*b);
  }

 private:
  data::Loader& loader_;
  int64_t epoch_ = 0;
};

struct Spans {
  double data = 0, h2d = 0, compute = 0, total = 0;
};

/// Device timing marks of one step on the compute stream: `ready` (the host has the batch and
/// its copy is queued), `copied` (the stream has waited for the copy and converted it),
/// `done` (after the step).
struct StepMarks {
  size_t ready = 0, copied = 0, done = 0;
};

/// One row's pipeline: the trainer (train, synthetic), the loader, the feeder and the input
/// conversion on the device, and one step of the row's mode.
class Pipeline {
 public:
  Pipeline(const config::ExperimentConfig& cfg, const c10::Device& device, std::shared_ptr<dist::Group> group)
      : mode_(cfg.measure.mode), input_(cfg, device) {
    // The trainer checks the device-specific options first, so a CUDA-only option fails fast.
    if (mode_ != config::Mode::kData)
      trainer_.emplace(cfg, device, group);
    else if (cfg.loader.pin_memory)
      runtime::require_cuda(device, "loader.pin_memory");
    loader_.emplace(engine::make_dataset(cfg),
                    engine::loader_options(cfg, device, group->rank(), group->size()));
    batches_.emplace(*loader_);
    // On a GPU the feeder copies each batch on its own stream, overlapping the previous step.
    feeder_.emplace([this]() -> std::optional<data::Batch> { return batches_->next(); }, device);
    if (mode_ == config::Mode::kSynthetic) fixed_ = trainer_->to_device(batches_->next());
  }

  Pipeline(const Pipeline&) = delete;  // the feeder's source refers to this object
  Pipeline& operator=(const Pipeline&) = delete;

  /// One step; host-clock spans are added to `s`; with `marks`, the step's device marks are
  /// recorded and appended to `out`.
  void step(Spans& s, runtime::cuda::EventMarks* marks = nullptr, std::vector<StepMarks>* out = nullptr) {
    stats::Stopwatch sw;
    if (mode_ == config::Mode::kSynthetic) {
      last_loss_ = trainer_->step(fixed_.first, fixed_.second);
      s.compute += sw.ms();
      return;
    }
    StepMarks sm;
    double waited = 0;
    data::Batch batch = *feeder_->next(&waited, [&] {
      if (marks) sm.ready = marks->record();
    });
    s.data += waited;
    auto [images, labels] = input_(batch);
    if (marks) sm.copied = marks->record();
    const double t_copy = sw.ms();
    s.h2d += t_copy - waited;
    if (mode_ != config::Mode::kData) last_loss_ = trainer_->step(images, labels);
    if (marks) sm.done = marks->record(), out->push_back(sm);
    s.compute += sw.ms() - t_copy;
  }

  /// Holds / releases the loader's workers (Loader::pause).
  void pause() { loader_->pause(); }
  void resume() { loader_->resume(); }

  /// The trainer; nullptr in data mode.
  engine::Trainer* trainer() { return trainer_ ? &*trainer_ : nullptr; }
  /// The loss of the last step (undefined in data mode).
  const at::Tensor& last_loss() const { return last_loss_; }

 private:
  config::Mode mode_;
  engine::DeviceInput input_;
  std::optional<engine::Trainer> trainer_;
  std::optional<data::Loader> loader_;
  std::optional<EndlessBatches> batches_;
  std::optional<engine::Feeder> feeder_;
  std::pair<at::Tensor, at::Tensor> fixed_;  // synthetic: one batch, already on the device
  at::Tensor last_loss_;
};

/// Runs `n` untimed steps, reporting progress as `phase`.
void warm_up(Pipeline& p, int64_t n, const Progress& progress, const char* phase) {
  Spans ignored;
  for (int64_t i = 0; i < n; ++i) {
    p.step(ignored);
    if (progress) progress(phase, i + 1, n);
  }
}

}  // namespace

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
void set_limits(Measurement& m, const Limits& l, int64_t world) {
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

// ---------------------------------------------------------------- Deadline

Deadline::Deadline(double budget_ms, Clock clock) : clock_(std::move(clock)) {
  if (!clock_) {
    clock_ = [] {
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
    };
  }
  start_ms_ = clock_();
  budget_s_ = std::max(0.0, budget_ms / 1000.0);
  automatic_ = budget_ms <= 0;
  limit_ms_ = automatic_ ? kAutoBudgetMs : budget_ms;
}

Deadline Deadline::continuing(double limit_ms, double elapsed_ms, double budget_s) {
  Deadline d(1.0);
  d.start_ms_ -= elapsed_ms;
  d.limit_ms_ = limit_ms;
  d.budget_s_ = budget_s;
  d.automatic_ = false;
  d.settled_ = true;
  return d;
}

void Deadline::agree_with(std::function<double(double)> max_over_ranks) {
  max_over_ranks_ = std::move(max_over_ranks);
}

double Deadline::elapsed_ms() const { return clock_ ? clock_() - start_ms_ : 0.0; }

double Deadline::left_ms() const { return limited() ? limit_ms_ - elapsed_ms() : kNone; }

bool Deadline::fits(double next_ms) const {
  if (!limited()) return true;
  const bool over = left_ms() < next_ms;
  return !(max_over_ranks_ ? max_over_ranks_(over ? 1.0 : 0.0) > 0 : over);
}

int64_t Deadline::steps_that_fit(double step_ms, int64_t max_steps) const {
  if (!limited() || max_steps <= 1) return std::max<int64_t>(1, max_steps);
  double n = step_ms > 0 ? std::floor(left_ms() / step_ms) : static_cast<double>(max_steps);
  n = std::clamp(n, 1.0, static_cast<double>(max_steps));
  if (max_over_ranks_) n = -max_over_ranks_(-n);  // the fewest over the ranks
  return static_cast<int64_t>(n);
}

Deadline Deadline::share(int64_t windows) const {
  Deadline d = *this;
  if (limited() && windows > 1)
    d.limit_ms_ = std::min(
        limit_ms_, elapsed_ms() + kShareFraction * std::max(0.0, left_ms()) / static_cast<double>(windows));
  return d;
}

void Deadline::settle() {
  if (!automatic_ || settled_) return;
  settled_ = true;
  limit_ms_ = std::min(kAutoBudgetMs, kAutoBudgetFactor * elapsed_ms());
}

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
  Progress progress;
  int64_t planned = 0;

  /// Runs up to `n` warm-up steps, each timed; stops once `deadline` has passed, keeping the
  /// last one as a window (pending). Collective (once a step) in a data-parallel run.
  void warm_up(int64_t n, const Progress& progress, const Deadline& deadline);
  /// ms/step of the slowest rank.
  double slowest(double ms) const { return world > 1 ? group->max({ms})[0] : ms; }
  Limits limits;  // the model's FLOPs and the machine's peak (train and synthetic rows)
};

namespace {

/// The note of a warm-up that the deadline ended after step `done` of `n` (`step_ms` each).
std::string cut_warmup_note(double step_ms, const Deadline& deadline, int64_t done, int64_t n) {
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

void Bench::Impl::warm_up(int64_t n, const Progress& progress, const Deadline& deadline) {
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

Bench::Bench(const config::ExperimentConfig& cfg, const Progress& progress, const Deadline& deadline)
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

void Bench::set_progress(const Progress& progress, int64_t planned) {
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

double Bench::window(const Deadline& deadline) {
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

Measurement Bench::result(size_t first, size_t count) {
  Impl& b = *impl_;
  const size_t from = std::min(first, b.windows.size());
  const size_t end = from + std::min(count, b.windows.size() - from);
  if (from >= end) throw std::runtime_error("no window was timed");
  Measurement m;
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
  set_windows(m, window_ms, b.world);
  m.short_windows = short_windows;
  if (short_windows > 0) m.notes.push_back(short_windows_note(short_windows, window_ms.size(), m.steps));
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
    m.data_wait_pct = 100.0 * sum.data / sum.total;
    m.h2d_pct = 100.0 * sum.h2d / sum.total;
    m.compute_pct = std::max(0.0, 100.0 - m.data_wait_pct - m.h2d_pct);
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

// ---------------------------------------------------------------- windows

void set_windows(Measurement& m, const std::vector<double>& window_ms, int64_t world,
                 const std::vector<int>& process) {
  m.repeat_ms = window_ms;
  m.repeat_process = process;
  const stats::Interval ms = stats::mean_interval(window_ms, process, stats::kRowLevel);
  m.ms_per_step = ms.point;
  // Global throughput: every rank's batch per step of the slowest rank.
  const double samples = 1000.0 * static_cast<double>(m.batch_size * world);
  m.samples_per_s = m.ms_per_step > 0 ? samples / m.ms_per_step : 0;
  m.samples_per_s_ci = stats::Interval{};
  m.samples_per_s_ci.point = m.samples_per_s;
  m.samples_per_s_ci.n = ms.n;
  if (ms.valid()) {
    m.samples_per_s_ci.lo = samples / ms.hi;
    m.samples_per_s_ci.hi = samples / ms.lo;
    m.samples_per_s_ci.level = ms.level;
  }
  m.spread_pct = 0;
  if (window_ms.size() > 1) {
    const double med = stats::median(window_ms);
    auto [lo, hi] = std::minmax_element(window_ms.begin(), window_ms.end());
    if (med > 0) m.spread_pct = 100.0 * (*hi - *lo) / med;
  }
  m.notes.erase(std::remove_if(m.notes.begin(), m.notes.end(),
                               [](const std::string& n) {
                                 return n.find(" windows were outliers") != std::string::npos;
                               }),
                m.notes.end());
  const auto odd = stats::outliers(window_ms);
  if (!odd.empty()) {
    std::string list;
    for (size_t i : odd) list += (list.empty() ? "" : ", ") + std::to_string(i + 1);
    m.notes.push_back(std::to_string(odd.size()) + " of " + std::to_string(window_ms.size()) +
                      " windows were outliers (window " + list +
                      ", far from the median): something else may have run then; they are kept");
  }
}

WindowPlan window_plan(const config::ExperimentConfig& cfg) {
  WindowPlan p;
  p.min_pairs = cfg.measure.repeats;
  p.deadline = Deadline(1000.0 * cfg.measure.max_s);
  // Asked only while measuring, when the row's group is joined.
  if (dist::world_size() > 1)
    p.deadline.agree_with([dist_cfg = cfg.dist, device = cfg.device](double v) {
      return dist::process_group(dist_cfg, dist::rank_device(device))->max({v})[0];
    });
  p.rule.target_pct = cfg.measure.target_ci_pct;
  p.rule.floor_pct = cfg.measure.noise_pct;
  return p;
}

WindowPlan in_processes(WindowPlan plan, int64_t processes) {
  plan.processes = processes;
  plan.min_pairs = std::max(plan.min_pairs, 2 * processes);
  return plan;
}

std::string short_windows_note(int64_t short_count, size_t kept, int64_t steps) {
  const std::string why =
      "the row's budget (measure.max_s) shortened them so that the windows measure.repeats asks for fit in "
      "it, or ended them between steps; each is kept, its ms/step over the steps it ran";
  return std::to_string(short_count) + " of its " + std::to_string(kept) +
         " windows ran fewer than measure.steps (" + std::to_string(steps) + ") steps: " + why;
}

stats::Interval speedup_between(const Measurement& a, const Measurement& b) {
  const double a_sps = a.samples_per_s * a.ms_per_step, b_sps = b.samples_per_s * b.ms_per_step;
  if (a_sps <= 0 || b_sps <= 0) return {};
  std::vector<double> a_ms = a.repeat_ms.empty() ? std::vector<double>{a.ms_per_step} : a.repeat_ms;
  const std::vector<double> b_ms = b.repeat_ms.empty() ? std::vector<double>{b.ms_per_step} : b.repeat_ms;
  for (double& v : a_ms) v *= b_sps / a_sps;
  // Each side's processes where it ran in several (a single figure has none).
  const auto& a_process = a.repeat_process.size() == a_ms.size() ? a.repeat_process : std::vector<int>{};
  const auto& b_process = b.repeat_process.size() == b_ms.size() ? b.repeat_process : std::vector<int>{};
  return stats::speedup_interval(a_ms, a_process, b_ms, b_process, false,
                                 stats::speedup_level(a.load.under_load || b.load.under_load));
}

namespace {

/// Switches between the sides of a comparison: the idle one paused.
struct Alternation {
  Side* active = nullptr;
  double run(Side& s, const Deadline& d) {
    if (active != &s) {
      if (active) active->pause();
      s.resume();
      active = &s;
    }
    return s.window(d);
  }
};

/// The kept part of `all`: from `k` on.
template <class T>
std::vector<T> from(const std::vector<T>& all, int64_t k) {
  return std::vector<T>(all.begin() + std::min<int64_t>(k, static_cast<int64_t>(all.size())), all.end());
}

/// Adds the process `s` timed its last window in to `to`, for a side timed in several.
void note_process(const Side& s, std::vector<int>& to) {
  if (s.last_process() >= 0) to.push_back(s.last_process());
}

}  // namespace

Comparison compare(Side& a, Side& b, const WindowPlan& plan,
                   const std::function<void(const Comparison&)>& on_pair) {
  Comparison c;
  Deadline deadline = plan.deadline;
  Alternation alt;
  const int64_t max_pairs = std::max<int64_t>(plan.max_pairs, plan.min_pairs);
  // Time per sample: A's windows scaled by B's samples per step over A's.
  const double scale = b.samples_per_step() / a.samples_per_step();
  std::vector<double> all_a, all_b;  // every pair, the transient included
  std::vector<int> proc_a, proc_b;   // the process of each, for sides in several
  std::mt19937 order(kPairOrderSeed);
  bool a_first = true;
  stats::Stopwatch wall;
  for (int64_t pairs = 1; pairs <= max_pairs; ++pairs) {
    // A block of two pairs: a drawn order, then the other.
    a_first = pairs % 2 == 1 ? (order() & 1u) == 0 : !a_first;
    Side& first = a_first ? a : b;
    Side& second = a_first ? b : a;
    // Until measure.repeats pairs are kept, each window gets its share of the time left, so that
    // they all fit: a slow step makes shorter windows rather than fewer pairs.
    const int64_t windows_due = 2 * (plan.min_pairs - static_cast<int64_t>(c.b_ms.size()));
    const double t1 = alt.run(first, deadline.share(windows_due));
    // The pair's second window needs one step of its side; without it the first is left out.
    if (pairs > 1 && !deadline.fits((a_first ? all_b : all_a).back())) {
      c.stop = StopRule::kBudget;
      c.unpaired = true;
      break;
    }
    const double t2 = alt.run(second, deadline.share(windows_due - 1));
    all_a.push_back(a_first ? t1 : t2);
    all_b.push_back(a_first ? t2 : t1);
    note_process(a, proc_a);
    note_process(b, proc_b);
    c.pair_ms = wall.ms() / static_cast<double>(pairs);
    c.transient = stats::transient_pairs(all_a, all_b);
    c.a_ms = from(all_a, c.transient);
    c.b_ms = from(all_b, c.transient);
    c.a_process = from(proc_a, c.transient);
    c.b_process = from(proc_b, c.transient);
    std::vector<double> a_scaled = c.a_ms;
    for (double& v : a_scaled) v *= scale;
    const int64_t kept = static_cast<int64_t>(c.b_ms.size());
    // A look: is the row under competing load so far (only from the first look on)?
    // Once seen, it stays: the figures since the row's start may dilute a burst later on.
    if (kept >= plan.min_pairs && plan.under_load && !c.under_load) c.under_load = plan.under_load();
    c.speedup = stats::speedup_interval(a_scaled, c.a_process, c.b_ms, c.b_process, true,
                                        stats::speedup_level(c.under_load));
    c.verdict = stats::verdict_of(c.speedup, plan.rule);
    if (on_pair) on_pair(c);
    if (kept >= plan.min_pairs) deadline.settle();
    // Another pair needs one step of each side at least.
    const bool time_left = deadline.fits(all_a.back() + all_b.back());
    if (kept < plan.min_pairs) {
      if (!time_left) {
        c.stop = StopRule::kBudget;
        break;
      }
      continue;
    }
    // Within noise ends the row at any look. Faster or slower ends it before the budget only
    // when an interval at kEarlyStopLevel says so too: each look is another chance for noise
    // to cross the line, so the early looks ask for strong evidence and the verdict at the
    // budget is read as reported. Under load there are no early looks at all: another
    // program's bursts are not the independent noise the interval assumes.
    if (c.verdict == stats::Verdict::kWithinNoise) {
      c.stop = StopRule::kDecided;
      break;
    }
    if (!time_left) {
      c.stop = StopRule::kBudget;
      break;
    }
    if (c.verdict != stats::Verdict::kUndecided && !c.under_load &&
        stats::verdict_of(
            stats::speedup_interval(a_scaled, c.a_process, c.b_ms, c.b_process, true, stats::kEarlyStopLevel),
            plan.rule) == c.verdict) {
      c.stop = StopRule::kDecided;
      break;
    }
  }
  if (alt.active) alt.active->pause();
  return c;
}

namespace {

/// undecided_note for sides in several processes: their spread, which more time hardly narrows.
std::string undecided_processes_note(const Comparison& c) {
  const std::vector<stats::LogTerm> t = stats::speedup_terms(c.a_ms, c.a_process, c.b_ms, c.b_process, true);
  if (t.size() != 2 || t[0].df < 1 || t[1].df < 1) return "";
  const stats::LogTerm &a = t[0], &b = t[1];
  // A process's own speed (the spread of the pairs' mean ratio by process), pooled over the sides.
  const double pooled = (a.var * (a.df + 1) * a.df + b.var * (b.df + 1) * b.df) / (a.df + b.df);
  char text[400];
  std::snprintf(
      text, sizeof text,
      "undecided in its time: a process's own speed varied by %.1f%% (one standard deviation) between "
      "processes started alike, %.0f a side; more processes (measure.processes) narrow the interval, "
      "more time hardly does",
      100.0 * (std::exp(std::sqrt(pooled)) - 1.0), a.df + 1);
  return text;
}

}  // namespace

std::string undecided_note(const Comparison& c, const WindowPlan& plan) {
  if (c.stop != StopRule::kBudget || c.verdict != stats::Verdict::kUndecided || c.under_load ||
      c.b_ms.size() < 3 || !c.speedup.valid())
    return "";
  if (!c.a_process.empty() && !c.b_process.empty()) return undecided_processes_note(c);
  // One pair's spread from the paired term: its variance is that of the mean, s^2 / n.
  const std::vector<stats::LogTerm> terms = stats::paired_terms(c.a_ms, c.b_ms);
  if (terms.empty() || terms.front().df < 2) return "";
  const size_t pairs = static_cast<size_t>(terms.front().df) + 1;
  const double sd = std::sqrt(terms.front().var * static_cast<double>(pairs));
  // The speedup's own point (its log), which scales A to B's samples per step.
  const int64_t n = stats::pairs_to_decide(std::log(c.speedup.point), sd, c.speedup.level, plan.rule);
  char text[400];
  const double spread_pct = 100.0 * (std::exp(sd) - 1.0);
  if (n <= 0 || n <= static_cast<int64_t>(pairs)) {
    std::snprintf(
        text, sizeof text,
        "undecided in its time: one pair's speedup varied by %.1f%% (one standard deviation) over %zu pairs",
        spread_pct, pairs);
    return text;
  }
  const double seconds = c.pair_ms * static_cast<double>(n + c.transient) / 1000.0;
  std::snprintf(
      text, sizeof text,
      "undecided in its time: one pair's speedup varied by %.1f%% (one standard deviation) over %zu pairs; "
      "at that spread about %lld pairs, about %.0f s of timing (measure.max_s), would decide it",
      spread_pct, pairs, static_cast<long long>(n), std::ceil(seconds));
  return text;
}

AloneRun measure_alone(Side& s, const WindowPlan& plan,
                       const std::function<void(const std::vector<double>&)>& on_window) {
  AloneRun r;
  Deadline deadline = plan.deadline;
  std::vector<double> all;  // every window, the transient included
  std::vector<int> processes;
  s.resume();
  const int64_t max_windows = std::max<int64_t>(plan.max_pairs, plan.min_pairs);
  for (int64_t n = 1; n <= max_windows; ++n) {
    // Until measure.repeats windows are kept, each gets its share of the time left.
    all.push_back(s.window(deadline.share(plan.min_pairs - static_cast<int64_t>(r.ms.size()))));
    note_process(s, processes);
    r.transient = stats::transient_end(all);
    r.ms = from(all, r.transient);
    r.process = from(processes, r.transient);
    if (on_window) on_window(r.ms);
    const bool enough = static_cast<int64_t>(r.ms.size()) >= plan.min_pairs;
    if (enough) deadline.settle();
    const bool time_left = deadline.fits(all.back());  // another step at least
    const stats::Interval i = stats::mean_interval(r.ms, r.process, stats::kRowLevel);
    if (enough && i.valid() && i.half_width_pct() <= plan.rule.target_pct) {
      r.stop = StopRule::kDecided;
      break;
    }
    if (!time_left) {
      r.stop = StopRule::kBudget;
      break;
    }
  }
  s.pause();
  return r;
}

std::vector<std::string> run_notes(int64_t transient, size_t kept, StopRule stop, const WindowPlan& plan,
                                   bool paired) {
  const int64_t min_pairs = plan.min_pairs;
  const Deadline& deadline = plan.deadline;
  std::vector<std::string> notes;
  const std::string unit = paired ? "pair" : "window";
  auto count = [&](int64_t n) { return std::to_string(n) + " " + unit + (n == 1 ? "" : "s"); };
  if (transient > 0)
    notes.push_back("warm-up: the first " + (transient == 1 ? unit : count(transient)) +
                    " still ran slower (the pipeline's start-up: above the " +
                    stats::level_text(stats::kTransientLevel) +
                    " prediction bound of the later windows): left out of every figure" +
                    (paired ? ", on both sides" : ""));
  if (stop == StopRule::kBudget && static_cast<int64_t>(kept) < min_pairs) {
    char budget[160];
    if (deadline.budget_s() > 0)
      std::snprintf(budget, sizeof budget, "measure.max_s, %.3g s", deadline.budget_s());
    else
      std::snprintf(budget, sizeof budget, "measure.max_s 0: automatic, %.3g s",
                    deadline.limit_ms() / 1000.0);
    notes.push_back(std::string("ran out of time: the row's budget (") + budget +
                    ", warm-up included) ended it after " + count(static_cast<int64_t>(kept)) + " of the " +
                    std::to_string(min_pairs) +
                    (plan.processes > 0 ? " planned (measure.repeats, and two for each of its " +
                                              std::to_string(plan.processes) + " processes)"
                                        : " measure.repeats asks for") +
                    "; its figures are those of what was timed");
  }
  return notes;
}

Measurement measure(const config::ExperimentConfig& cfg, const Progress& progress) {
  WindowPlan plan = window_plan(cfg);  // the deadline counts the pipeline's construction
  const c10::Device device = dist::rank_device(cfg.device);
  const int gpu = device.is_cuda() ? device.index() : -1;
  system::LoadSampler load;  // from the row's start, as a sweep's row (time_row)
  load.start(gpu, gpu >= 0 ? runtime::cuda::device_uuid(gpu) : "");
  // Process settings: the row's pipeline in measure.processes child processes started with them.
  std::unique_ptr<RowSide> side;
  if (!system::default_process(cfg.process) || cfg.program.enabled()) {
    side =
        std::move(start_row_processes(nullptr, cfg, cfg.measure.processes, {}, progress, plan.deadline).row);
    plan = in_processes(plan, cfg.measure.processes);
  } else {
    side = std::make_unique<Bench>(cfg, progress, plan.deadline);
  }
  RowSide& bench = *side;
  bench.set_progress(progress, plan.min_pairs);
  const AloneRun run = measure_alone(bench, plan);
  Measurement m = bench.result(static_cast<size_t>(run.transient), run.ms.size());
  m.transient_windows = run.transient;
  for (auto& n : run_notes(run.transient, run.ms.size(), run.stop, plan, false))
    m.notes.push_back(std::move(n));
  m.load = agreed_load(load, gpu, cfg);
  if (side->processes() > 0)
    m.notes.push_back("measured in processes of its own: " + side->process_description());
  return m;
}

system::LoadReport agreed_load(system::LoadSampler& load, int gpu, const config::ExperimentConfig& cfg) {
  system::LoadReport r = load.stop(gpu);
  const auto group = dist::process_group(cfg.dist, dist::rank_device(cfg.device));
  if (group->size() > 1) r.under_load = group->max({r.under_load ? 1.0 : 0.0})[0] > 0;
  return r;
}

std::string trace_identity_json(const config::ExperimentConfig& cfg, const TraceTarget& target,
                                const std::string& device, const system::LoadReport* load) {
  nlohmann::ordered_json j;
  j["version"] = kVersion;
  j["experiment"] = cfg.name;
  j["row"] = target.row;
  j["changes"] = target.changes;
  j["mode"] = config::name(cfg.measure.mode);
  j["device"] = device;
  j["batch_size"] = cfg.loader.batch_size;
  j["amp"] = config::name(cfg.optim.amp);  // `ptune analyze` reads it: a row in fp32 is told to try optim.amp
  j["bf16_native"] = runtime::cpu_info().bf16_native;  // ... on a CPU, only where bf16 is native
  j["profile_steps"] = cfg.measure.profile_steps;
  j["warmup_steps"] = warmup_steps(cfg, nullptr);
  // `ptune analyze` leaves a comparison with a trace recorded under load undecided.
  if (load) j["load"] = {{"under_load", load->under_load}, {"summary", load->summary()}};
  return j.dump();
}

namespace {

/// Removes the traces an earlier run left in `folder`: files trace_file_name() names, and the
/// trace.json older versions wrote. Returns nothing; a file that cannot be removed stays.
void remove_old_traces(const std::string& folder) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file(ec) && (is_trace_file_name(name) || name == "trace.json"))
      std::filesystem::remove(entry.path(), ec);
  }
}

}  // namespace

ProfileResult profile(const config::ExperimentConfig& cfg, double timed_ms_per_step,
                      const TraceTarget& target, const Progress& progress) {
  const c10::Device device = dist::rank_device(cfg.device);
  runtime::set_cpu_threads(dist::rank_cpu_threads(cfg.cpu_threads));
  auto group = dist::process_group(cfg.dist, device);
  if (device.is_cuda() && cfg.optim.cuda_graphs) prepare_profiler_for_cuda_graphs();  // before the capture
  Pipeline pipeline(cfg, device, group);
  const int64_t warmup = warmup_steps(cfg, nullptr);
  warm_up(pipeline, warmup, progress, "profile warmup");
  runtime::synchronize(device);

  // Every rank writes its own trace into the row's folder, which holds this run's only: the
  // first rank of each machine clears it (a folder on a shared file system too, before any
  // rank writes). A folder that cannot be written fails in finish(), on every rank alike,
  // after the recorded steps: a rank that left now would leave the others in an all-reduce.
  const bool write = cfg.measure.profile && !target.folder.empty();
  if (write) {
    if (dist::local_rank() == 0) {
      try {
        files::prepare_folder(target.folder, "measure.out_dir");
        remove_old_traces(target.folder);
      } catch (const std::exception&) {
      }
    }
    group->barrier();
  }
  const int64_t steps = cfg.measure.profile_steps;
  TraceRecorder recorder(device.is_cuda());
  if (group->distributed())
    recorder.add_metadata_json("distributedInfo",
                               distributed_info_json(group->backend_name(), group->rank(), group->size()));
  const int gpu = device.is_cuda() ? device.index() : -1;
  system::LoadSampler load;
  load.start(gpu, gpu >= 0 ? runtime::cuda::device_uuid(gpu) : "");
  Spans ignored;
  for (int64_t i = 0; i < steps; ++i) {
    {
      // As torch.profiler's step(): the span covers the wait for the batch, the copy and the
      // update (one replay with CUDA graphs), on the host.
      runtime::compat::UserScope span(ranges::profiler_step(warmup + i));
      pipeline.step(ignored);
    }
    if (progress) progress("profile", i + 1, steps);
  }
  runtime::synchronize(device);
  const system::LoadReport seen = agreed_load(load, gpu, cfg);
  recorder.add_metadata_json("ptune", trace_identity_json(cfg, target, device.str(), &seen));
  const std::string path =
      write ? (std::filesystem::path(target.folder) / trace_file_name()).string() : std::string();
  const TraceSummary t = recorder.finish(path);
  ProfileResult r;
  if (device.is_cuda() && timed_ms_per_step > 0)
    r.gpu_busy_pct = std::min(100.0, 100.0 * t.kernel_ms / static_cast<double>(steps) / timed_ms_per_step);
  r.trace_path = path;
  return r;
}

std::vector<double> loss_curve(const config::ExperimentConfig& cfg, int64_t steps) {
  const c10::Device device = dist::rank_device(cfg.device);
  runtime::set_cpu_threads(dist::rank_cpu_threads(cfg.cpu_threads));
  auto group = dist::process_group(cfg.dist, device);
  engine::Trainer trainer(cfg, device, group);
  data::Loader loader(engine::make_dataset(cfg),
                      engine::loader_options(cfg, device, group->rank(), group->size()));
  EndlessBatches batches(loader);
  engine::Feeder feeder([&]() -> std::optional<data::Batch> { return batches.next(); }, device);
  std::vector<at::Tensor> losses;
  for (int64_t i = 0; i < steps; ++i) {
    auto [images, labels] = trainer.to_device(*feeder.next());
    losses.push_back(trainer.step(images, labels));
  }
  // One host read at the end, not one per step.
  at::Tensor all = torch::stack(losses).to(at::kDouble).cpu();
  std::vector<double> curve(all.data_ptr<double>(), all.data_ptr<double>() + all.numel());
  if (group->size() > 1) {
    curve = group->sum(curve);
    for (auto& v : curve) v /= static_cast<double>(group->size());
  }
  return curve;
}

ConvergenceVerdict compare_convergence(const std::vector<double>& curve, const std::vector<double>& reference,
                                       double tolerance) {
  ConvergenceVerdict v;
  const size_t n = std::min(curve.size(), reference.size());
  if (n == 0) return v;
  const size_t from = n - std::max<size_t>(1, n / 4);
  for (size_t i = from; i < n; ++i) {
    v.mean_loss += curve[i];
    v.reference_mean_loss += reference[i];
  }
  v.mean_loss /= static_cast<double>(n - from);
  v.reference_mean_loss /= static_cast<double>(n - from);
  const double rel = v.reference_mean_loss != 0
                         ? std::abs(v.mean_loss - v.reference_mean_loss) / std::abs(v.reference_mean_loss)
                         : 0;
  v.altered = rel > tolerance;
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "convergence %s: mean loss %.4f over steps %zu-%zu vs %.4f in the first row (%+.1f%%, "
                "tolerance %.0f%%)",
                v.altered ? "altered" : "unchanged", v.mean_loss, from + 1, n, v.reference_mean_loss,
                100.0 * (v.mean_loss - v.reference_mean_loss) /
                    (v.reference_mean_loss != 0 ? v.reference_mean_loss : 1.0),
                100.0 * tolerance);
  v.text = buf;
  return v;
}

}  // namespace ptune::measure
