#pragma once
/// One row's pipeline as the bench, the profiler and the convergence check run it: the trainer
/// (train and synthetic rows), the loader cycling through epochs, the feeder and the input
/// conversion on the device, and one step of the row's mode with its host-clock split.

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "config/config.hpp"
#include "core/errors.hpp"
#include "core/stats.hpp"
#include "data/loader.hpp"
#include "dist/group.hpp"
#include "engine/feeder.hpp"
#include "engine/trainer.hpp"
#include "measure/measurement.hpp"
#include "runtime/cuda_support.hpp"
#include "runtime/device.hpp"

namespace ptune::bench {

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
void warm_up(Pipeline& p, int64_t n, const measure::Progress& progress, const char* phase);

}  // namespace ptune::bench
