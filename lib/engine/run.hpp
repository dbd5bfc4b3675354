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
  double loss = 0;           // loss of the latest step (mean over ranks when data parallel)
  double samples_per_s = 0;  // since the start (or resume), all ranks together
  double eta_s = 0;          // remaining time at that rate
};

struct TrainOptions {
  std::optional<std::string> resume;        // checkpoint to resume from
  std::optional<std::string> save_weights;  // torch.save-format state_dict written at the end
  std::string config_path;                  // the config file, which save_weights must not be
  std::function<void(const TrainProgress&)> on_progress;
  std::function<void(const std::string&)> on_note;  // checkpoints written, notes
  const std::atomic<bool>* interrupted = nullptr;   // stop (checkpointing first) when set
};

struct TrainSummary {
  int64_t steps = 0;    // steps done in all (including before a resume)
  int64_t trained = 0;  // steps trained by this run (0: a resumed run already at or past its end)
  int64_t total = 0;    // the step this run ends at (train.max_steps, or train.epochs' steps)
  double final_loss = 0;
  double samples_per_s = 0;
  std::string last_checkpoint;
};

/// Trains for cfg.train.epochs (or max_steps), checkpointing every cfg.train.checkpoint_every
/// steps and at the end into cfg.train.checkpoint_dir. Throws Interrupted after checkpointing
/// when interrupted. When the environment names a data-parallel world (torchrun, Slurm,
/// ptune launch), this process is one rank: it joins the group (dist::process_group), trains
/// its shard with gradients averaged over the ranks, and only rank 0 writes checkpoints and
/// weights and gets on_note; progress and the summary report the loss averaged over ranks and
/// samples/s of all ranks at the slowest rank's pace; an interrupt is agreed at the next
/// log_every step. Throws ConfigError when checkpoint_every is not a multiple of
/// dist.accumulate, std::runtime_error when the rendezvous or a collective fails, WriteError
/// when a checkpoint or the weights cannot be written (training stops; the message names the
/// last good checkpoint). Warns (log::warn) before the first step when the checkpoints' or the
/// weights' file system has less free space than they will take.
TrainSummary train(const config::ExperimentConfig& cfg, const TrainOptions& options);

struct EvalResult {
  double loss = 0;      // mean cross-entropy
  double top1 = 0;      // fraction of correct top-1 predictions
  int64_t samples = 0;  // samples evaluated
};

/// Evaluates `weights` (a torch.save(state_dict) file) on the config's dataset, every sample
/// once, in order, BatchNorm in eval mode. Data parallel (ptune launch, torchrun, Slurm):
/// each rank evaluates its shard on its own device (shards differ by at most one sample and
/// cover the dataset), and every rank returns the totals over all ranks. `interrupted` (when
/// given) is read between batches: once set, the evaluation stops and throws Interrupted
/// (each rank on its own: it holds no collective until the end). Throws std::runtime_error
/// when the rendezvous or a collective fails.
EvalResult evaluate(const config::ExperimentConfig& cfg, const std::string& weights,
                    const std::atomic<bool>* interrupted = nullptr);

/// The step a ptune checkpoint (Trainer::save_checkpoint) was written at; nullopt when `path`
/// is not one. Throws nothing.
std::optional<int64_t> checkpoint_step(const std::string& path);

}  // namespace ptune::engine
