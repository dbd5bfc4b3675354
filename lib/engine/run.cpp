#include "engine/run.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <torch/torch.h>

#include "dist/group.hpp"
#include "engine/cannot_help.hpp"
#include "runtime/device.hpp"
#include "engine/feeder.hpp"
#include "engine/trainer.hpp"
#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/log.hpp"
#include "core/stats.hpp"
#include "models/state_dict_io.hpp"
#include "models/zip_records.hpp"

namespace ptune::engine {
namespace {

/// Bytes of a module's parameters and buffers (its state_dict, as --save-weights writes it),
/// and of its parameters alone.
std::pair<uint64_t, uint64_t> model_bytes(const torch::nn::Module& module) {
  uint64_t all = 0, params = 0;
  for (const auto& [name, t] : models::state_dict(module)) all += t.numel() * t.element_size();
  for (const auto& p : module.parameters()) params += p.numel() * p.element_size();
  return {all, params};
}

/// Warns, before any step, when the file system of the checkpoints (and of --save-weights)
/// has less free space than the files will take: the parameters and buffers, plus the
/// optimizer's state in a checkpoint (SGD's momentum, AdamW's two moments).
void warn_if_no_room(const config::ExperimentConfig& cfg, const TrainOptions& options,
                     const torch::nn::Module& model) {
  const auto [weights, params] = model_bytes(model);
  const uint64_t optim_state = cfg.optim.kind == config::OptimKind::kAdamW ? 2 * params
                               : cfg.optim.momentum != 0                   ? params
                                                                           : 0;
  const uint64_t checkpoint = weights + optim_state + weights / 100 + (64u << 10);  // + the archive's records
  const uint64_t weights_file = weights + weights / 100 + (16u << 10);
  const std::string& dir = cfg.train.checkpoint_dir;
  const auto dir_fs = files::file_system_of(dir);
  const auto dir_free = files::free_bytes(dir);
  std::optional<uint64_t> w_fs, w_free;
  if (options.save_weights) {
    w_fs = files::file_system_of(*options.save_weights);
    w_free = files::free_bytes(*options.save_weights);
  }
  const bool shared = options.save_weights && dir_fs && w_fs && *dir_fs == *w_fs;
  if (shared) {
    if (dir_free && *dir_free < checkpoint + weights_file)
      log::warn("train.checkpoint_dir '" + dir + "' and --save-weights '" + *options.save_weights +
                "' share a file system with " + files::human_bytes(*dir_free) +
                " free; a checkpoint (about " + files::human_bytes(checkpoint) + ") and the weights (about " +
                files::human_bytes(weights_file) + ") need " + files::human_bytes(checkpoint + weights_file) +
                ": they will not both fit");
    return;
  }
  if (dir_free && *dir_free < checkpoint)
    log::warn("train.checkpoint_dir '" + dir + "' has " + files::human_bytes(*dir_free) +
              " free; a checkpoint of this run takes about " + files::human_bytes(checkpoint) +
              ": it will not fit");
  if (options.save_weights && w_free && *w_free < weights_file)
    log::warn("--save-weights '" + *options.save_weights + "': its file system has " +
              files::human_bytes(*w_free) + " free; the weights take about " +
              files::human_bytes(weights_file) + ": they will not fit");
}

/// A data-parallel run's ranks agree on a stop signal about this often (seconds), so that
/// Ctrl-C ends a run of slow steps within about a step, not at the next log point.
constexpr double kStopCheckS = 0.5;

/// Steps between two such agreements when `steps` took `secs` (the slowest rank's): about
/// kStopCheckS of them, at least 1, at most `log_every` (the log points agree anyway).
int64_t stop_check_interval(double secs, int64_t steps, int64_t log_every) {
  if (secs <= 0 || steps <= 0) return log_every;
  const double per_step = secs / static_cast<double>(steps);
  const auto every = static_cast<int64_t>(std::llround(kStopCheckS / per_step));
  return std::clamp<int64_t>(every, 1, std::max<int64_t>(1, log_every));
}

}  // namespace

namespace {

/// The steps the run trains: epochs of the loader's batches, at most train.max_steps. Throws
/// ConfigError for a batch larger than an epoch, or checkpoints between micro-steps.
int64_t total_steps(const config::ExperimentConfig& cfg, const data::Loader& loader, int64_t world) {
  const int64_t per_epoch = loader.batches_per_epoch();
  if (per_epoch == 0)
    throw ConfigError(
        "loader.batch_size: " + std::to_string(cfg.loader.batch_size) + " is larger than the " +
        std::to_string(loader.shard_samples()) + " samples " +
        (world > 1 ? "each of the " + std::to_string(world) + " ranks gets" : "of the dataset") +
        " per epoch with drop_last; lower it or raise data.num_samples");
  if (cfg.train.checkpoint_every > 0 && cfg.train.checkpoint_every % cfg.dist.accumulate != 0)
    throw ConfigError("train.checkpoint_every: " + std::to_string(cfg.train.checkpoint_every) +
                      " must be a multiple of dist.accumulate (" + std::to_string(cfg.dist.accumulate) +
                      "), so that checkpoints fall between optimizer steps");
  const int64_t total = per_epoch * cfg.train.epochs;
  return cfg.train.max_steps > 0 ? std::min(total, cfg.train.max_steps) : total;
}

/// --resume: the checkpoint's state loaded into `trainer`; its step and epoch (0, 0 without).
std::pair<int64_t, int64_t> resume_from(Trainer& trainer, const TrainOptions& options, bool rank0) {
  if (!options.resume) return {0, 0};
  std::vector<std::string> notes;
  // A record damaged on disk would load as if whole: every record's CRC-32 first.
  if (models::identify(*options.resume) == models::FileKind::kTorchScript)
    models::verify_records(*options.resume);
  const auto at = trainer.load_checkpoint(*options.resume, trainer.group().size(), &notes);
  if (options.on_note && rank0) {
    for (const auto& n : notes) options.on_note(n);
    options.on_note("resumed from " + *options.resume + " at step " + std::to_string(at.first));
  }
  return at;
}

/// The run's checkpoints: written by rank 0 only (every rank holds the same parameters and
/// optimizer state), the newest train.keep_checkpoints kept.
class Checkpoints {
 public:
  Checkpoints(const config::ExperimentConfig& cfg, const TrainOptions& options, Trainer& trainer, bool rank0)
      : cfg_(cfg), options_(options), trainer_(trainer), rank0_(rank0) {}

