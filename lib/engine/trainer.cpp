#include "engine/trainer.hpp"

#include <array>
#include <cstdio>

#include <ATen/autocast_mode.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include "runtime/compat.hpp"
#include "data/fake_cifar.hpp"
#include "data/image_folder.hpp"
#include "runtime/cuda_support.hpp"
#include "runtime/device.hpp"
#include "engine/sgd.hpp"
#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/ranges.hpp"
#include "models/state_dict_io.hpp"

namespace ptune::engine {
namespace {

/// The torch.optim class of optim.kind, as the profiler's optimizer ranges name it.
std::string optimizer_class(config::OptimKind kind) {
  return kind == config::OptimKind::kAdamW ? "AdamW" : "SGD";
}

/// Autocast on for one scope (forward and loss), as Python's `with torch.autocast(...)`.
class AutocastScope {
 public:
  AutocastScope(c10::DeviceType device, bool enabled, at::ScalarType dtype)
      : device_(device), enabled_(enabled) {
    if (!enabled_) return;
    runtime::compat::set_autocast(device_, true, dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!enabled_) return;
    if (at::autocast::decrement_nesting() == 0) runtime::compat::clear_autocast_cache();
    runtime::compat::set_autocast(device_, false, at::kBFloat16);
  }

 private:
  c10::DeviceType device_;
  bool enabled_;
};

}  // namespace

data::LoaderOptions loader_options(const config::ExperimentConfig& cfg, const c10::Device& device,
                                   int64_t rank, int64_t world_size) {
  data::LoaderOptions o;
  o.batch_size = cfg.loader.batch_size;
  o.num_workers = cfg.loader.num_workers;
  o.prefetch = cfg.loader.prefetch;
  o.shuffle = cfg.loader.shuffle;
  o.drop_last = cfg.loader.drop_last;
  o.pin_memory = cfg.loader.pin_memory && device.is_cuda();
  o.float_output = !(cfg.loader.uint8_transfer || cfg.loader.gpu_resize);
  for (int c = 0; c < 3; ++c) {
    o.mean[c] = static_cast<float>(cfg.data.mean[c]);
    o.std[c] = static_cast<float>(cfg.data.std[c]);
  }
  o.seed = static_cast<uint64_t>(cfg.seed);
  o.rank = rank;
  o.world_size = world_size;
  return o;
}

std::shared_ptr<const data::Dataset> make_dataset(const config::ExperimentConfig& cfg) {
  config::validate(cfg, "");  // the cross-key rules (e.g. image_folder needs data.root)
  if (cfg.data.kind == config::DataKind::kFakeCifar) {
    // gpu_resize ships the 32x32 originals; the trainer resizes them on the device.
    const int64_t side = cfg.loader.gpu_resize ? data::FakeCifar::kSide : cfg.data.image_size;
    return std::make_shared<data::FakeCifar>(cfg.data.num_samples, cfg.model.num_classes,
                                             static_cast<uint64_t>(cfg.seed), side);
  }
  if (cfg.data.kind == config::DataKind::kImageFolder) {
    data::ImageFolderOptions o;
    o.root = *cfg.data.root;
    o.image_size = cfg.data.image_size;
    o.transform = cfg.data.transform == config::Transform::kEval ? data::ImageTransform::kEval
                                                                 : data::ImageTransform::kTrain;
    o.on_bad_file =
        cfg.data.on_bad_file == config::OnBadFile::kSkip ? data::OnBadFile::kSkip : data::OnBadFile::kError;
    o.max_pixels = cfg.data.max_image_pixels;
    auto folder = std::make_shared<data::ImageFolder>(std::move(o));
    const auto num_classes = static_cast<int64_t>(folder->classes().size());
    if (num_classes > cfg.model.num_classes)
      throw ConfigError("model.num_classes: " + std::to_string(cfg.model.num_classes) +
                        " is fewer than the " + std::to_string(num_classes) + " class folders under '" +
                        *cfg.data.root + "'");
    return folder;
  }
  throw ConfigError("data.kind: unknown dataset '" + std::string(config::name(cfg.data.kind)) + "'");
}

DeviceInput::DeviceInput(const config::ExperimentConfig& cfg, const c10::Device& device)
    : device_(device), image_size_(cfg.data.image_size), channels_last_(cfg.model.channels_last) {
  std::vector<float> scale(3), shift(3);
  for (int c = 0; c < 3; ++c) {
    scale[c] = static_cast<float>(1.0 / (255.0 * cfg.data.std[c]));
    shift[c] = static_cast<float>(-cfg.data.mean[c] / cfg.data.std[c]);
  }
  scale_ = torch::tensor(scale).view({1, 3, 1, 1}).to(device_);
  shift_ = torch::tensor(shift).view({1, 3, 1, 1}).to(device_);
  std::array<float, 3> mean{}, std{};
  for (int c = 0; c < 3; ++c) {
    mean[c] = static_cast<float>(cfg.data.mean[c]);  // as loader_options() passes them
    std[c] = static_cast<float>(cfg.data.std[c]);
  }
  norm_ = data::normalization(mean, std);
}

at::Tensor DeviceInput::take_buffer(at::IntArrayRef sizes) const {
  const auto format = channels_last_ ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  for (const at::Tensor& t : pool_)
    if (t.use_count() == 1 && t.storage().use_count() == 1 && t.sizes() == sizes) return t;
  at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(at::kFloat), format);
  constexpr size_t kMaxPooled = 4;  // a step's batch, the next one, and a synthetic row's fixed one
  if (pool_.size() < kMaxPooled) pool_.push_back(t);
  return t;
}

