#pragma once
/// The training engine: a model, its optimizer and the train step, configured by one
/// ExperimentConfig. Each optimization in the config is applied here and only here.

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/optim/optimizer.h>

#include "config/config.hpp"
#include "data/loader.hpp"
#include "dist/grad_sync.hpp"
#include "dist/group.hpp"
#include "engine/cuda_graph.hpp"
#include "engine/grad_scaler.hpp"
#include "models/model.hpp"

namespace ptune::engine {

/// Loader options for a config (batch size, workers, normalization, output dtype...).
/// `rank`/`world_size` select this process's shard.
data::LoaderOptions loader_options(const config::ExperimentConfig& cfg, const c10::Device& device,
                                   int64_t rank = 0, int64_t world_size = 1);

/// The dataset a config describes, producing images of the size the model sees.
std::shared_ptr<const data::Dataset> make_dataset(const config::ExperimentConfig& cfg);

/// Host batches to model inputs on the device: the copy (non_blocking from pinned memory) and,
/// for uint8 batches, the conversion to float, the resize (loader.gpu_resize) and the
/// normalization on the device; channels_last when the model uses it.
class DeviceInput {
 public:
  DeviceInput(const config::ExperimentConfig& cfg, const c10::Device& device);
  /// (images, labels) on the device, ready for Trainer::step().
  std::pair<at::Tensor, at::Tensor> operator()(const data::Batch& batch) const;

 private:
  /// A float batch buffer of `sizes` in the batch's layout: a pooled one that nothing refers to
  /// any more (the previous step's graph is gone), else a new one kept for reuse.
  at::Tensor take_buffer(at::IntArrayRef sizes) const;

  c10::Device device_;
  int64_t image_size_;
  bool channels_last_;
  at::Tensor scale_, shift_;              // [1,3,1,1] on the device: x * scale + shift
  data::Normalization norm_;              // the same on the host, as the loader's float output computes it
  mutable std::vector<at::Tensor> pool_;  // the CPU's float batches, reused step after step
};

class Trainer {
 public:
  /// Builds the model (seeded from cfg.seed, weights from model.weights if set), moves it to
  /// `device`, and creates the optimizer. Throws ConfigError for options the device cannot
  /// honour ("optim.cudnn_benchmark needs a CUDA device; ...") and DataError for bad weights.
  /// With a distributed `group` (data parallel, as PyTorch's DDP): rank 0's parameters and
  /// buffers are broadcast to every rank now, and every step averages gradients over the ranks
  /// with bucketed all-reduces that overlap backward (dist.bucket_mb); throws as
  /// dist::Pending::wait_host when the broadcast fails. Without one (or a single-process group), the
  /// trainer is local.
  Trainer(const config::ExperimentConfig& cfg, const c10::Device& device,
          std::shared_ptr<dist::Group> group = nullptr);

  /// Moves a host batch to the device (non_blocking from pinned memory); uint8 images are
  /// converted to float and normalized there (DeviceInput). Returns (images, labels) ready for step().
  std::pair<at::Tensor, at::Tensor> to_device(const data::Batch& batch) const { return input_(batch); }

  /// Warm-up steps the config needs before a step is representative: optim.cuda_graphs runs
  /// kGraphWarmupSteps eager steps and then captures (and replays) the graph in the next one;
  /// optim.cudnn_benchmark autotunes in the first step. 0 when nothing needs warming up.
  static int64_t warmup_steps_needed(const config::ExperimentConfig& cfg);

  /// One training step: zero_grad, forward (autocast if enabled), cross-entropy, backward,
  /// optimizer update. Returns the loss as a device tensor (no host synchronization, but for
  /// fp16 with AdamW, whose skip-on-inf reads found_inf on the host).
  /// With dist.accumulate = A > 1 each call is one micro-step: gradients of loss / A accumulate
  /// over A calls, without all-reduce (no_sync) but on the last, which then all-reduces (when
  /// distributed), unscales (fp16) and updates; zero_grad happens before the first.
  /// Throws std::runtime_error when a collective fails (a rank died, dist.timeout_s passed).
  at::Tensor step(const at::Tensor& images, const at::Tensor& labels);