  /// Writes the checkpoint of `step`; returns its path (on every rank).
  std::string write(int64_t step, int64_t epoch) {
    std::string path = (std::filesystem::path(cfg_.train.checkpoint_dir) /
                        (cfg_.name + "-step" + std::to_string(step) + ".pt"))
                           .string();
    if (!rank0_) return path;
    try {
      trainer_.save_checkpoint(path, step, epoch);
    } catch (const WriteError& e) {
      // Training stops here; the checkpoints written before are whole (each written atomically).
      const std::string last = !written_.empty() ? written_.back() : options_.resume.value_or("");
      throw WriteError(std::string(e.what()) + (last.empty() ? "; no checkpoint of this run was written"
                                                             : "; the last good checkpoint is " + last +
                                                                   " (continue with --resume " + last + ")"));
    }
    if (options_.on_note) options_.on_note("checkpoint " + path);
    if (written_.empty() || written_.back() != path) written_.push_back(path);
    // train.keep_checkpoints: the newest are kept, older ones of this run removed.
    while (cfg_.train.keep_checkpoints > 0 &&
           static_cast<int64_t>(written_.size()) > cfg_.train.keep_checkpoints) {
      std::error_code ec;
      std::filesystem::remove(written_.front(), ec);
      written_.erase(written_.begin());
    }
    return path;
  }