std::pair<at::Tensor, at::Tensor> DeviceInput::operator()(const data::Batch& batch) const {
  const bool non_blocking = device_.is_cuda() && batch.images.is_pinned();
  at::Tensor images, labels;
  {
    // A range only where a copy happens: not on the CPU, nor after the Feeder's copy.
    std::optional<runtime::compat::UserScope> range;
    if (batch.images.device().type() != device_.type()) range.emplace(ranges::kH2DCopy);
    images = batch.images.to(device_, non_blocking);
    labels = batch.labels.to(device_, non_blocking);
  }
  if (images.scalar_type() == at::kByte && device_.is_cpu() && images.size(1) == 3 &&
      images.size(2) == image_size_ && images.size(3) == image_size_ && images.is_contiguous()) {
    // uint8 batches on the CPU: the loader's own normalization (the same floats), in one pass
    // straight into the layout the model takes, into a buffer reused step after step. ATen's
    // to(float) and addcmul would make two passes and two fresh batch-sized allocations (which
    // glibc's malloc returns to the system and the next step faults in again), and run on
    // LibTorch's intra-op threads, whose spinning competes with the loader's workers for the
    // cores.
    runtime::compat::UserScope range(ranges::kToFloatNormalize);
    at::Tensor out = take_buffer(images.sizes());
    data::normalize(images.data_ptr<uint8_t>(), out.data_ptr<float>(), images.size(0),
                    images.size(2) * images.size(3), norm_, channels_last_);
    return {out, labels};
  }
  if (images.scalar_type() == at::kByte) {
    // uint8 transfer: one multiply-add per pixel on the device, same formula as the loader's.
    runtime::compat::UserScope range(ranges::kToFloatNormalize);
    at::Tensor x = images.to(at::kFloat);
    if (x.size(2) != image_size_ || x.size(3) != image_size_) {
      // gpu_resize: the same bilinear (antialiased when shrinking) resize as the host's,
      // without the host's rounding to uint8 in between.
      x = at::_upsample_bilinear2d_aa(x, {image_size_, image_size_}, /*align_corners=*/false);
    }
    images = at::addcmul(shift_, x, scale_);
  }
  if (channels_last_) images = images.contiguous(at::MemoryFormat::ChannelsLast);
  return {images, labels};
}