  /// Evaluation forward pass: returns (summed loss, number of correct top-1 predictions) as
  /// device tensors, without gradients.
  std::pair<at::Tensor, at::Tensor> evaluate(const at::Tensor& images, const at::Tensor& labels);

  /// Saves model, optimizer state and progress counters (LibTorch archive format), with what
  /// load_checkpoint checks: architecture, classes, optimizer, AMP mode, batch and world size.
  void save_checkpoint(const std::string& path, int64_t step, int64_t epoch) const;
  /// Restores a checkpoint; returns (step, epoch). Checks it against the config before loading
  /// anything: another model.arch, model.num_classes, optim.kind, or fp16 on one side only is a
  /// DataError saying so; another loader.batch_size or world size is allowed (the step count
  /// continues; the epoch is redone from its start with the new batches) and said in `notes`.
  /// A weights file, a folder, an empty, truncated or unreadable file is a DataError naming
  /// what it is. `world_size` is this run's number of ranks.
  std::pair<int64_t, int64_t> load_checkpoint(const std::string& path, int64_t world_size = 1,
                                              std::vector<std::string>* notes = nullptr);
  /// Notes from reading model.weights (a state_dict found under a key, a stripped "module."
  /// prefix); empty when there were none.
  const std::vector<std::string>& weights_file_notes() const { return weights_file_notes_; }

  models::Model& model() { return model_; }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  const c10::Device& device() const { return device_; }
  /// A note from loading weights (e.g. a replaced classifier head), or "".
  const std::string& weights_note() const { return weights_note_; }
  /// The process group the trainer averages gradients over (a single-process one if local).
  dist::Group& group() { return *group_; }
  /// What happened to optim.cuda_graphs, e.g. "optim.cuda_graphs: capture failed (...); ran
  /// eagerly", or "optim.cuda_graphs: 1 batch of another shape (4 samples, not 8) ran eagerly",
  /// or "" when every step replayed the graph (or it is off).
  std::string graph_note() const;

  /// True when optim.cuda_graphs is on but the capture failed, so every step runs eagerly.
  bool graph_failed() const { return graph_ && !graph_note_.empty(); }
  /// Peak bytes allocated on the device while the step was captured (activations and
  /// workspaces that now live in the graph's private pool, plus everything alive then); 0
  /// without a captured graph.
  int64_t graph_peak_bytes() const { return graph_ ? graph_->capture_peak_bytes() : 0; }

  /// The loss scaler (optim.amp fp16); nullptr otherwise.
  const GradScaler* scaler() const { return scaler_ ? &*scaler_ : nullptr; }

  /// The gradient synchronizer; nullptr when not distributed.
  const dist::GradSync* grad_sync() const { return sync_.get(); }

 private:
  config::ExperimentConfig cfg_;
  c10::Device device_;
  models::Model model_{nullptr};
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  DeviceInput input_;
  std::string weights_note_;
  std::vector<std::string> weights_file_notes_;
  std::optional<GradScaler> scaler_;  // optim.amp fp16
  // optim.cuda_graphs: the step captured once and replayed; inputs go through static buffers.
  static constexpr int kGraphWarmupSteps = 3;  // eager steps on the side stream before capture
  std::unique_ptr<GraphStep> graph_;
  at::Tensor static_images_, static_labels_, static_loss_;
  int64_t graph_warmup_done_ = 0;
  std::string graph_note_;         // capture failed: every step runs eagerly
  int64_t graph_misfits_ = 0;      // batches of another shape, run eagerly
  int64_t graph_misfit_size_ = 0;  // the last such batch's size
  /// forward, backward, (all-reduce), update; no host synchronization with SGD.
  at::Tensor run_step(const at::Tensor& images, const at::Tensor& labels);
  at::Tensor graph_step(const at::Tensor& images, const at::Tensor& labels);
  std::shared_ptr<dist::Group> group_;        // never null: single-process when local
  std::unique_ptr<dist::GradSync> sync_;      // distributed only
  int64_t micro_ = 0;                         // micro-steps done of the current optimizer step
  std::string step_range_, zero_grad_range_;  // profiler range names: "Optimizer.step#SGD.step"...
};

}  // namespace ptune::engine