 private:
  const config::ExperimentConfig& cfg_;
  const TrainOptions& options_;
  Trainer& trainer_;
  const bool rank0_;
  std::vector<std::string> written_;  // this run's checkpoints, oldest first
};

/// Loss averaged over the ranks and the slowest rank's elapsed time, at log points (every rank
/// reaches them at the same step); also where the ranks agree to stop on an interrupt, so that
/// none is left waiting in an all-reduce for a rank that stopped.
struct Agreed {
  double loss = 0, secs = 0;
  bool interrupted = false;
};

Agreed agree(dist::Group& group, const TrainOptions& options, const at::Tensor& loss_now, double secs_here) {
  const bool stop_here = options.interrupted && options.interrupted->load();
  Agreed a;
  a.loss = loss_now.defined() ? loss_now.item<double>() : 0.0;
  a.secs = secs_here;
  a.interrupted = stop_here;
  if (group.size() > 1) {
    auto sums = group.sum({a.loss, stop_here ? 1.0 : 0.0});
    a.loss = sums[0] / static_cast<double>(group.size());
    a.interrupted = sums[1] > 0;
    a.secs = group.max({secs_here})[0];
  }
  return a;
}

/// The progress line's figures at a log point (options.on_progress).
void report_progress(const TrainOptions& options, const Agreed& a, int64_t step, int64_t start_step,
                     int64_t total, int64_t epoch, int64_t global_batch) {
  if (!options.on_progress) return;
  TrainProgress p;
  p.step = step;
  p.total_steps = total;
  p.epoch = epoch;
  p.loss = a.loss;
  p.samples_per_s = a.secs > 0 ? (step - start_step) * global_batch / a.secs : 0;
  p.eta_s = p.samples_per_s > 0 ? (total - step) * global_batch / p.samples_per_s : 0;
  options.on_progress(p);
}

/// --save-weights: the final weights as a torch.save(state_dict) file (rank 0).
void save_final_weights(const TrainOptions& options, Trainer& trainer, const std::string& last_checkpoint) {
  try {
    models::write_state_dict(*options.save_weights, models::state_dict(*trainer.model()), "--save-weights");
  } catch (const WriteError& e) {
    throw WriteError(std::string(e.what()) + "; training finished, its last checkpoint is " +
                     last_checkpoint);
  }
  if (options.on_note) options.on_note("weights " + *options.save_weights);
}

/// Checks, before any work, that where the results go can be written (rank 0): the checkpoint
/// folder, and the --save-weights file, which must not be one of the run's inputs.
void check_outputs(const config::ExperimentConfig& cfg, const TrainOptions& options) {
  files::prepare_folder(cfg.train.checkpoint_dir, "train.checkpoint_dir");
  if (!options.save_weights) return;
  files::check_writable(*options.save_weights, "--save-weights");
  files::check_not_input(*options.save_weights, "--save-weights",
                         {{"config", options.config_path},
                          {"checkpoint", options.resume.value_or("")},
                          {"model.weights file", cfg.model.weights.value_or("")}});
}

/// What rank 0 says before the first step: too little room for the files, bf16 emulated on
/// this CPU, and the notes on the weights loaded.
void say_before_start(const config::ExperimentConfig& cfg, const TrainOptions& options, Trainer& trainer,
                      const c10::Device& device) {
  warn_if_no_room(cfg, options, *trainer.model());
  if (device.is_cpu() && cfg.optim.amp == config::Amp::kBf16)
    if (const std::string why = bf16_emulated(runtime::cpu_info()); !why.empty())
      log::warn("optim.amp bf16: " + why + " (optim.amp off is faster here)");
  if (!options.on_note) return;
  for (const auto& n : trainer.weights_file_notes()) options.on_note(n);
  if (!trainer.weights_note().empty()) options.on_note(trainer.weights_note());
}

bool interrupted(const TrainOptions& options) { return options.interrupted && options.interrupted->load(); }

/// The training loop: the steps from where the run starts (0, or the resumed checkpoint's)
/// to its total, checkpointing on the way, and the summary at its end.
class TrainLoop {
 public:
  TrainLoop(const config::ExperimentConfig& cfg, const TrainOptions& options, Trainer& trainer,
            dist::Group& group, Checkpoints& checkpoints, int64_t total, std::pair<int64_t, int64_t> start)
      : cfg_(cfg),
        options_(options),
        trainer_(trainer),
        group_(group),
        checkpoints_(checkpoints),
        total_(total),
        global_batch_(cfg.loader.batch_size * group.size()),
        start_step_(start.first),
        step_(start.first),
        epoch_(start.second) {}