int64_t Trainer::warmup_steps_needed(const config::ExperimentConfig& cfg) {
  if (cfg.optim.cuda_graphs) return kGraphWarmupSteps + 1;
  return cfg.optim.cudnn_benchmark ? 1 : 0;
}

Trainer::Trainer(const config::ExperimentConfig& cfg, const c10::Device& device,
                 std::shared_ptr<dist::Group> group)
    : cfg_(cfg),
      device_(device),
      input_(cfg, device),
      group_(group ? std::move(group) : std::make_shared<dist::Group>()) {
  if (cfg.loader.pin_memory) runtime::require_cuda(device, "loader.pin_memory");
  if (cfg.optim.cudnn_benchmark) runtime::require_cuda(device, "optim.cudnn_benchmark");
  if (cfg.optim.amp == config::Amp::kFp16) runtime::require_cuda(device, "optim.amp=fp16");
  if (cfg.optim.cuda_graphs) runtime::require_cuda(device, "optim.cuda_graphs");
  if (device.is_cuda()) runtime::cuda::set_cudnn_benchmark(cfg.optim.cudnn_benchmark);
  config::validate(cfg, "");  // the cross-key rules, for configs built in code too
  if (cfg.optim.cuda_graphs && group_->distributed())
    throw ConfigError("optim.cuda_graphs: not supported in data-parallel runs (world size " +
                      std::to_string(group_->size()) + "); run one process or turn it off");

  torch::manual_seed(static_cast<uint64_t>(cfg.seed));
  model_ = models::make(cfg.model.arch, cfg.model.num_classes, cfg.data.image_size);
  if (cfg.model.weights) {
    weights_note_ = models::load_into(
        *model_, models::read_state_dict(*cfg.model.weights, &weights_file_notes_), *cfg.model.weights);
  }
  model_->to(device_);
  if (cfg.model.channels_last) {
    torch::NoGradGuard no_grad;
    for (auto& p : model_->parameters())
      if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
  }
  model_->train();
  if (group_->distributed()) {
    // As DDP's constructor: every rank starts from rank 0's parameters and buffers (BatchNorm
    // running statistics included); then gradients are averaged every step.
    dist::broadcast_module(*model_, *group_, 0);
    sync_ = std::make_unique<dist::GradSync>(model_->parameters(), group_, cfg.dist.bucket_mb);
  }

  if (cfg.optim.kind == config::OptimKind::kSgd) {
    optimizer_ =
        std::make_unique<torch::optim::SGD>(model_->parameters(), torch::optim::SGDOptions(cfg.optim.lr)
                                                                      .momentum(cfg.optim.momentum)
                                                                      .weight_decay(cfg.optim.weight_decay));
  } else {
    optimizer_ = std::make_unique<torch::optim::AdamW>(
        model_->parameters(), torch::optim::AdamWOptions(cfg.optim.lr).weight_decay(cfg.optim.weight_decay));
  }

  step_range_ = ranges::optimizer_step(optimizer_class(cfg.optim.kind));
  zero_grad_range_ = ranges::optimizer_zero_grad(optimizer_class(cfg.optim.kind));
  if (cfg.optim.amp == config::Amp::kFp16) scaler_.emplace();
  if (cfg.optim.cuda_graphs) graph_ = std::make_unique<GraphStep>(device_.index());
}

at::Tensor Trainer::step(const at::Tensor& images, const at::Tensor& labels) {
  if (!graph_ || !graph_note_.empty()) return run_step(images, labels);
  return graph_step(images, labels);
}

