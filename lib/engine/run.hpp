#pragma once
/// The `train` and `eval` jobs: whole epochs with progress, checkpoints and resume; and loss
/// and top-1 accuracy of weights over a dataset.

#include <atomic>
#include <functional>
#include <optional>
#include <string>

#include "config/config.hpp"

namespace ptune::engine {

/// A progress report of `ptune train`.
struct TrainProgress {
  int64_t step = 0, total_steps = 0, epoch = 0;
  double loss = 0;            // loss of the latest step
  double samples_per_s = 0;   // since the start (or resume)
  double eta_s = 0;           // remaining time at that rate
};

struct TrainOptions {
  std::optional<std::string> resume;        // checkpoint to resume from
  std::optional<std::string> save_weights;  // torch.save-format state_dict written at the end
  std::function<void(const TrainProgress&)> on_progress;
  std::function<void(const std::string&)> on_note;  // checkpoints written, notes
  const std::atomic<bool>* interrupted = nullptr;   // stop (checkpointing first) when set
};

struct TrainSummary {
  int64_t steps = 0;          // steps done in all (including before a resume)
  double final_loss = 0;
  double samples_per_s = 0;
  std::string last_checkpoint;
};

/// Trains for cfg.train.epochs (or max_steps), checkpointing every cfg.train.checkpoint_every
/// steps and at the end into cfg.train.checkpoint_dir. Throws Interrupted after checkpointing
/// when interrupted.
TrainSummary train(const config::ExperimentConfig& cfg, const TrainOptions& options);

struct EvalResult {
  double loss = 0;      // mean cross-entropy
  double top1 = 0;      // fraction of correct top-1 predictions
  int64_t samples = 0;  // samples evaluated
};

/// Evaluates `weights` (a torch.save(state_dict) file) on the config's dataset, every sample
/// once, in order, BatchNorm in eval mode.
EvalResult evaluate(const config::ExperimentConfig& cfg, const std::string& weights);

}  // namespace ptune::engine