  /// Trains every epoch left; throws Interrupted (after a checkpoint) on an agreed stop.
  void run(data::Loader& loader, const c10::Device& device) {
    const int64_t per_epoch = loader.batches_per_epoch();
    while (step_ < total_) {
      epoch_ = step_ / per_epoch;
      loader.start_epoch(epoch_);
      // Skip the batches of this epoch that a resumed run already trained on.
      for (int64_t skip = step_ % per_epoch; skip > 0; --skip) loader.next();
      // On a GPU the next batch is copied on its own stream while this one trains.
      Feeder feeder([&loader] { return loader.next(); }, device);
      train_epoch(feeder);
    }
  }

  /// The summary, after the last checkpoint (unless a resumed run trained nothing: its
  /// checkpoint stays as it was).
  TrainSummary finish() {
    summary_.steps = step_;
    summary_.trained = step_ - start_step_;
    summary_.total = total_;
    if (summary_.trained > 0 || !options_.resume)
      checkpoint();
    else
      summary_.last_checkpoint = *options_.resume;
    const Agreed end = agree(group_, options_, loss_, clock_.ms() / 1000.0);
    summary_.final_loss = end.loss;
    summary_.samples_per_s = end.secs > 0 ? (step_ - start_step_) * global_batch_ / end.secs : 0;
    return summary_;
  }

 private:
  void checkpoint() { summary_.last_checkpoint = checkpoints_.write(step_, epoch_); }

  /// The steps of one epoch, until its batches or the run's steps end.
  void train_epoch(Feeder& feeder) {
    while (step_ < total_) {
      auto batch = feeder.next();
      if (!batch) break;
      auto [images, labels] = trainer_.to_device(*batch);
      loss_ = trainer_.step(images, labels);
      ++step_;
      const bool stop = stop_after_step();
      if (cfg_.train.checkpoint_every > 0 && step_ % cfg_.train.checkpoint_every == 0 && step_ < total_)
        checkpoint();
      if (stop) {
        checkpoint();
        throw Interrupted();
      }
    }
  }

  /// Whether the run stops after this step. Alone, at once on an interrupt; in a group, at the
  /// next step where every rank agrees (a log point, or about every kStopCheckS seconds). A log
  /// point also reports progress and times the stop checks.
  bool stop_after_step() {
    const bool log = step_ % cfg_.train.log_every == 0 || step_ == total_;
    const int64_t world = group_.size();
    bool stop = world == 1 && interrupted(options_);
    if (!log && world > 1 && step_ % stop_every_ == 0)
      stop = group_.sum({interrupted(options_) ? 1.0 : 0.0})[0] > 0;
    if (!log) return stop;
    const Agreed a = agree(group_, options_, loss_, clock_.ms() / 1000.0);
    stop_every_ = stop_check_interval(a.secs, step_ - start_step_, cfg_.train.log_every);
    report_progress(options_, a, step_, start_step_, total_, epoch_, global_batch_);
    return stop || a.interrupted;
  }