at::Tensor Trainer::graph_step(const at::Tensor& images, const at::Tensor& labels) {
  if (static_images_.defined() &&
      (images.sizes() != static_images_.sizes() || labels.sizes() != static_labels_.sizes())) {
    // A batch of another shape (a partial last batch) cannot replay the captured step.
    ++graph_misfits_;
    graph_misfit_size_ = images.size(0);
    return run_step(images, labels);
  }
  if (!static_images_.defined()) {
    static_images_ = at::empty_like(images);
    static_labels_ = at::empty_like(labels);
  }
  static_images_.copy_(images, /*non_blocking=*/true);
  static_labels_.copy_(labels, /*non_blocking=*/true);
  auto body = [this] { static_loss_ = run_step(static_images_, static_labels_); };
  if (!graph_->captured()) {
    if (graph_warmup_done_ < kGraphWarmupSteps) {
      graph_->run_eager(body);
      ++graph_warmup_done_;
      return static_loss_;
    }
    if (!graph_->capture(body)) {
      graph_note_ = "optim.cuda_graphs: capture failed (" + graph_->failure() + "); ran eagerly";
      // The captured body ran its host side part way: forget that step's bookkeeping
      // (gradients that were never computed, the scaler's unscale/step state).
      if (scaler_) scaler_->reset_iteration();
      for (auto& p : model_->parameters()) p.mutable_grad().reset();
      micro_ = 0;
      return run_step(images, labels);
    }
  }
  {
    runtime::compat::UserScope range(ranges::kGraphReplay);
    graph_->replay();
  }
  // The next replay overwrites static_loss_: hand out a copy.
  return static_loss_.clone();
}

std::string Trainer::graph_note() const {
  if (!graph_note_.empty() || graph_misfits_ == 0) return graph_note_;
  return "optim.cuda_graphs: " + std::to_string(graph_misfits_) +
         (graph_misfits_ == 1 ? " batch" : " batches") + " of another shape (" +
         std::to_string(graph_misfit_size_) + " samples, not " + std::to_string(static_images_.size(0)) +
         ") ran eagerly";
}

at::Tensor Trainer::run_step(const at::Tensor& images, const at::Tensor& labels) {
  const int64_t accumulate = cfg_.dist.accumulate;
  const bool last = micro_ + 1 >= accumulate;  // the micro-step that all-reduces and updates
  if (micro_ == 0) {
    runtime::compat::UserScope range(zero_grad_range_);
    zero_grad(*optimizer_, cfg_.optim.set_to_none);
  }
  at::Tensor loss;
  {
    runtime::compat::UserScope range(ranges::kForward);
    AutocastScope autocast(device_.type(), cfg_.optim.amp != config::Amp::kOff,
                           cfg_.optim.amp == config::Amp::kFp16 ? at::kHalf : at::kBFloat16);
    at::Tensor logits = model_->forward(images);
    loss = torch::nn::functional::cross_entropy(logits.to(at::kFloat), labels);
  }
  // Mean over the A micro-batches: the gradient of the large batch, as in PyTorch's recipe.
  at::Tensor objective = accumulate > 1 ? loss / static_cast<double>(accumulate) : loss;
  if (sync_) sync_->prepare(/*sync=*/last);  // no_sync on the other micro-steps
  {
    runtime::compat::UserScope range(ranges::kBackward);
    if (scaler_)
      scaler_->scale(objective).backward();
    else
      objective.backward();
  }
  if (!last) {
    ++micro_;
    return loss.detach();
  }
  micro_ = 0;
  // Gradients are averaged before the scaler unscales them (and checks for inf/NaN): every
  // rank then sees the same inf and skips the same steps.
  if (sync_) {
    runtime::compat::UserScope range(ranges::kGradSync);
    sync_->finish();
  }
  runtime::compat::UserScope range(step_range_);
  if (scaler_) {
    // SGD: the fused kernel skips on the device where found_inf is set (as
    // torch.optim.SGD(fused=True)), so neither eager steps nor a captured graph wait for the
    // device; AdamW: skipped on the host, which reads found_inf once per step (as PyTorch's
    // GradScaler does for non-fused optimizers).
    if (cfg_.optim.kind == config::OptimKind::kSgd)
      scaler_->step_masked(*optimizer_);
    else
      scaler_->step(*optimizer_);
    scaler_->update();
  } else if (auto* sgd = dynamic_cast<torch::optim::SGD*>(optimizer_.get())) {
    fused_sgd_step(*sgd);  // a few multi-tensor kernels, not several per parameter
  } else {
    optimizer_->step();
  }
  return loss.detach();
}

