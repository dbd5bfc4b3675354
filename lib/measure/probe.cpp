#include "measure/probe.hpp"

#include <cmath>

#include <torch/torch.h>

#include "dist/group.hpp"
#include "engine/cuda_support.hpp"
#include "engine/device.hpp"
#include "engine/feeder.hpp"
#include "engine/trainer.hpp"
#include "errors.hpp"
#include "measure/stats.hpp"
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

}  // namespace

Measurement measure(const config::ExperimentConfig& cfg, const Progress& progress,
                    const std::string& trace_path) {
  // Data parallel when the environment names a world: this rank's device and shard, gradients
  // averaged by the trainer, and the slowest rank's time reported.
  const c10::Device device = dist::rank_device(cfg.device);
  engine::set_cpu_threads(dist::rank_cpu_threads(cfg.cpu_threads));
  const std::string& mode = cfg.measure.mode;
  auto group = dist::process_group(cfg.dist, device);
  const int64_t world = group->size();

  // The trainer checks the device-specific options first, so a CUDA-only option fails fast.
  std::optional<engine::Trainer> trainer;
  if (mode != "data") trainer.emplace(cfg, device, group);
  else if (cfg.loader.pin_memory) engine::require_cuda(device, "loader.pin_memory");

  data::Loader loader(engine::make_dataset(cfg), engine::loader_options(cfg, device, group->rank(), world));
  EndlessBatches batches(loader);
  // On a GPU the feeder copies the next batch on its own stream while this one trains.
  engine::Feeder feeder([&]() -> std::optional<data::Batch> { return batches.next(); }, device);

  std::pair<at::Tensor, at::Tensor> fixed;  // synthetic: one batch, already on the device
  if (mode == "synthetic") fixed = trainer->to_device(batches.next());

  // On a GPU the host does not wait for the device inside a step, so host clocks cannot split
  // it; CUDA events on the compute stream do: per timed step, `ready` (the host has the batch),
  // `copied` (the stream has waited for its copy and converted it), `done` (after the step).
  std::optional<engine::cuda::EventMarks> marks;
  if (device.is_cuda() && mode != "synthetic") marks.emplace(device.index());
  struct StepMarks {
    size_t ready = 0, copied = 0, done = 0;
  };
  std::vector<StepMarks> step_marks;
  bool timed = false;

  at::Tensor last_loss;
  auto one_step = [&](Spans& s) {
    Stopwatch sw;
    if (mode == "synthetic") {
      last_loss = trainer->step(fixed.first, fixed.second);
      s.compute += sw.ms();
      return;
    }
    const bool mark = marks && timed;
    StepMarks sm;
    double waited = 0;
    data::Batch batch = *feeder.next(&waited, [&] {
      if (mark) sm.ready = marks->record();
    });
    s.data += waited;
    const double t_data = sw.ms();
    if (mode == "data") {
      s.h2d += t_data - waited;
      if (mark) sm.copied = sm.done = marks->record(), step_marks.push_back(sm);
      return;
    }
    auto [images, labels] = trainer->to_device(batch);
    if (mark) sm.copied = marks->record();
    const double t_copy = sw.ms();
    s.h2d += t_copy - waited;
    last_loss = trainer->step(images, labels);
    if (mark) sm.done = marks->record(), step_marks.push_back(sm);
    s.compute += sw.ms() - t_copy;
  };

  const int64_t warm = cfg.measure.warmup_steps, steps = cfg.measure.steps;
  {
    Spans ignored;
    for (int64_t i = 0; i < warm; ++i) {
      one_step(ignored);
      if (progress) progress("warmup", i + 1, warm);
    }
  }
  engine::synchronize(device);
  group->barrier();  // every rank starts its timed window together
  if (device.is_cuda()) engine::cuda::reset_peak_memory(device.index());

  Measurement m;
  m.batch_size = cfg.loader.batch_size;
  m.steps = steps;
  Spans sum;
  timed = true;
  for (int64_t r = 0; r < cfg.measure.repeats; ++r) {
    Spans s;
    if (marks) marks->clear(), step_marks.clear();
    Stopwatch wall;
    for (int64_t i = 0; i < steps; ++i) {
      one_step(s);
      if (progress) progress("measure", r * steps + i + 1, cfg.measure.repeats * steps);
    }
    engine::synchronize(device);
    s.total = wall.ms();
    if (marks) {
      // The device's view: waiting for the copy (and the uint8 conversion) and computing, as
      // the events saw them; the rest of the wall time the device waited for the host.
      double copy = 0, compute = 0;
      for (const StepMarks& sm : step_marks) {
        copy += marks->elapsed_ms(sm.ready, sm.copied);
        compute += marks->elapsed_ms(sm.copied, sm.done);
      }
      s.h2d = std::min(copy, s.total);
      s.compute = std::min(compute, s.total - s.h2d);
      s.data = s.total - s.h2d - s.compute;
    }
    m.repeat_ms.push_back(s.total / static_cast<double>(steps));
    sum.data += s.data;
    sum.h2d += s.h2d;
    sum.total += s.total;
  }
  if (world > 1) {
    // A step takes as long as its slowest rank (they meet in the all-reduce): each repeat's
    // ms/step is the maximum over ranks; the shares of the step are the ranks' mean.
    m.repeat_ms = group->max(m.repeat_ms);
    auto shares = group->sum({sum.data, sum.h2d, sum.total});
    sum.data = shares[0];
    sum.h2d = shares[1];
    sum.total = shares[2];
  }
  m.ms_per_step = median(m.repeat_ms);
  // Global throughput: every rank's batch per step of the slowest rank.
  m.samples_per_s = m.ms_per_step > 0
                        ? 1000.0 * static_cast<double>(m.batch_size * world) / m.ms_per_step
                        : 0;
  if (m.repeat_ms.size() > 1 && m.ms_per_step > 0) {
    auto [lo, hi] = std::minmax_element(m.repeat_ms.begin(), m.repeat_ms.end());
    m.spread_pct = 100.0 * (*hi - *lo) / m.ms_per_step;
  }
  if (sum.total > 0) {
    m.data_wait_pct = 100.0 * sum.data / sum.total;
    m.h2d_pct = 100.0 * sum.h2d / sum.total;
    m.compute_pct = std::max(0.0, 100.0 - m.data_wait_pct - m.h2d_pct);
  }
  if (last_loss.defined()) m.loss = group->sum({last_loss.item<double>()})[0] / static_cast<double>(world);
  if (device.is_cuda()) m.device_mem_bytes = engine::cuda::total_memory(device.index());
  if (device.is_cuda())
    m.peak_mem_bytes = static_cast<int64_t>(group->max({static_cast<double>(engine::cuda::peak_memory(device.index()))})[0]);

  if (device.is_cuda() || cfg.measure.profile) {
    // A few more steps under the profiler: GPU busy, and the trace users open in Perfetto.
    const bool write = cfg.measure.profile && !trace_path.empty() && group->rank() == 0;
    TraceRecorder recorder(device.is_cuda());
    Spans ignored;
    timed = false;
    for (int64_t i = 0; i < cfg.measure.profile_steps; ++i) one_step(ignored);
    engine::synchronize(device);
    TraceSummary t = recorder.finish(write ? trace_path : "");
    m.gpu_busy_pct = t.gpu_busy_pct;
    if (write) m.trace_path = trace_path;
  }
  if (trainer && !trainer->graph_note().empty()) m.notes.push_back(trainer->graph_note());
  return m;
}

std::vector<double> loss_curve(const config::ExperimentConfig& cfg, int64_t steps) {
  const c10::Device device = dist::rank_device(cfg.device);
  engine::set_cpu_threads(dist::rank_cpu_threads(cfg.cpu_threads));
  auto group = dist::process_group(cfg.dist, device);
  engine::Trainer trainer(cfg, device, group);
  data::Loader loader(engine::make_dataset(cfg), engine::loader_options(cfg, device, group->rank(), group->size()));
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
  const double rel = v.reference_mean_loss != 0 ? std::abs(v.mean_loss - v.reference_mean_loss) / std::abs(v.reference_mean_loss) : 0;
  v.altered = rel > tolerance;
  char buf[200];
  std::snprintf(buf, sizeof buf, "convergence %s: mean loss %.4f over steps %zu-%zu vs %.4f in the first row (%+.1f%%, tolerance %.0f%%)",
                v.altered ? "altered" : "unchanged", v.mean_loss, from + 1, n, v.reference_mean_loss,
                100.0 * (v.mean_loss - v.reference_mean_loss) / (v.reference_mean_loss != 0 ? v.reference_mean_loss : 1.0),
                100.0 * tolerance);
  v.text = buf;
  return v;
}

}  // namespace ptune::measure