  const config::ExperimentConfig& cfg_;
  const TrainOptions& options_;
  Trainer& trainer_;
  dist::Group& group_;
  Checkpoints& checkpoints_;
  const int64_t total_;
  const int64_t global_batch_;  // samples per step over all ranks; the slowest rank sets the rate
  const int64_t start_step_;
  int64_t step_, epoch_;
  // Data parallel: the steps between the ranks' agreements on a stop signal, besides the log
  // points: every step until the first log point times them, then about every kStopCheckS
  // (every rank computes the same from the agreed figures).
  int64_t stop_every_ = 1;
  at::Tensor loss_;
  stats::Stopwatch clock_;
  TrainSummary summary_;
};

}  // namespace

TrainSummary train(const config::ExperimentConfig& cfg, const TrainOptions& options) {
  // Data parallel when the environment names a world (torchrun, Slurm, ptune launch): this
  // rank's device, its share of the CPU, the group, and its shard of every epoch.
  const c10::Device device = dist::rank_device(cfg.device);
  runtime::set_cpu_threads(dist::rank_cpu_threads(cfg.cpu_threads));
  auto group = dist::process_group(cfg.dist, device);
  const bool rank0 = group->rank() == 0;
  const int64_t world = group->size();
  if (rank0) check_outputs(cfg, options);
  Trainer trainer(cfg, device, group);
  if (rank0) say_before_start(cfg, options, trainer, device);
  data::Loader loader(make_dataset(cfg), loader_options(cfg, device, group->rank(), world));
  const int64_t total = total_steps(cfg, loader, world);
  const auto start = resume_from(trainer, options, rank0);
  Checkpoints checkpoints(cfg, options, trainer, rank0);
  TrainLoop loop(cfg, options, trainer, *group, checkpoints, total, start);
  loop.run(loader, device);
  runtime::synchronize(device);
  TrainSummary summary = loop.finish();
  if (options.on_note && rank0 && !trainer.graph_note().empty()) options.on_note(trainer.graph_note());
  if (options.save_weights && rank0) save_final_weights(options, trainer, summary.last_checkpoint);
  return summary;
}

std::optional<int64_t> checkpoint_step(const std::string& path) {
  try {
    if (models::identify(path) != models::FileKind::kTorchScript) return std::nullopt;
    torch::serialize::InputArchive archive;
    archive.load_from(path, torch::kCPU);
    c10::IValue arch;
    if (!archive.try_read("arch", arch)) return std::nullopt;
    torch::Tensor step;
    if (!archive.try_read("step", step)) return std::nullopt;
    return step.item<int64_t>();
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

EvalResult evaluate(const config::ExperimentConfig& cfg_in, const std::string& weights,
                    const std::atomic<bool>* interrupted) {
  config::ExperimentConfig cfg = cfg_in;
  cfg.model.weights = weights;
  cfg.loader.shuffle = false;
  cfg.loader.drop_last = false;
  // Data parallel: every rank evaluates its own shard (together they cover every sample
  // once), and the sums are added up over the ranks.
  const c10::Device device = dist::rank_device(cfg.device);
  runtime::set_cpu_threads(dist::rank_cpu_threads(cfg.cpu_threads));
  auto group = dist::process_group(cfg.dist, device);
  Trainer trainer(cfg, device);
  if (!trainer.weights_note().empty())
    throw DataError(trainer.weights_note() + "; evaluation needs a matching head");
  trainer.model()->eval();
  data::LoaderOptions lo = loader_options(cfg, device, group->rank(), group->size());
  lo.even_shards = false;
  data::Loader loader(make_dataset(cfg), lo);
  loader.start_epoch(0);
  at::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
  at::Tensor correct = torch::zeros({}, torch::TensorOptions().dtype(torch::kLong).device(device));
  int64_t n = 0;
  Feeder feeder([&loader] { return loader.next(); }, device);
  auto stopped = [interrupted] { return interrupted && interrupted->load(); };
  while (!stopped()) {
    auto batch = feeder.next();
    if (!batch) break;
    auto [images, labels] = trainer.to_device(*batch);
    auto [l, c] = trainer.evaluate(images, labels);
    loss_sum += l.to(torch::kFloat64);
    correct += c;
    n += labels.size(0);
  }
  if (stopped()) throw Interrupted();
  const std::vector<double> totals = group->sum(
      {loss_sum.item<double>(), static_cast<double>(correct.item<int64_t>()), static_cast<double>(n)});
  EvalResult r;
  r.samples = static_cast<int64_t>(totals[2]);
  r.loss = r.samples ? totals[0] / static_cast<double>(r.samples) : 0.0;
  r.top1 = r.samples ? totals[1] / static_cast<double>(r.samples) : 0.0;
  return r;
}

}  // namespace ptune::engine