std::pair<at::Tensor, at::Tensor> Trainer::evaluate(const at::Tensor& images, const at::Tensor& labels) {
  torch::NoGradGuard no_grad;
  AutocastScope autocast(device_.type(), cfg_.optim.amp != config::Amp::kOff,
                         cfg_.optim.amp == config::Amp::kFp16 ? at::kHalf : at::kBFloat16);
  at::Tensor logits = model_->forward(images).to(at::kFloat);
  at::Tensor loss = torch::nn::functional::cross_entropy(
      logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
  at::Tensor correct = logits.argmax(1).eq(labels).sum();
  return {loss, correct};
}

void Trainer::save_checkpoint(const std::string& path, int64_t step, int64_t epoch) const {
  torch::serialize::OutputArchive archive;
  torch::serialize::OutputArchive model_archive, optim_archive;
  model_->save(model_archive);
  optimizer_->save(optim_archive);
  archive.write("model", model_archive);
  archive.write("optimizer", optim_archive);
  archive.write("step", torch::tensor(step));
  archive.write("epoch", torch::tensor(epoch));
  archive.write("arch", c10::IValue(cfg_.model.arch));
  archive.write("num_classes", c10::IValue(cfg_.model.num_classes));
  archive.write("optim_kind", c10::IValue(std::string(config::name(cfg_.optim.kind))));
  archive.write("amp", c10::IValue(std::string(config::name(cfg_.optim.amp))));
  archive.write("batch_size", c10::IValue(cfg_.loader.batch_size));
  archive.write("world_size", c10::IValue(static_cast<int64_t>(group_->size())));
  if (scaler_) scaler_->save(archive);
  // Through ptune's checked writer: a full disk is a WriteError raised here, never an exception
  // from the destructor of LibTorch's zip writer.
  files::write_atomically(path, "train.checkpoint_dir",
                          [&](files::Output& out) { archive.save_to(out.sink()); });
}

namespace {

/// A checkpoint's string entry `key`; nullopt when it has none (older ptune versions).
std::optional<std::string> archive_text(torch::serialize::InputArchive& archive, const char* key) {
  c10::IValue v;
  if (!archive.try_read(key, v) || !v.isString()) return std::nullopt;
  return v.toStringRef();
}

/// A checkpoint's integer entry `key`; nullopt when it has none (older ptune versions).
std::optional<int64_t> archive_int(torch::serialize::InputArchive& archive, const char* key) {
  c10::IValue v;
  if (!archive.try_read(key, v) || !v.isInt()) return std::nullopt;
  return v.toInt();
}

/// Opens `path` as a ptune checkpoint's archive; throws DataError naming what it is instead.
void open_checkpoint(torch::serialize::InputArchive& archive, const std::string& path,
                     const c10::Device& device) {
  const models::FileKind kind = models::identify(path);
  if (kind == models::FileKind::kTorchSave)
    throw DataError(
        path +
        ": a weights file (a state_dict), not a ptune checkpoint: start from it with --set model.weights=" +
        path);
  if (const std::string why = models::unreadable_kind(path, kind); !why.empty())
    throw DataError("--resume: " + why);
  try {
    archive.load_from(path, device);
  } catch (const c10::Error&) {
    throw DataError(path + ": not a ptune checkpoint (a TorchScript archive of another kind, or damaged)");
  }
}

/// The checkpoint's model against the config's: a DataError for another architecture or
/// number of classes.
void check_checkpoint_model(torch::serialize::InputArchive& archive, const std::string& path,
                            const config::ModelConfig& model) {
  const auto arch = archive_text(archive, "arch");
  if (!arch) throw DataError(path + ": not a ptune checkpoint (no model architecture recorded)");
  if (*arch != model.arch)
    throw DataError(path + ": checkpoint of a " + *arch + ", the config's model is " + model.arch);
  if (const auto n = archive_int(archive, "num_classes"); n && *n != model.num_classes)
    throw DataError(path + ": checkpoint of a model with " + std::to_string(*n) +
                    " classes, the config's model.num_classes is " + std::to_string(model.num_classes) +
                    "; resume with the same number, or start a new run from its weights");
}

/// The checkpoint's optimizer and AMP mode against the config's: a DataError for another
/// optimizer or fp16 on one side only; another AMP mode is said in `notes`.
void check_checkpoint_optim(torch::serialize::InputArchive& archive, const std::string& path,
                            const config::OptimConfig& optim, std::vector<std::string>* notes) {
  const std::string optim_kind = config::name(optim.kind), amp_now = config::name(optim.amp);
  if (const auto k = archive_text(archive, "optim_kind"); k && *k != optim_kind)
    throw DataError(path + ": checkpoint of an " + *k + " optimizer, the config's optim.kind is " +
                    optim_kind + "; resume with the same optimizer (its state cannot become another's)");
  const auto amp = archive_text(archive, "amp");
  if (!amp || *amp == amp_now) return;
  if (config::enum_from<config::Amp>(*amp) == config::Amp::kFp16 || optim.amp == config::Amp::kFp16)
    throw DataError(path + ": checkpoint written with optim.amp " + *amp + ", the config says " + amp_now +
                    "; fp16's loss scale lives in the checkpoint: resume with the same optim.amp");
  if (notes) notes->push_back("resuming with optim.amp " + amp_now + " (the checkpoint's was " + *amp + ")");
}

/// Another batch size or number of ranks than the checkpoint's, said in `notes`.
void note_checkpoint_changes(torch::serialize::InputArchive& archive, int64_t batch_size, int64_t world_size,
                             std::vector<std::string>* notes) {
  if (!notes) return;
  if (const auto b = archive_int(archive, "batch_size"); b && *b != batch_size)
    notes->push_back("resuming with loader.batch_size " + std::to_string(batch_size) +
                     " (the checkpoint's was " + std::to_string(*b) +
                     "): the step count goes on, each step now takes the new batch size");
  if (const auto w = archive_int(archive, "world_size"); w && *w != world_size)
    notes->push_back("resuming on " + std::to_string(world_size) +
                     " rank(s) (the checkpoint was written by " + std::to_string(*w) +
                     "): the global batch changes with the number of ranks");
}

}  // namespace

std::pair<int64_t, int64_t> Trainer::load_checkpoint(const std::string& path, int64_t world_size,
                                                     std::vector<std::string>* notes) {
  torch::serialize::InputArchive archive;
  open_checkpoint(archive, path, device_);
  // What the checkpoint was written with against this config; checkpoints of older ptune
  // versions lack the newer keys, which are then not checked.
  check_checkpoint_model(archive, path, cfg_.model);
  check_checkpoint_optim(archive, path, cfg_.optim, notes);
  note_checkpoint_changes(archive, cfg_.loader.batch_size, world_size, notes);
  try {
    torch::serialize::InputArchive model_archive, optim_archive;
    archive.read("model", model_archive);
    archive.read("optimizer", optim_archive);
    model_->load(model_archive);
    optimizer_->load(optim_archive);
    if (scaler_) scaler_->load(archive);
    micro_ = 0;
    at::Tensor step, epoch;
    archive.read("step", step);
    archive.read("epoch", epoch);
    return {step.item<int64_t>(), epoch.item<int64_t>()};
  } catch (const c10::Error& e) {
    throw DataError("cannot resume from '" + path + "': " + message_of(e));
  }
}

}  // namespace ptune::engine
