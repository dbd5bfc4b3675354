#include "engine/run.hpp"

#include <filesystem>

#include <torch/torch.h>

#include "engine/device.hpp"
#include "engine/trainer.hpp"
#include "errors.hpp"
#include "measure/stats.hpp"
#include "models/state_dict_io.hpp"

namespace ptune::engine {

TrainSummary train(const config::ExperimentConfig& cfg, const TrainOptions& options) {
  const c10::Device device = resolve_device(cfg.device);
  set_cpu_threads(cfg.cpu_threads);
  Trainer trainer(cfg, device);
  if (!trainer.weights_note().empty() && options.on_note) options.on_note(trainer.weights_note());
  data::Loader loader(make_dataset(cfg), loader_options(cfg, device));
  const int64_t per_epoch = loader.batches_per_epoch();
  if (per_epoch == 0)
    throw ConfigError("loader.batch_size: " + std::to_string(cfg.loader.batch_size) +
                      " is larger than the dataset's " + std::to_string(cfg.data.num_samples) + " samples");
  int64_t total = per_epoch * cfg.train.epochs;
  if (cfg.train.max_steps > 0) total = std::min(total, cfg.train.max_steps);

  int64_t step = 0, epoch = 0;
  if (options.resume) {
    std::tie(step, epoch) = trainer.load_checkpoint(*options.resume);
    if (options.on_note) options.on_note("resumed from " + *options.resume + " at step " + std::to_string(step));
  }
  std::filesystem::create_directories(cfg.train.checkpoint_dir);
  TrainSummary summary;
  auto checkpoint = [&] {
    std::string path = (std::filesystem::path(cfg.train.checkpoint_dir) /
                        (cfg.name + "-step" + std::to_string(step) + ".pt")).string();
    trainer.save_checkpoint(path, step, epoch);
    summary.last_checkpoint = path;
    if (options.on_note) options.on_note("checkpoint " + path);
  };

  measure::Stopwatch clock;
  const int64_t start_step = step;
  at::Tensor loss;
  while (step < total) {
    epoch = step / per_epoch;
    loader.start_epoch(epoch);
    // Skip the batches of this epoch that a resumed run already trained on.
    for (int64_t skip = step % per_epoch; skip > 0; --skip) loader.next();
    while (step < total) {
      auto batch = loader.next();
      if (!batch) break;
      auto [images, labels] = trainer.to_device(*batch);
      loss = trainer.step(images, labels);
      ++step;
      const bool log = step % cfg.train.log_every == 0 || step == total;
      if (log && options.on_progress) {
        TrainProgress p;
        p.step = step;
        p.total_steps = total;
        p.epoch = epoch;
        p.loss = loss.item<double>();
        double secs = clock.ms() / 1000.0;
        p.samples_per_s = secs > 0 ? (step - start_step) * cfg.loader.batch_size / secs : 0;
        p.eta_s = p.samples_per_s > 0 ? (total - step) * cfg.loader.batch_size / p.samples_per_s : 0;
        options.on_progress(p);
      }
      if (cfg.train.checkpoint_every > 0 && step % cfg.train.checkpoint_every == 0 && step < total) checkpoint();
      if (options.interrupted && options.interrupted->load()) {
        checkpoint();
        throw Interrupted();
      }
    }
  }
  synchronize(device);
  checkpoint();
  summary.steps = step;
  summary.final_loss = loss.defined() ? loss.item<double>() : 0.0;
  double secs = clock.ms() / 1000.0;
  summary.samples_per_s = secs > 0 ? (step - start_step) * cfg.loader.batch_size / secs : 0;
  if (options.save_weights) {
    models::write_state_dict(*options.save_weights, models::state_dict(*trainer.model()));
    if (options.on_note) options.on_note("weights " + *options.save_weights);
  }
  return summary;
}

EvalResult evaluate(const config::ExperimentConfig& cfg_in, const std::string& weights) {
  config::ExperimentConfig cfg = cfg_in;
  cfg.model.weights = weights;
  cfg.loader.shuffle = false;
  cfg.loader.drop_last = false;
  const c10::Device device = resolve_device(cfg.device);
  set_cpu_threads(cfg.cpu_threads);
  Trainer trainer(cfg, device);
  if (!trainer.weights_note().empty())
    throw DataError(trainer.weights_note() + "; evaluation needs a matching head");
  trainer.model()->eval();
  data::Loader loader(make_dataset(cfg), loader_options(cfg, device));
  loader.start_epoch(0);
  at::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
  at::Tensor correct = torch::zeros({}, torch::TensorOptions().dtype(torch::kLong).device(device));
  int64_t n = 0;
  while (auto batch = loader.next()) {
    auto [images, labels] = trainer.to_device(*batch);
    auto [l, c] = trainer.evaluate(images, labels);
    loss_sum += l.to(torch::kFloat64);
    correct += c;
    n += labels.size(0);
  }
  EvalResult r;
  r.samples = n;
  r.loss = n ? loss_sum.item<double>() / n : 0.0;
  r.top1 = n ? static_cast<double>(correct.item<int64_t>()) / n : 0.0;
  return r;
}

}  // namespace ptune::engine
